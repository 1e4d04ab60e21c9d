"""Generate an N-rank Ascend job by cloning real rank directories, to check reports stay usable at scale.

Each synthetic rank is a copy of one rank of a real fixture (files hard-linked when the filesystem allows, else
copied), with its ``profiler_info_{rank}.json`` renamed so discovery assigns the new rank id. The bodies stay
byte-for-byte those of the real profile, so every cited line can still be read back.

    python bench/gen_synthetic_report.py OUT_DIR --ranks 64
    profan analyze OUT_DIR --format html -o big.html
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "msinsight-qwen3-4rank-2025q4"
_INFO = re.compile(r"^profiler_info_\d+\.json$")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def clone_rank(src_rank: Path, dst_root: Path, rank: int) -> Path:
    """Copy one rank directory as `rank_{rank}_ascend_pt` with `profiler_info_{rank}.json`."""
    dst = dst_root / f"rank_{rank}_ascend_pt"
    for path in sorted(src_rank.rglob("*")):
        rel = path.relative_to(src_rank)
        if path.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
            continue
        name = f"profiler_info_{rank}.json" if _INFO.match(path.name) else path.name
        target = dst / rel.parent / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(path, target)
    return dst


def generate(out: Path, ranks: int = 64, fixture: Path = FIXTURE) -> Path:
    """Write `ranks` rank directories into `out`, cycling through the fixture's rank directories."""
    sources = sorted(p for p in fixture.iterdir() if p.is_dir())
    if not sources:
        raise SystemExit(f"no rank directories in {fixture}")
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        clone_rank(sources[r % len(sources)], out, r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    args = ap.parse_args()
    generate(args.out, args.ranks, args.fixture)
    print(f"wrote {args.ranks} ranks to {args.out}")


if __name__ == "__main__":
    main()
