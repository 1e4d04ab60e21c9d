"""How profan scales to 1,000 ranks: input bytes, wall time, peak RSS and report sizes per cluster size.

    python bench/bench_scale.py --ranks 1 16 64 256 1000 --data /tmp/scale   # clusters generated once, then reused
    python bench/bench_scale.py --ranks 64 --jobs 1 --formats json md xlsx

Each cluster is a synthetic Ascend job (`profan.synth`: 1 layer, 2 steps, tensor-parallel blocks of 8 so the
EP/DP groups hold ranks/8 ranks, a compute straggler) analysed in a fresh process (`_child`): the analysis, then
each report written, each timed; peak RSS is the process's and its workers' (``ru_maxrss``). Prints one Markdown
table row per size, plus per-core throughput (input bytes per second of one process's read) for the projection
in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HEADER = (
    "| ranks | input MB | read s | analyse s | json s | md s | xlsx s | RSS after analysis MiB | peak RSS MiB "
    "| JSON MB | MD KB | xlsx MB | MB/s read |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def generate(out: Path, ranks: int) -> None:
    """A cluster of ``ranks`` small ranks (written once; reused when ``out`` holds one)."""
    from profan.synth import generate as synth

    if (out / "ground_truth.json").exists():
        return
    tp = 8 if ranks % 8 == 0 else 1
    straggler = ranks // 2 + 1 if ranks > 2 else None
    synth(out, ranks=ranks, tp=tp, layers=1, steps=2, seed=1, trace=False, straggler_rank=straggler)


def input_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "ground_truth.json")


def _child(data: str, jobs: int, formats: list[str], out_dir: str) -> None:
    """In a fresh process: analyse, write each format, print the timings and sizes as JSON."""
    import profan
    from profan.render import render

    t0 = time.perf_counter()
    report = profan.analyze(data, jobs=jobs)
    got = {"analysis_s": time.perf_counter() - t0, **report.meta["timings_s"], "sizes": {}, "render_s": {}}
    got["analysis_rss_mib"] = _peak_mib()  # before any report is written
    for fmt in formats:
        target = Path(out_dir) / f"report.{fmt}"
        t = time.perf_counter()
        render(report, fmt, target)
        got["render_s"][fmt] = time.perf_counter() - t
        got["sizes"][fmt] = target.stat().st_size
    got["peak_rss_mib"] = _peak_mib()
    print(json.dumps(got))


def _peak_mib() -> float:
    """Peak RSS of this process or of its largest worker so far."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, kids) / 1024


def measure(data: Path, jobs: int, formats: list[str], out_dir: Path) -> dict:
    from profan.app.cli import JEMALLOC_ENV, JEMALLOC_SETTINGS

    # the allocator settings the command line sets for itself (profan.app.cli.main)
    env = {**os.environ, "PROFAN_NO_CACHE": "1", JEMALLOC_ENV: os.environ.get(JEMALLOC_ENV, JEMALLOC_SETTINGS)}
    cmd = [sys.executable, __file__, "--child", str(data), "--jobs", str(jobs), "--out", str(out_dir), "--formats"]
    done = subprocess.run([*cmd, *formats], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(n: int, nbytes: int, got: dict) -> str:
    r, s = got["render_s"], got["sizes"]

    def cell(d: dict, k: str, scale: float = 1.0, digits: int = 2) -> str:
        return f"{d[k] / scale:,.{digits}f}" if k in d else "—"

    return (
        f"| {n:,} | {nbytes / 1e6:,.1f} | {got['read']:.2f} | {got['analyse']:.2f} | {cell(r, 'json')} | "
        f"{cell(r, 'md')} | {cell(r, 'xlsx')} | {cell(got, 'analysis_rss_mib', 1, 0)} | {got['peak_rss_mib']:,.0f} | "
        f"{cell(s, 'json', 1e6, 1)} | "
        f"{cell(s, 'md', 1e3, 0)} | {cell(s, 'xlsx', 1e6, 1)} | {nbytes / 1e6 / got['read']:,.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 16, 64, 256, 1000])
    ap.add_argument("--jobs", type=int, default=1, help="processes reading ranks (1: per-core throughput)")
    ap.add_argument("--formats", nargs="+", default=["json", "md", "xlsx"])
    ap.add_argument("--data", type=Path, default=Path("/tmp/profan-bench-scale"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", type=str, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.jobs, a.formats, str(a.out))
        return
    out = a.out or a.data / "reports"
    out.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    for n in a.ranks:
        data = a.data / f"r{n}"
        generate(data, n)
        print(row(n, input_bytes(data), measure(data, a.jobs, a.formats, out)), flush=True)


if __name__ == "__main__":
    main()
