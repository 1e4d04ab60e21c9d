"""Reader for ``step_trace_time.csv``: the profiler's own per-step Computing / Communication / Free split.

Header variants: with/without a leading ``Device_id``, with/without ``Preparing`` (format reference §4). The file
is small (one row per device and step), so it is read exactly with its physical line numbers.

A row is skipped and counted, never summed, when it is no measurement of one step (`usable`): a cell that is not
a number, a lane time that is NaN, infinite, past ``max_duration_us`` or negative, a step of no length, a row
without a step id in a file whose other rows have one, and a second row for a (device, step) already read.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from profan.rulepack import limits
from profan.sources.common.csvtext import require_columns, small_csv

COLUMNS = {
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "comm_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
    "Stage": "stage_us",
    "Bubble": "bubble_us",
    "Communication(Not Overlapped and Exclude Receive)": "comm_not_overlapped_excl_recv_us",
    "Preparing": "preparing_us",
}
REQUIRED = ("Step", "Computing", "Communication(Not Overlapped)", "Free")
SCHEMA = {"src_line": pl.Int64, "step": pl.Int64, "device_id": pl.Int64, **{v: pl.Float64 for v in COLUMNS.values()}}
# Lane times that are durations. Not "…and Exclude Receive": the profiler writes it as Not Overlapped − Bubble,
# which its own receive time can take below zero, and nothing here sums it.
DURATIONS = tuple(v for v in COLUMNS.values() if v != "comm_not_overlapped_excl_recv_us")
# Below zero by more than a nanosecond (the profiler's resolution) is no rounding of its own subtractions
# (Overlapped = Communication − Not Overlapped): such a time is no measurement.
NEGATIVE_US = -1e-3
# Why rows are skipped, in the order they are tested: a row is counted under the first reason that holds.
REASONS = {
    "unreadable": "unreadable (text, NaN, ids past 64 bits or times past max_duration_us)",
    "negative": "with a negative time",
    "unsized": "of a step of no length (Stage + Bubble, or Computing + Not Overlapped + Free, not above 0)",
    "no_step": "without a step id where the other rows have one",
    "repeated": "repeating a (device, step) of an earlier row (the first row is kept)",
}


def _float(cell: str) -> float | None:
    """A lane time in µs; None for an empty or N/A cell. ValueError (the row is skipped and counted) for text,
    ``nan``/``inf``, or a time past ``max_duration_us`` — as a kernel row's duration."""
    cell = cell.strip(' \t\r"')
    if cell in ("", "N/A"):
        return None
    value = float(cell)
    if not (math.isfinite(value) and abs(value) <= limits.active().max_duration_us):
        raise ValueError(f"no lane time: {cell}")
    return value


def _whole(cell: str) -> int | None:
    """A step or device id; None for an empty cell. ValueError (the row is skipped and counted) for text and for
    a number that is no int64 (``inf``, ``1e30``), which used to end in an internal error."""
    cell = cell.strip()
    if not cell:
        return None
    value = float(cell)
    if not (math.isfinite(value) and abs(value) < 2**63):
        raise ValueError(f"no id: {cell}")
    return int(value)


def read(path: Path) -> tuple[pl.DataFrame, dict[str, int]]:
    """(table, skipped rows by reason: the keys of `REASONS` that skipped a row, in their order). One row per
    (device, step); ``step`` is null when the profile had no steps (torch_npu then writes one row per device with
    an empty Step cell)."""
    table, unreadable = _parse(path)
    table, why = usable(table)
    why = {"unreadable": unreadable, **why}
    return table, {key: value for key, value in why.items() if value}


def skipped_what(why: dict[str, int]) -> str:
    """What a warning says the skipped rows were, by reason (`read`): 'rows: 1 with a negative time, …'."""
    return "rows: " + ", ".join(f"{value} {REASONS[key]}" for key, value in why.items())


def _parse(path: Path) -> tuple[pl.DataFrame, int]:
    """(rows with their step time ``step_us``, rows whose cells are unreadable). The profiler defines Stage =
    step end-to-end minus Bubble, so end-to-end = Stage + Bubble; older files without Stage fall back to the sum
    of the three lanes."""
    header, rows = small_csv(path)
    require_columns(path, header, REQUIRED)
    idx = {h: index for index, h in enumerate(header)}
    records = []
    skipped = 0
    for line, cells in rows:
        try:
            rec: dict = {"src_line": line}
            rec["step"] = _whole(cells[idx["Step"]] if idx["Step"] < len(cells) else "")
            rec["device_id"] = _whole(
                cells[idx["Device_id"]] if "Device_id" in idx and idx["Device_id"] < len(cells) else ""
            )
            for src, dst in COLUMNS.items():
                rec[dst] = _float(cells[idx[src]]) if src in idx and idx[src] < len(cells) else None
            if rec["computing_us"] is None:
                raise ValueError("no Computing value")
            records.append(rec)
        except (ValueError, IndexError):
            skipped += 1
    frame = pl.DataFrame(records, schema=SCHEMA, orient="row") if records else pl.DataFrame(schema=SCHEMA)
    lanes = pl.col("computing_us") + pl.col("comm_not_overlapped_us") + pl.col("free_us")
    frame = frame.with_columns(
        pl.coalesce(pl.col("stage_us") + pl.col("bubble_us").fill_null(0.0), lanes).alias("step_us")
    )
    return frame, skipped


def usable(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The rows that measure one step each, and how many were skipped for each reason of `REASONS` after
    "unreadable" (a row counted once, under the first that holds). Why each: a negative lane time reads as time
    given back (a negative Free hides the idle device, a negative Computing shrinks the compute share), and
    flips findings as a NaN would; a share of a step of no length is NaN, and a gain "per step" exceeds it; a row
    without a step id beside rows with one, or a second row of a step, is a second answer for one step, and the
    per-step findings would count that step twice. A file whose rows all lack a step id is the profiler's own:
    torch_npu writes one such row per device when the capture marked no steps. Takes any table of `SCHEMA` with
    ``step_us`` (the DB export's steps too)."""
    named = bool(table["step"].is_not_null().any())
    tests = {
        "negative": pl.any_horizontal([pl.col(c) < NEGATIVE_US for c in DURATIONS]).fill_null(False),
        "unsized": ~(pl.col("step_us") > 0).fill_null(False),
        "no_step": pl.col("step").is_null() & pl.lit(named),
        "repeated": ~pl.struct("device_id", "step").is_first_distinct(),
    }
    why: dict[str, int] = {}
    for reason, bad in tests.items():
        kept = table.filter(~bad)
        why[reason] = table.height - kept.height
        table = kept
    return table, why
