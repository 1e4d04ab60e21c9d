"""Readers for the Ascend PyTorch profiler's memory files: ``memory_record.csv``, ``operator_memory.csv`` and
``npu_module_mem.csv`` (written with ``profile_memory=True``; format reference ascend-formats.md §1.1).

Output schema — the contract any other reader of the same data (the SQLite export's ``MEMORY_RECORD``,
``OP_MEMORY``, ``NPU_MODULE_MEM`` tables) produces too and hands to `profan.ranks.memory_pass.ascend_tables`, so
the per-rank reduction and the analysis never see the format. Sizes are MB as the profiler writes them (2**20
bytes), times epoch µs.

``records`` (memory_record.csv: the allocator's running totals, one row per change and component)

    src_line      Int64    the row's locator: CSV line (header = line 1); a DB reader puts its row id here
    component     Utf8     APP (the process's whole device memory: reserved only), PTA (torch_npu's caching
                           allocator), GE (graph engine), PTA+GE (their sum, the curve profan reads)
    ts_us         Float64  when the totals changed
    allocated_mb  Float64  Total Allocated(MB): held by live tensors; null where not recorded (APP rows)
    reserved_mb   Float64  Total Reserved(MB): held by the allocator (allocated + cached free blocks)
    active_mb     Float64  Total Active(MB); null in older files (no such column)
    device        Utf8     Device Type, e.g. ``NPU:0``

``ops`` (operator_memory.csv: one row per allocation made during the capture)

    src_line      Int64    as above
    name          Utf8     the operator that allocated (``aten::empty_strided``, ``cann::…``): untrusted text
    size_kb       Float64  Size(KB)
    alloc_us      Float64  Allocation Time(us)
    release_us    Float64  Release Time(us); null when the block was still allocated when the capture ended
    device        Utf8     Device Type

``modules`` (npu_module_mem.csv: device memory reserved per CANN component, sampled)

    src_line      Int64    as above
    component     Utf8     CANN module (HCCL, RUNTIME, APP, GE, …)
    ts_us         Float64  sample time
    reserved_mb   Float64  Total Reserved(MB)
    device        Utf8     Device

A row whose time or size is not a number (or not finite, or negative) is skipped and counted; a timestamp a
spreadsheet rounded to scientific notation (``1.69512E+15``) is read but counted, since its time is no longer exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from profan.sources.common.csvtext import (
    count_lines,
    is_bad_number,
    missing_columns,
    num,
    read_header,
    record_start_lines,
    scan_text_csv,
    text,
)

RECORD_COLUMNS = {
    "component": "Component",
    "ts_us": "Timestamp(us)",
    "allocated_mb": "Total Allocated(MB)",
    "reserved_mb": "Total Reserved(MB)",
    "active_mb": "Total Active(MB)",
    "device": "Device Type",
}
OP_COLUMNS = {
    "name": "Name",
    "size_kb": "Size(KB)",
    "alloc_us": "Allocation Time(us)",
    "release_us": "Release Time(us)",
    "device": "Device Type",
}
MODULE_COLUMNS = {
    "component": "Component",
    "ts_us": "Timestamp(us)",
    "reserved_mb": "Total Reserved(MB)",
    "device": "Device",
}
TEXT = ("component", "name", "device")
REQUIRED = {
    "records": ("component", "ts_us", "reserved_mb"),
    "ops": ("name", "size_kb", "alloc_us", "release_us"),
    "modules": ("component", "ts_us", "reserved_mb"),
}
COLUMNS = {"records": RECORD_COLUMNS, "ops": OP_COLUMNS, "modules": MODULE_COLUMNS}
# cells that must hold a number for the row to be usable, and those that may be empty
MUST = {"records": ("ts_us",), "ops": ("size_kb", "alloc_us"), "modules": ("ts_us", "reserved_mb")}


@dataclass
class Read:
    """One memory file read: its table (the schema above), rows skipped, rows whose time is in scientific
    notation (rounded by a spreadsheet)."""

    table: pl.DataFrame
    skipped: int
    rounded_times: int


def read(path: Path, kind: str) -> Read:
    """``kind``: "records" (memory_record.csv), "ops" (operator_memory.csv) or "modules" (npu_module_mem.csv)."""
    names = COLUMNS[kind]
    header = read_header(path)
    missing = [names[c] for c in REQUIRED[kind] if names[c] not in header]
    if missing:
        raise missing_columns(path, missing, header, names.values())
    present = {key: value for key, value in names.items() if value in header}
    raw = scan_text_csv(path, sorted(set(present.values()))).with_row_index("src_line", offset=2)
    typed = _typed(raw, kind, present).collect()
    if count_lines(path) != typed.height + 1:  # a quoted field holds a line break: map records to their lines
        starts = record_start_lines(path)
        typed = typed.with_columns(pl.Series("src_line", starts[: typed.height], dtype=pl.Int64))
    good = typed.filter(~pl.col("_bad"))
    schema = {"src_line": pl.Int64, **{key: pl.Utf8 if key in TEXT else pl.Float64 for key in COLUMNS[kind]}}
    table = good.select(
        *(pl.col(key) if key in good.columns else pl.lit(None, dtype).alias(key) for key, dtype in schema.items())
    )
    return Read(table, typed.height - good.height, int(good["_rounded"].sum()))


def _typed(raw: pl.LazyFrame, kind: str, present: dict[str, str]) -> pl.LazyFrame:
    """Typed columns (text stripped, numbers parsed), ``_bad`` (a row that cannot be used: a time or size that is
    not a number, not finite or negative) and ``_rounded`` (a time in scientific notation)."""
    numeric = [k for k in present if k not in TEXT]
    values = [
        *(text(present[k]).alias(k) for k in present if k in TEXT),
        *(num(present[k]).alias(k) for k in numeric),
    ]
    bad = pl.any_horizontal(
        *(num(present[k]).is_null() for k in MUST[kind]),
        *(is_bad_number(present[k]) for k in numeric),
        *((num(present[k]) < 0) | ~num(present[k]).is_finite() for k in numeric),
    ).fill_null(False)
    time_col = present["ts_us" if "ts_us" in present else "alloc_us"]
    rounded = pl.col(time_col).cast(pl.String).str.contains(r"[eE][+-]?\d").fill_null(False)
    return raw.select(pl.col("src_line").cast(pl.Int64), *values, bad.alias("_bad"), rounded.alias("_rounded"))
