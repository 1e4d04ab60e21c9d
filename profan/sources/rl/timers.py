"""An RL framework's own per-step timers: verl's file logger writes one JSON line per step,
``{"step": N, "data": {"timing_s/gen": 0.16, ...}}`` (`verl/utils/tracking.py`); the names and the prefix are
rules/rl.toml ``[layout]``. The RL ledger reconciles the traces' phases with them."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from profan.model.files import open_regular
from profan.rulepack import rl

SCHEMA = {"step": pl.Int64, "timer": pl.String, "timer_us": pl.Float64, "line": pl.Int64}
MAX_BYTES = 64 << 20  # a timer log is a few KB per thousand steps: a larger file is no timer log


def read(path: Path | None) -> tuple[pl.DataFrame, list[str]]:
    """(step, timer, timer_us, line) of every ``timing_s/*`` value, line numbered as an editor shows it, and the
    warnings: a line that is no such record is counted and said, never read as a zero."""
    if path is None:
        return pl.DataFrame(schema=SCHEMA), []
    if path.stat().st_size > MAX_BYTES:
        return pl.DataFrame(schema=SCHEMA), [f"{path.name}: larger than {MAX_BYTES >> 20} MB, not read as timers"]
    prefix = rl.rules().timer_prefix
    rows, bad = [], 0
    with open_regular(path) as handle:
        text = handle.read().decode("utf-8", errors="replace")
    for line_no, line in enumerate(text.splitlines(), 1):
        record = _record(line)
        if record is None:
            bad += bool(line.strip())
            continue
        step, data = record
        rows += [
            (step, key[len(prefix) :], float(value) * 1e6, line_no)
            for key, value in data.items()
            if key.startswith(prefix) and isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        ]
    said = [f"{path.name}: skipped {bad} line(s) that are no {{step, data}} JSON record"] if bad else []
    return pl.DataFrame(rows, schema=SCHEMA, orient="row"), said


def _record(line: str) -> tuple[int, dict] | None:
    """A line's (step, data), None for a line of another form."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        return None
    step = obj.get("step")
    return (step, obj["data"]) if isinstance(step, int) and not isinstance(step, bool) else None
