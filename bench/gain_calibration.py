"""Gain calibration: each cause's estimated gain held against what removing its fault saves, on fault / no-fault
pairs of real CPU gloo runs that differ only by the fault (fixtures/torch/gloo_gain_pairs, same seed, same model).

Why: a cause's gain is an estimate with an assumption; it is worth acting on only if it is about what the fault
costs. For each pair this prints the first cause's check, its estimated gain, the measured saving (the faulty
run's step less the clean run's: each run's step is the median over its profiled steps of the mean ProfilerStep
over ranks) and their ratio. `tests/diagnosis/test_gain_calibration.py` keeps each ratio inside bounds.

    python bench/gain_calibration.py [PAIRS_DIR]
    python bench/gain_calibration.py --pair FAULTY_DIR CLEAN_DIR [FAULTY_DIR CLEAN_DIR ...]   # runs not committed
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import profan

PAIRS = Path(__file__).resolve().parent.parent / "fixtures" / "torch" / "gloo_gain_pairs"
# faulty run -> (its clean run, the check whose cause names the fault)
PAIR_OF = {
    "sleep": ("clean", "straggler"),
    "compute": ("clean", "straggler"),
    "hot_expert": ("clean", "moe-expert-imbalance"),
    "loader": ("loader_clean", "idle-between-steps"),
    "sync_comm": ("overlap", "comm-overlappable"),
}


def step_ms(run: Path) -> float:
    """The run's step: the median over profiled steps of the mean ProfilerStep#N duration over its ranks (ms)."""
    per_rank = []
    for trace in sorted(run.glob("rank*.pt.trace.json.gz")):
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        per_rank.append([e["dur"] / 1000 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")])
    return statistics.median(statistics.mean(step) for step in zip(*per_rank, strict=True))


def calibrate(pairs: Path = PAIRS) -> list[dict]:
    """Per committed pair: the faulty run's first cause (check, ranks, gain or bound) and the measured saving."""
    return [pair_row(pairs / faulty, pairs / clean, expected) for faulty, (clean, expected) in PAIR_OF.items()]


def pair_row(faulty: Path, clean: Path, expected: str = "") -> dict:
    """One pair's row: the faulty run's first cause, its gain (or bound), the measured saving and their ratio."""
    cause = profan.analyze(faulty).causes[0]
    worth = cause.impact_us if cause.impact_us is not None else cause.bound_us
    gain_ms = float("nan") if worth is None else worth / 1000
    saving_ms = step_ms(faulty) - step_ms(clean)
    return {
        "pair": f"{faulty.name} / {clean.name}",
        "expected": expected,
        "check": cause.check,
        "ranks": list(cause.ranks),
        "gain_ms": round(gain_ms, 1),
        "saving_ms": round(saving_ms, 1),
        "ratio": round(gain_ms / saving_ms, 2),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--pair"]:
        dirs = [Path(arg) for arg in argv[1:]]
        rows = [pair_row(faulty, clean) for faulty, clean in zip(dirs[::2], dirs[1::2], strict=True)]
    else:
        rows = calibrate(Path(argv[0]) if argv else PAIRS)
    print("| pair | first cause | ranks | estimated gain ms | measured saving ms | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['pair']} | {r['check']} | {r['ranks']} | {r['gain_ms']} | {r['saving_ms']} | {r['ratio']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
