"""The memory tables of torch_npu's DB export (``MEMORY_RECORD``, ``OP_MEMORY``, ``NPU_MODULE_MEM``) as the frames
the text readers of `profan.sources.ascend_text.memory` produce (its module docstring is the contract: same columns,
MB of 2**20 bytes, KB of 1024 bytes, epoch µs), so the memory analysis never sees the format.

The DB holds bytes and ns where the CSVs hold MB, KB and µs; names are ids into ``STRING_IDS`` (operators,
allocator components) or ``ENUM_MODULE`` (CANN modules); ``src_line`` holds the table's rowid, cited as
``/TABLE/ROWID`` (`profan.model.evidence`). memory_record.csv's ``APP`` rows (the process's whole device memory)
come from ``NPU_MEM`` in the DB, which is not read here. A row without a time or size, or with a negative one, is
skipped and counted, as in the text readers.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.sources.ascend_db import sqlite as ascend_db_sqlite
from profan.sources.ascend_text.memory import COLUMNS, TEXT, Read

MB = float(1 << 20)
# table, the columns the frame needs (DB column -> frame column) and the kind in `ascend_memory`
TABLES = {
    "records": (
        "MEMORY_RECORD",
        {
            "component": "component",
            "timestamp": "ts_us",
            "totalAllocated": "allocated_mb",
            "totalReserved": "reserved_mb",
            "totalActive": "active_mb",
            "deviceId": "device",
        },
    ),
    "ops": (
        "OP_MEMORY",
        {
            "name": "name",
            "size": "size_kb",
            "allocationTime": "alloc_us",
            "releaseTime": "release_us",
            "deviceId": "device",
        },
    ),
    "modules": (
        "NPU_MODULE_MEM",
        {"moduleId": "component", "timestampNs": "ts_us", "totalReserved": "reserved_mb", "deviceId": "device"},
    ),
}
SCALE = {"ts_us": 1e-3, "alloc_us": 1e-3, "release_us": 1e-3, "size_kb": 1 / 1024}  # the rest: bytes -> MB
MUST = {"records": ("ts_us",), "ops": ("size_kb", "alloc_us"), "modules": ("ts_us", "reserved_mb")}


def memory_tables(path: Path) -> dict[str, Read]:
    """{"records" | "ops" | "modules": `ascend_memory.Read`} of the tables the DB has (an absent table is left
    out: the profile was taken without ``profile_memory``)."""
    db = ascend_db_sqlite.open_db(path)
    try:
        with ascend_db_sqlite.read_errors(path, "a memory table"):
            return {kind: _read(db, kind) for kind, (table, _) in TABLES.items() if table in db.tables}
    finally:
        db.conn.close()


def _read(db: ascend_db_sqlite.Db, kind: str) -> Read:
    table, cols = TABLES[kind]
    present = {src: dst for src, dst in cols.items() if db.has(table, src)}
    columns = ", ".join(ascend_db_sqlite.quote(column) for column in present)
    sql = f"SELECT rowid, {columns} FROM {ascend_db_sqlite.quote(table)}"
    raw = ascend_db_sqlite.frame(db.conn, sql, {"src_line": pl.Int64, **{d: pl.Float64 for d in present.values()}})
    names = _names(db, kind, raw)
    exprs = []
    for dst, dtype in {k: pl.Utf8 if k in TEXT else pl.Float64 for k in COLUMNS[kind]}.items():
        if dst not in raw.columns:
            exprs.append(pl.lit(None, dtype).alias(dst))
        elif dst == "device":
            exprs.append(pl.format("NPU:{}", pl.col(dst).cast(pl.Int64)).alias(dst))
        elif dst in TEXT:
            exprs.append(pl.col(dst).cast(pl.Int64).replace_strict(names, default=None, return_dtype=pl.Utf8))
        else:
            exprs.append((pl.col(dst) * SCALE.get(dst, 1 / MB)).alias(dst))
    typed = raw.select("src_line", *exprs)
    if kind == "ops":  # the DB writes no release time as null or 0 (still allocated when the capture ended)
        typed = typed.with_columns(pl.when(pl.col("release_us") > 0).then(pl.col("release_us")).alias("release_us"))
    nums = [column for column in typed.columns if column not in TEXT and column != "src_line"]
    bad = pl.any_horizontal(
        *(pl.col(column).is_null() for column in MUST[kind]),
        *((pl.col(column) < 0) | ~pl.col(column).is_finite() for column in nums),
    ).fill_null(False)
    good = typed.filter(~bad)
    return Read(good, typed.height - good.height, 0)


def _names(db: ascend_db_sqlite.Db, kind: str, raw: pl.DataFrame) -> dict[int, str]:
    """The text of the rows' name ids: CANN modules through ENUM_MODULE, the rest through STRING_IDS."""
    col = "name" if kind == "ops" else "component"
    if col not in raw.columns:
        return {}
    if kind == "modules":
        if not db.has("ENUM_MODULE", "id", "name"):
            return {}
        return {int(i): str(n) for i, n in db.conn.execute("SELECT id, name FROM ENUM_MODULE")}
    return ascend_db_sqlite.strings(db, raw[col].cast(pl.Int64))
