"""Benchmark: chrome-trace ingest, profan vs stdlib json + pandas DataFrame of the same events.

Builds (or reuses) a synthetic trace of at least ``--size-mb`` by repeating the real events of a bundled trace,
each repetition shifted in time, then measures each contender in a fresh subprocess under ``/usr/bin/time -v``
(wall and CPU time, peak RSS), the contenders interleaved:

* ``profan``   — ``profan.sources.trace.chrome.parse`` (all events, the columns profan uses), cache off;
* ``profan-rank`` (``--ascend`` only) — what the per-rank map reads of a trace_view.json: the trace_view reader
  (steps, Overlap Analysis split and blocks, HCCL ops and planes) and the HCCL plane tasks, cache off;
* ``baseline`` — ``json.load`` + ``pandas.DataFrame(traceEvents)`` (what per-row readers such as HTA do).

Two kinds of trace:

* Kineto (default): the events of ``fixtures/torch/nccl_a100_1rank``; the ``{"traceEvents": [...]}`` document.
* ``--ascend``: an Ascend ``trace_view.json`` (a bare event array), the real events of a bundled rank's file copied
  byte for byte, only each repetition's ``ts`` (a string of epoch µs) shifted; metadata events written once.
  It is written to ``bench/data/`` (gitignored).

Not a test: run it by hand. ``pip install pandas`` is needed for the baseline only.

    python bench/bench_trace.py --size-mb 600
    python bench/bench_trace.py --ascend --size-mb 770 --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from pathlib import Path

import msgspec
from bench_kernels import timed

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent / "fixtures" / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"
ASCEND_SOURCE = (
    HERE.parent
    / "fixtures/ascend/msinsight-alexnet-2rank-2025/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
)
RSS_TARGET = 1.5  # issue 40: peak RSS against the trace_view.json file
_TS = re.compile(rb'"ts": "(\d+)\.')


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


def make_ascend_trace(out: Path, size_mb: int, source: Path = ASCEND_SOURCE) -> tuple[int, int]:
    """Write a trace_view.json >= size_mb from the source's events, each copied byte for byte but for the integer
    part of its ``ts`` string, shifted by a whole repetition's span; metadata events written once. Returns (bytes,
    events)."""
    raw = source.read_bytes()
    spans = [bytes(r) for r in msgspec.json.decode(raw, type=list[msgspec.Raw])]
    events = json.loads(raw)
    timed_events = [e for e in events if e.get("ts") is not None]
    t0 = min(float(e["ts"]) for e in timed_events)
    span = int(max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed_events) - t0) + 1000
    meta = [r for r, e in zip(spans, events, strict=True) if e.get("ph") == "M"]
    rest = [r for r, e in zip(spans, events, strict=True) if e.get("ph") != "M"]
    target, n, rep = size_mb * 1024 * 1024, len(meta), 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        fh.write(b"[" + b", ".join(meta))
        while fh.tell() < target:
            shift = rep * span

            def moved(m: re.Match, shift: int = shift) -> bytes:
                return b'"ts": "%d.' % (int(m.group(1)) + shift)

            fh.write(b", " + b", ".join(_TS.sub(moved, r) for r in rest))
            n += len(rest)
            rep += 1
        fh.write(b"]")
    return out.stat().st_size, n


def _child(kind: str, path: str) -> None:
    if kind == "profan":
        from profan.sources.trace.chrome import parse

        rows = parse(Path(path)).events.height
    elif kind == "profan-rank":
        from profan.sources.trace import ascend_view as trace_view
        from profan.sources.trace import hccl_tasks

        trace = trace_view.load(Path(path))[0]
        rows = trace.events.height
        hccl_tasks.plane_tasks(trace)  # as the per-rank map does (`rankmap._read_traces`)
    else:
        import pandas as pd

        with open(path, "rb") as fh:
            doc = json.load(fh)
        rows = len(pd.DataFrame(doc["traceEvents"] if isinstance(doc, dict) else doc))
    print(rows)


def measure(kind: str, path: Path, tree: Path | None = None) -> dict:
    """One fresh process of ``kind`` under /usr/bin/time -v, profan's cache off; ``tree``: import profan from
    that source tree instead (``--before``)."""
    env = {"PROFAN_NO_CACHE": "1", **({"PYTHONPATH": str(tree)} if tree else {})}
    r = timed([sys.executable, __file__, "--child", kind, str(path)], HERE.parent, env)
    return {
        "rows": int(r["stdout"].split()[-1]),
        "wall_s": round(r["wall_s"], 2),
        "cpu_s": round(r["cpu_s"], 2),
        "peak_rss_mb": round(r["rss_mib"]),
    }


def report(runs: dict[str, list[dict]], size_mb: float, target: float) -> None:
    """Each contender's runs, best, CPU and RSS against the file; the baseline's best over each profan side's."""
    print("| side | wall s (runs) | best | CPU s best | peak RSS MiB | RSS / file |")
    print("|---|---|---:|---:|---:|---:|")
    for kind, rs in runs.items():
        best = min(rs, key=lambda r: r["wall_s"])
        rss = max(r["peak_rss_mb"] for r in rs)
        walls = ", ".join(str(r["wall_s"]) for r in rs)
        print(
            f"| {kind} | {walls} | {best['wall_s']} | {min(r['cpu_s'] for r in rs)} | {rss:,} | {rss / size_mb:.2f}× |"
        )
    if runs.get("baseline"):
        base = min(r["wall_s"] for r in runs["baseline"])
        base_cpu = min(r["cpu_s"] for r in runs["baseline"])
        for kind in runs:
            if kind != "baseline":
                mine = min(r["wall_s"] for r in runs[kind])
                mine_cpu = min(r["cpu_s"] for r in runs[kind])
                rss = max(r["peak_rss_mb"] for r in runs[kind]) / size_mb
                met = "met" if base / mine >= target and rss <= RSS_TARGET else "MISSED"
                print(
                    f"{kind}: {base / mine:.1f}× faster than json + pandas in wall time, {base_cpu / mine_cpu:.1f}× in "
                    f"CPU time; RSS {rss:.2f}× the file (target ≥ {target:g}× wall, RSS ≤ {RSS_TARGET}×): {met}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=600)
    ap.add_argument("--ascend", action="store_true", help="an Ascend trace_view.json instead of a Kineto trace")
    ap.add_argument("--trace", type=Path, help="the trace to build or reuse (default: by kind and size)")
    ap.add_argument("--source", type=Path, help="the trace whose events are repeated")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="alternate the contenders N times; report the fastest run of each (a shared machine's load varies)",
    )
    ap.add_argument(
        "--before", type=Path, help="a copy of profan's source tree to run beside this one (labelled 'before')"
    )
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(*a.child)
        return
    if a.ascend:
        trace = a.trace or HERE / "data" / f"trace_view_{a.size_mb}mb.json"
        make = lambda: make_ascend_trace(trace, a.size_mb, a.source or ASCEND_SOURCE)  # noqa: E731
    else:
        trace = a.trace or Path("/tmp/profan_bench_trace.json")
        make = lambda: make_trace(trace, a.size_mb, a.source or DEFAULT_SOURCE)  # noqa: E731
    if not trace.exists() or trace.stat().st_size < a.size_mb * 1024 * 1024:
        t = time.perf_counter()
        size, n = make()
        print(f"built {trace}: {size / 2**20:,.0f} MiB, {n:,} events in {time.perf_counter() - t:.1f} s")
    size_mb = trace.stat().st_size / 2**20
    mine = ["profan", *(["profan-rank"] if a.ascend else [])]
    sides = [(k, k, None) for k in mine] + [(f"{k} (before)", k, a.before) for k in mine if a.before]
    sides += [] if a.skip_baseline else [("baseline", "baseline", None)]
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in sides}
    for i in range(a.repeat):
        for label, kind, tree in sides:
            r = measure(kind, trace, tree)
            runs[label].append(r)
            print(
                f"  run {i + 1} {label:20s} {r['rows']:,} rows  wall {r['wall_s']} s  CPU {r['cpu_s']} s  "
                f"peak RSS {r['peak_rss_mb']:,} MiB",
                flush=True,
            )
    print(f"file {trace}: {size_mb:,.0f} MiB")
    report(runs, size_mb, 6 if a.ascend else 5)


if __name__ == "__main__":
    main()
