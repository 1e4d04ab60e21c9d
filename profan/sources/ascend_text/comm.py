"""Reader for ``communication.json``: per step, per communication op, the time split and the bandwidth per
transport (format reference §5). ``Total Op Info`` aggregates are excluded — they are not ops.

Each row carries a JSON pointer to the op's object, the evidence locator.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.evidence import make_pointer
from profan.rulepack import limits
from profan.sources.ascend_text.meta import load_json
from profan.sources.common.rowframe import rows_frame

TOTAL_KEY = "Total Op Info"
_STEP = re.compile(r"^step(\d*)$")
OP_SCHEMA = {
    "step": pl.Int64,
    "kind": pl.Utf8,
    "op": pl.Utf8,
    "op_name": pl.Utf8,
    "group_hash": pl.Utf8,
    "start_us": pl.Float64,
    "elapse_ms": pl.Float64,
    "transit_ms": pl.Float64,
    "wait_ms": pl.Float64,
    "sync_ms": pl.Float64,
    "idle_ms": pl.Float64,
    "pointer": pl.Utf8,
}
BW_SCHEMA = {
    "step": pl.Int64,
    "kind": pl.Utf8,
    "op": pl.Utf8,
    "transport": pl.Utf8,
    "size_mb": pl.Float64,
    "time_ms": pl.Float64,
    "bandwidth_gbps": pl.Float64,
    "large_packet_ratio": pl.Float64,
    "pointer": pl.Utf8,
}


def entries(path: Path) -> tuple[list[tuple[str, int | None, str, str, object]], int]:
    """The op-level entries of a communication.json / communication_matrix.json document:
    ([(step key, step, section, op key, body), …], skipped count). ``Total Op Info`` aggregates are not ops and are
    left out; a step key or section of unexpected shape is counted as skipped.
    """
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise ProfanInputError(path, "expected a JSON object keyed by step")
    out: list[tuple[str, int | None, str, str, object]] = []
    skipped = 0
    for step_key, sections in doc.items():
        is_step, step = step_of(step_key)
        if not is_step or not isinstance(sections, dict):
            skipped += 1
            continue
        for kind, items in sections.items():
            if not isinstance(items, dict):
                skipped += 1
                continue
            out += [(step_key, step, kind, key, body) for key, body in items.items() if key != TOTAL_KEY]
    return out, skipped


def step_of(step_key: str) -> tuple[bool, int | None]:
    """(whether a top-level key names a step, its number): ``step12`` → (True, 12), ``step`` → (True, None).
    A number past int64 names no step: its entries are skipped and counted (a step column is Int64)."""
    match = _STEP.match(step_key)
    digits = match.group(1) if match else ""
    if match is None or len(digits) > 19 or (digits and int(digits) >= 2**63):
        return False, None
    return True, int(digits) if digits else None


def read(path: Path) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(ops, bandwidth rows, skipped entries)."""
    return tables(*entries(path))


Entry = tuple[str, int | None, str, str, object]


def tables(items: list[Entry], skipped: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(ops, bandwidth rows, skipped entries) from `entries` — so other readers of the same document (packet sizes)
    share one parse. An op whose numbers are unusable (`_unusable_ops`) is skipped with its bandwidth rows."""
    ops: list[tuple] = []  # rows as tuples in schema order: many ranks × thousands of ops
    bws: list[tuple] = []  # BW_SCHEMA order, then the index of the op in ``ops``
    for step_key, step, kind, op, body in items:
        if not isinstance(body, dict) or not isinstance(body.get("Communication Time Info"), dict):
            skipped += 1
            continue
        t = body["Communication Time Info"]
        name, _, group = op.partition("@")
        ptr = make_pointer(step_key, kind, op)
        # numbers as the JSON holds them; rows_frame coerces another type (text, a list) to float or null
        ops.append(
            (
                step,
                kind,
                op,
                name,
                group or None,
                t.get("Start Timestamp(us)"),
                t.get("Elapse Time(ms)"),
                t.get("Transit Time(ms)"),
                t.get("Wait Time(ms)"),
                t.get("Synchronization Time(ms)"),
                t.get("Idle Time(ms)"),
                ptr,
            )
        )
        bw_info = body.get("Communication Bandwidth Info")
        for transport, b in bw_info.items() if isinstance(bw_info, dict) else ():
            if not isinstance(b, dict):
                continue
            bws.append(
                (
                    step,
                    kind,
                    op,
                    transport,
                    b.get("Transit Size(MB)"),
                    b.get("Transit Time(ms)"),
                    b.get("Bandwidth(GB/s)"),
                    b.get("Large Packet Ratio"),
                    ptr + make_pointer("Communication Bandwidth Info", transport),
                    len(ops) - 1,
                )
            )
    op_rows, bw_rows = rows_frame(ops, OP_SCHEMA), rows_frame(bws, {**BW_SCHEMA, "_op": pl.Int64})
    bad = _unusable_ops(op_rows, bw_rows)
    if bad.len():
        op_rows = op_rows.filter(~pl.int_range(pl.len()).is_in(bad.implode()))
        bw_rows = bw_rows.filter(~pl.col("_op").is_in(bad.implode()))
    return op_rows, bw_rows.drop("_op"), skipped + bad.len()


OP_TIMES = ("elapse_ms", "transit_ms", "wait_ms", "sync_ms", "idle_ms")
# Below zero by more than a nanosecond is no rounding of the profiler's own subtractions (Idle = Elapse − Transit
# − Wait): such a time, size or bandwidth is no measurement.
NEGATIVE_MS = -1e-6


def _unusable_ops(ops: pl.DataFrame, bws: pl.DataFrame) -> pl.Series:
    """Indexes of the ops to skip: an op that is not `op_measured`, or one of whose bandwidth rows is not
    `bandwidth_measured`."""
    bad_ops = ops.select(pl.int_range(pl.len(), dtype=pl.Int64).filter(~op_measured()))
    bad_bws = bws.select(pl.col("_op").filter(~bandwidth_measured()))
    return pl.concat([bad_ops.to_series(), bad_bws.to_series()]).unique()


def op_measured() -> pl.Expr:
    """An op row (`OP_SCHEMA`) whose numbers are measurements: each missing (null, as before) or finite, a time
    from zero (less a nanosecond's rounding, `NEGATIVE_MS`) to ``max_duration_us``; the start timestamp is a point
    in time, not a duration, and may be any finite number. Why: ``NaN`` and ``±Infinity`` are not JSON (the
    stdlib's reader takes the literals, and torch_npu writes with it), and neither they nor a negative time are
    measurements: read as numbers they flow into the sums and flip what the findings conclude (a NaN or negative
    wait is never "high", a negative elapse time gives the step time back, an infinite one swallows the step)."""
    ms, inf = limits.active().max_duration_us / 1000, float("inf")
    return _within(("start_us",), -inf, inf) & _within(OP_TIMES, NEGATIVE_MS, ms)


def bandwidth_measured() -> pl.Expr:
    """A bandwidth row (`BW_SCHEMA`) whose size, bandwidth and packet ratio are finite and not negative and whose
    time is one (`op_measured`): an op with one that is not is skipped whole, as its sums would be."""
    ms, inf = limits.active().max_duration_us / 1000, float("inf")
    amounts = ("size_mb", "bandwidth_gbps", "large_packet_ratio")
    return _within(amounts, 0.0, inf) & _within(("time_ms",), NEGATIVE_MS, ms)


def _within(cols: tuple[str, ...], least: float, most: float) -> pl.Expr:
    """Every column null, or a finite number from ``least`` to ``most``."""
    return pl.all_horizontal(
        [pl.col(col).is_null() | (pl.col(col).is_finite() & pl.col(col).is_between(least, most)) for col in cols]
    )


# What a warning says the skipped entries were (`tables`' count): for the reader of the rank's files.
SKIPPED_WHAT = "entries of unexpected shape or holding NaN/Infinity, a negative number or a time past max_duration_us"
