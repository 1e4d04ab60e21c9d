"""Benchmark: `profan analyze` of a serving trace with many model iterations, the iteration view on and off.

Why: the serving issue asks that a 1 GB serving trace of 10,000 iterations be analysed in at most 1.3× the time of
the same trace read with the iteration view off (``--no-iterations``), with the same peak memory: segmenting a
capture into iterations and phases must cost little next to reading it.

The trace is built (once, into ``bench/data/``, gitignored) by repeating the iterations of a real CPU serving
capture, ``fixtures/torch/serving_llama_cpu_uniform`` (one prefill, three decodes of ``nn.Module:
LlamaForCausalLM`` forwards under torch.profiler with shapes and stacks): each repetition's events shifted by the
capture's span and its ``External id`` / ``Ev Idx`` by their range, process metadata written once. A real iteration
of that capture is 300 KB (1,277 events, two thirds of them ``with_stack`` Python frames); to hold 10,000 of them
in about 1 GB, the trace keeps of each iteration its ``nn.Module`` frames (the top-level forward is the iteration
marker) and the ``cpu_op`` events up to ``--op-depth`` levels deep (0: the top-level ops, which are the CPU-only
capture's device timeline; 1 by default: their direct children too), the same in every repetition.

Each side runs in a fresh process under ``/usr/bin/time -v`` (wall, CPU, peak RSS), profan's cache off, the two
interleaved ``--runs`` times so that they share the host's load; the load average is printed beside each run.

    python bench/bench_serving.py                                  # 10,000 iterations (~1 GB), 3 runs of each
    python bench/bench_serving.py --iterations 1000 --runs 2       # a smaller trace while developing

Not a test: its figures depend on the machine and its load. Results are recorded in bench/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from pathlib import Path

from bench_kernels import timed

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "fixtures/torch/serving_llama_cpu_uniform/trace.json.gz"
MARKER = re.compile(r"^nn\.Module: \w+ForCausalLM_\d+$")  # rules/serving.toml causal-lm-forward


def _depths(ops: list[dict]) -> list[int]:
    """Each op's nesting depth among the ops of one thread (0: top level), ops sorted by start, longest first."""
    out, open_ends = [], []
    for op in ops:
        while open_ends and op["ts"] >= open_ends[-1]:
            open_ends.pop()
        out.append(len(open_ends))
        open_ends.append(op["ts"] + op["dur"])
    return out


def unit_events(events: list[dict], op_depth: int) -> tuple[list[dict], list[dict], int]:
    """The source's metadata (written once), the events of its iterations that the trace repeats (module frames,
    ops up to ``op_depth`` deep, inside the first forward's start to the last one's end) and their iteration
    count."""
    forwards = [e for e in events if e.get("ph") == "X" and MARKER.match(e.get("name", ""))]
    lo, hi = min(e["ts"] for e in forwards), max(e["ts"] + e["dur"] for e in forwards)
    meta = [e for e in events if e.get("ph") == "M"]
    inside = [e for e in events if e.get("ph") == "X" and lo <= e["ts"] <= hi]
    ops = sorted((e for e in inside if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    kept = [op for op, depth in zip(ops, _depths(ops), strict=True) if depth <= op_depth]
    frames = [e for e in inside if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]
    return meta, sorted(kept + frames, key=lambda e: e["ts"]), len(forwards)


def make_trace(out: Path, iterations: int, op_depth: int, source: Path = SOURCE) -> tuple[int, int, int]:
    """Write a Kineto trace of at least ``iterations`` model iterations by repeating the source's; returns (bytes,
    events, iterations)."""
    with gzip.open(source, "rb") as fh:
        doc = json.load(fh)
    meta, unit, per_unit = unit_events(doc["traceEvents"], op_depth)
    span = max(e["ts"] + e["dur"] for e in unit) - min(e["ts"] for e in unit) + 50.0  # a scheduler's gap between
    ids = max(int((e.get("args") or {}).get("External id", 0)) for e in unit) + 1
    reps = -(-iterations // per_unit)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write('{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [')
        fh.write(",".join(json.dumps(e, separators=(",", ":")) for e in meta))
        for rep in range(reps):
            parts = []
            for event in unit:
                moved = {**event, "ts": round(event["ts"] + rep * span, 3)}
                args = event.get("args")
                if isinstance(args, dict) and "External id" in args:
                    moved["args"] = {**args, "External id": args["External id"] + rep * ids}
                    if "Ev Idx" in args:
                        moved["args"]["Ev Idx"] = args["Ev Idx"] + rep * ids
                parts.append(json.dumps(moved, separators=(",", ":")))
            fh.write("," + ",".join(parts))
        fh.write('], "traceName": "synthetic serving"}')
    return out.stat().st_size, len(meta) + reps * len(unit), reps * per_unit


def measure(folder: Path, off: bool, fmt: str) -> dict:
    """One ``profan analyze`` of the folder in a fresh process (cache off), the iteration view on or off."""
    report = folder.parent / f"{folder.name}.{'off' if off else 'on'}.{fmt}"
    cmd = [sys.executable, "-m", "profan", "analyze", str(folder), "-f", fmt, "-o", str(report), "-q"]
    load = os.getloadavg()[0]
    got = timed([*cmd, *(["--no-iterations"] if off else [])], REPO, {"PROFAN_NO_CACHE": "1"})
    tables = json.loads(report.read_text())["tables"] if fmt == "json" else {}
    return {
        "wall_s": round(got["wall_s"], 2),
        "cpu_s": round(got["cpu_s"], 2),
        "rss_mib": round(got["rss_mib"]),
        "load": round(load, 1),
        "iterations": sum(row["iterations"] for row in tables.get("serving_phases", [])),
    }


def report(runs: dict[str, list[dict]], size_mb: float) -> None:
    """Each side's runs and best; the ratio of the best walls and of the peak RSS."""
    print("| side | wall s (runs) | best | CPU s best | peak RSS MiB | load at start |")
    print("|---|---|---:|---:|---:|---|")
    for side, rows in runs.items():
        walls = ", ".join(str(r["wall_s"]) for r in rows)
        loads = ", ".join(str(r["load"]) for r in rows)
        best, cpu, rss = min(r["wall_s"] for r in rows), min(r["cpu_s"] for r in rows), max(r["rss_mib"] for r in rows)
        print(f"| {side} | {walls} | {best} | {cpu} | {rss:,} | {loads} |")
    on, off = runs["iterations on"], runs["iterations off"]
    ratio = min(r["wall_s"] for r in on) / min(r["wall_s"] for r in off)
    cpu = min(r["cpu_s"] for r in on) / min(r["cpu_s"] for r in off)
    rss = max(r["rss_mib"] for r in on) / max(r["rss_mib"] for r in off)
    print(f"trace {size_mb:,.0f} MiB: on/off wall {ratio:.3f}× (target ≤ 1.3×), CPU {cpu:.3f}×, peak RSS {rss:.3f}×")
    pairs = [(a["wall_s"] / b["wall_s"], a["cpu_s"] / b["cpu_s"]) for a, b in zip(on, off, strict=True)]
    walls, cpus = (", ".join(f"{pair[k]:.2f}×" for pair in pairs) for k in (0, 1))
    print(f"run by run (each pair back to back, the same load): wall {walls}; CPU {cpus}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10_000, help="model iterations in the trace (default 10,000)")
    ap.add_argument("--op-depth", type=int, default=1, help="cpu_op nesting kept per iteration (default 1)")
    ap.add_argument("--data-dir", type=Path, default=REPO / "bench" / "data", help="where the trace goes")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side, interleaved (default 3)")
    ap.add_argument("--format", default="json", help="the report written (default json)")
    a = ap.parse_args()
    folder = a.data_dir / f"serving_{a.iterations}_d{a.op_depth}"
    trace = folder / "trace.json"
    if not trace.exists():
        t0 = time.perf_counter()
        size, events, its = make_trace(trace, a.iterations, a.op_depth)
        print(
            f"built {trace}: {size / 2**20:,.0f} MiB, {events:,} events, {its:,} iterations in "
            f"{time.perf_counter() - t0:.1f} s"
        )
    print(f"host: {os.cpu_count()} cores, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs: dict[str, list[dict]] = {"iterations on": [], "iterations off": []}
    for index in range(a.runs):
        for side, off in (("iterations on", False), ("iterations off", True)):
            got = measure(folder, off, a.format)
            runs[side].append(got)
            print(
                f"  run {index + 1} {side:15s} wall {got['wall_s']} s  CPU {got['cpu_s']} s  peak RSS "
                f"{got['rss_mib']:,} MiB  load {got['load']}  iterations in report {got['iterations']:,}",
                flush=True,
            )
    report(runs, trace.stat().st_size / 2**20)


if __name__ == "__main__":
    main()
