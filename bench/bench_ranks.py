"""How analysis cost grows with the number of ranks: synthetic clusters of 1…64 ranks, sequential vs process pool.

    python bench/bench_ranks.py --ranks 1 8 16 32 64 --layers 16 --steps 2 --jobs 1 2

Prints one line per (ranks, jobs): wall seconds of ``profan.analyze`` (read + analyse), per-rank cost, and the
ratio to the 1-rank time. Data goes to a temporary directory (or --data DIR, reused when present).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import profan
from profan.synth import generate


def _cpu() -> float:
    """user+sys seconds of this process and its finished children (the worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 8, 16, 32, 64])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--data", type=Path, default=None)
    a = ap.parse_args()
    base = a.data or Path(tempfile.mkdtemp(prefix="profan-bench-ranks-"))
    single = {}
    for n in a.ranks:
        d = base / f"r{n}_l{a.layers}_s{a.steps}"
        if not d.exists():
            t = time.perf_counter()
            generate(d, ranks=n, layers=a.layers, steps=a.steps, seed=1, trace=False)
            print(f"generated {n} ranks in {time.perf_counter() - t:.1f} s -> {d}", flush=True)
        rows = sum(1 for p in d.rglob("kernel_details.csv") for _ in p.open()) - n
        for j in a.jobs:
            profan.analyze(d, jobs=j)  # warm (imports, page cache)
            t = time.perf_counter()
            c0 = _cpu()
            rep = profan.analyze(d, jobs=j)
            wall = time.perf_counter() - t
            cpu = _cpu() - c0
            single.setdefault(j, wall if n == min(a.ranks) else None)
            ratio = wall / single[j] if single.get(j) else float("nan")
            print(
                f"ranks={n:3d} jobs={j} kernel_rows={rows:8d} wall={wall:6.2f}s per_rank={1000 * wall / n:7.1f}ms "
                f"x1rank={ratio:5.1f} cpu={cpu:6.2f}s read={rep.meta['timings_s']['read']:.2f}s "
                f"analyse={rep.meta['timings_s']['analyse']:.2f}s findings={len(rep.findings)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
