"""Benchmark: chrome-trace ingest, profan vs stdlib json + pandas DataFrame of the same events.

Builds (or reuses) a synthetic Kineto trace of at least ``--size-mb`` by repeating the real events of a bundled
trace (default: ``fixtures/torch/nccl_a100_1rank``), each repetition shifted in time, then measures each
contender in a fresh subprocess (wall time, and peak RSS via ``getrusage``):

* ``profan``   — ``profan.sources.chrome_trace.parse`` (all events, the columns profan uses), cache off;
* ``baseline`` — ``json.load`` + ``pandas.DataFrame(traceEvents)`` (what per-row readers do).

Not a test: run it by hand. ``pip install pandas`` is needed for the baseline only.

    python bench/bench_trace.py --size-mb 600
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent / "fixtures" / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"


def make_trace(out: Path, size_mb: int, source: Path = DEFAULT_SOURCE) -> tuple[int, int]:
    """Write a compact Kineto trace >= size_mb by repeating the source's events, shifted in time; metadata events
    and the string-pid instants are written once, as in one long real trace. Returns (bytes, events)."""
    with gzip.open(source, "rb") if source.suffix == ".gz" else open(source, "rb") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    target = size_mb * 1024 * 1024
    n = 0
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(
            '{"schemaVersion": 1, "distributedInfo": '
            + json.dumps(head.get("distributedInfo"))
            + ', "deviceProperties": '
            + json.dumps(head.get("deviceProperties"))
            + ', "traceEvents": ['
        )
        rep = 0
        first = True
        while fh.tell() < target:
            shift = rep * span
            parts = []
            for e in events:
                if rep and (e.get("ph") == "M" or not isinstance(e.get("pid"), int)):
                    continue  # process/thread metadata and the "Traces" instants appear once per trace
                if isinstance(e.get("ts"), int | float):
                    e = {**e, "ts": round(e["ts"] + shift, 3)}
                parts.append(json.dumps(e, separators=(",", ":")))
            fh.write(("" if first else ",") + ",".join(parts))
            first = False
            n += len(parts)
            rep += 1
        fh.write('], "traceName": "synthetic"}')
    return out.stat().st_size, n


def _child(kind: str, path: str) -> None:
    t = time.perf_counter()
    if kind == "profan":
        from profan.sources.chrome_trace import parse

        rows = parse(Path(path)).events.height
    else:
        import pandas as pd

        with open(path, "rb") as fh:
            doc = json.load(fh)
        rows = len(pd.DataFrame(doc["traceEvents"]))
    wall = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "kind": kind,
                "rows": rows,
                "wall_s": round(wall, 2),
                "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
                "peak_rss_mb": round(ru.ru_maxrss / 1024),
            }
        )
    )


def measure(kind: str, path: Path) -> dict:
    env = {**os.environ, "PROFAN_NO_CACHE": "1"}
    res = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=600)
    ap.add_argument("--trace", type=Path, default=Path("/tmp/profan_bench_trace.json"))
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="alternate the contenders N times; report the fastest run of each (a shared machine's load varies)",
    )
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(*a.child)
        return
    if not a.trace.exists() or a.trace.stat().st_size < a.size_mb * 1024 * 1024:
        t = time.perf_counter()
        size, n = make_trace(a.trace, a.size_mb, a.source)
        print(f"built {a.trace}: {size / 2**20:,.0f} MiB, {n:,} events in {time.perf_counter() - t:.1f} s")
    size_mb = a.trace.stat().st_size / 2**20
    runs: dict[str, list[dict]] = {"profan": [], "baseline": []}
    for _ in range(a.repeat):
        runs["profan"].append(measure("profan", a.trace))
        if not a.skip_baseline:
            runs["baseline"].append(measure("baseline", a.trace))
    p = min(runs["profan"], key=lambda r: r["wall_s"])
    print(
        f"profan   : {p['rows']:,} events kept, {p['wall_s']} s, peak RSS {p['peak_rss_mb']:,} MiB "
        f"({p['peak_rss_mb'] / size_mb:.2f}x file size {size_mb:,.0f} MiB), cpu {p['cpu_s']} s  runs: "
        + ", ".join(str(r["wall_s"]) for r in runs["profan"])
    )
    if runs["baseline"]:
        b = min(runs["baseline"], key=lambda r: r["wall_s"])
        print(
            f"baseline : {b['rows']:,} events, {b['wall_s']} s, peak RSS {b['peak_rss_mb']:,} MiB "
            f"(json.load + pandas.DataFrame), cpu {b['cpu_s']} s  runs: "
            + ", ".join(str(r["wall_s"]) for r in runs["baseline"])
        )
        print(f"speed-up : {b['wall_s'] / p['wall_s']:.1f}x   (target >= 5x; RSS target <= 2x file size)")


if __name__ == "__main__":
    main()
