"""Benchmark: ``profan analyze`` of a multi-rank Kineto job at size against Holistic Trace Analysis (HTA).

Why: the real multi-rank Kineto traces bundled are small (DLRM, 8 ranks of ~0.9 MB, one profiled step), where
interpreter start and imports decide the race. A real job profiles many steps: this script makes one from the
DLRM job by repeating each rank's recorded step ``--steps`` times, every repetition shifted past the previous one
in time (by the longest rank's span, rounded up to a millisecond) and its ids (``External id``, ``correlation``,
``Ev Idx``, ``Sequence number``, the flow events' ``id``) shifted past the previous repetition's, so the events
stay the real ones — kernels, collectives, CPU ops, flows — and only their place in time and their ids change.
The process metadata is written once. ``--ranks`` above the job's 8 repeats its ranks as further groups of 8
(rank ``8 * group + r``, ``world_size`` the new count).

The comparison is `bench_hta.py`'s (HTA 0.5 ``TraceAnalysis`` + temporal breakdown + comm/comp overlap, against
profan's whole command, cache off and cached), each in fresh processes, interleaved::

    python bench/bench_kineto_scale.py --ranks 8 --steps 100 --runs 3 --hta-python /tmp/htavenv/bin/python
    python bench/bench_kineto_scale.py --ranks 32 --steps 100 --runs 1 --only-build

Not a test: it writes ~90 MB a rank into bench/data/ (gitignored) and its figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench_hta import commands, report, series

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "fixtures/torch/dlrm_v100_8rank"
ID_STRIDE = 1 << 20  # ids of one repetition: the job's are below 50,000
SHIFTED_ARGS = ("External id", "correlation", "Ev Idx", "Sequence number")
TARGET, MEMORY_MIB = 0.12, 477  # the scale issue's: profan's whole command at most 0.12× HTA's, at most 0.5 GB
ONCE = ("M", "i")  # metadata and the profiler's instants: written once, not per step


def _events(events: list[dict], period: float, steps: int):
    """The rank's events, repeated ``steps`` times with time and ids shifted (see the module docstring)."""
    for event in events:
        if event.get("ph") in ONCE:
            yield event
    for step in range(steps):
        for event in events:
            if event.get("ph") in ONCE:
                continue
            copy = dict(event, ts=event["ts"] + step * period)
            if "id" in copy:
                copy["id"] = copy["id"] + step * ID_STRIDE
            args = event.get("args")
            if args:
                copy["args"] = {k: (v + step * ID_STRIDE if k in SHIFTED_ARGS else v) for k, v in args.items()}
            name = copy.get("name", "")
            if name.startswith("ProfilerStep#"):
                copy["name"] = f"ProfilerStep#{int(name.split('#')[1]) + step}"
            yield copy


def build(dest: Path, ranks: int, steps: int) -> int:
    """Write the job into ``dest`` (kept when already there); its size in bytes."""
    sources = sorted(SOURCE.glob("*.pt.trace.json"))
    done = dest / "DONE"
    if done.exists():
        return sum(p.stat().st_size for p in dest.glob("*.json"))
    dest.mkdir(parents=True, exist_ok=True)
    traces = [json.loads(path.read_text()) for path in sources]
    spans = [
        max(e["ts"] for e in t["traceEvents"] if "ts" in e) - min(e["ts"] for e in t["traceEvents"]) for t in traces
    ]
    period = (int(max(spans)) // 1000 + 1) * 1000
    for rank in range(ranks):
        trace, path = traces[rank % len(traces)], sources[rank % len(sources)]
        head = {k: v for k, v in trace.items() if k != "traceEvents"}
        head["distributedInfo"] = {**head["distributedInfo"], "rank": rank, "world_size": ranks}
        stamp = path.name.split(".", 1)[1]
        with open(dest / f"worker{rank}_step_12.{stamp}", "w") as out:
            out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
            for index, event in enumerate(_events(trace["traceEvents"], period, steps)):
                out.write(("" if index == 0 else ",\n") + json.dumps(event))
            out.write("\n]}\n")
    done.write_text(f"{ranks} ranks, {steps} steps, period {period} us\n")
    return sum(p.stat().st_size for p in dest.glob("*.json"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python", help="a Python with HTA installed")
    ap.add_argument("--data-dir", type=Path, default=REPO / "bench" / "data")
    ap.add_argument("--format", default="md", choices=["md", "json"], help="profan's report format")
    ap.add_argument("--only-build", action="store_true", help="write the job and stop")
    ap.add_argument("--skip-hta", action="store_true", help="measure profan only")
    ap.add_argument("--no-cached", action="store_true", help="leave out profan's cached runs (a second analysis)")
    ap.add_argument("--before", type=Path, help="a copy of profan's source tree to run beside this one")
    args = ap.parse_args()
    dest = args.data_dir / f"kineto_{args.ranks}r_{args.steps}s"
    size = build(dest, args.ranks, args.steps)
    print(
        f"job: {dest} ({args.ranks} ranks, {args.steps} steps, {size / 1e6:.0f} MB, "
        f"{size / args.ranks / 1e6:.0f} MB a rank)"
    )
    if args.only_build:
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-kineto-") as tmp:
        cmds = commands(dest, args.hta_python, args.format, Path(tmp), args.before)
        if args.skip_hta:
            cmds.pop("hta")
        if args.no_cached:
            cmds = {name: value for name, value in cmds.items() if not name.startswith("profan, cached")}
        results = series(cmds, args.runs)
        if "hta" in results:
            report(results, target=TARGET)
        rss = max(r["rss_mib"] for name, runs in results.items() if name != "hta" for r in runs)
        print(f"profan peak RSS {rss:.0f} MiB (target ≤ {MEMORY_MIB} MiB, 0.5 GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
