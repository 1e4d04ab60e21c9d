"""Reader for ``step_trace_time.csv``: the profiler's own per-step Computing / Communication / Free split.

Header variants: with/without a leading ``Device_id``, with/without ``Preparing`` (format reference §4). The file
is small (one row per device and step), so it is read exactly with its physical line numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from profan.rulepack import limits
from profan.sources.csvtext import require_columns, small_csv

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


def read(path: Path) -> tuple[pl.DataFrame, int]:
    """(table, skipped row count). One row per (device, step); ``step`` is null when the profile had no steps."""
    header, rows = small_csv(path)
    require_columns(path, header, REQUIRED)
    idx = {h: i for i, h in enumerate(header)}
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
    df = pl.DataFrame(records, schema=SCHEMA, orient="row") if records else pl.DataFrame(schema=SCHEMA)
    # Step wall time: the profiler defines Stage = step end-to-end minus Bubble, so end-to-end = Stage + Bubble;
    # older files without Stage fall back to the sum of the three lanes.
    lanes = pl.col("computing_us") + pl.col("comm_not_overlapped_us") + pl.col("free_us")
    df = df.with_columns(pl.coalesce(pl.col("stage_us") + pl.col("bubble_us").fill_null(0.0), lanes).alias("step_us"))
    return df, skipped
