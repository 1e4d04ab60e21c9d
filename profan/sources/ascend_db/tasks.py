"""HCCL plane tasks from torch_npu's DB export: what `profan.sources.trace.hccl_tasks` reads from trace_view.json.

COMMUNICATION_TASK_INFO holds one row per HCCL task (Memcpy, Reduce_Inline, Notify_Wait, …) with its plane, its
group-local source and destination rank, transport, link type and size; its times are those of the TASK row with
the same ``globalTaskId``. The rows come out in `hccl_tasks.COLUMNS`, so the waited-for-peer analysis reads a DB
export as it reads a trace; ``event_idx`` is the COMMUNICATION_TASK_INFO rowid, cited as
``/COMMUNICATION_TASK_INFO/ROWID`` in the DB file. Names (task type, transport, link type) are STRING_IDS ids.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.sources.ascend_db import sqlite as ascend_db_sqlite
from profan.sources.trace.hccl_tasks import COLUMNS

TABLE = "COMMUNICATION_TASK_INFO"
NEEDED = ("globalTaskId", "taskType", "planeId", "srcRank", "dstRank")
NAMED = ("taskType", "transportType", "linkType")  # STRING_IDS ids, resolved for the distinct values only


def plane_tasks(path: Path) -> pl.DataFrame:
    """The DB's HCCL tasks as plane task rows (`hccl_tasks.COLUMNS`); empty when the DB holds no such table (a
    capture without communication, or a profiler level that does not record HCCL tasks)."""
    db = ascend_db_sqlite.open_db(path)
    try:
        with ascend_db_sqlite.read_errors(path, TABLE):
            return _read(db)
    finally:
        db.conn.close()


def _read(db: ascend_db_sqlite.Db) -> pl.DataFrame:
    if not db.has(TABLE, *NEEDED) or not db.has("TASK", "globalTaskId", "startNs", "endNs"):
        return pl.DataFrame()
    optional = [c for c in ("transportType", "linkType", "size") if db.has(TABLE, c)]
    cols = ", ".join(f"c.{ascend_db_sqlite.quote(c)}" for c in (*NEEDED[1:], *optional))
    sql = (
        f"SELECT c.rowid, {cols}, t.startNs, t.endNs FROM {ascend_db_sqlite.quote(TABLE)} c "
        "JOIN TASK t ON t.globalTaskId = c.globalTaskId"
    )
    names = ["event_idx", *NEEDED[1:], *optional, "start_ns", "end_ns"]
    raw = ascend_db_sqlite.frame(db.conn, sql, dict.fromkeys(names, pl.Int64))
    text = ascend_db_sqlite.strings(db, pl.concat([raw[c] for c in NAMED if c in raw.columns]))
    return _as_plane_tasks(raw, text)


def _as_plane_tasks(raw: pl.DataFrame, text: dict[int, str]) -> pl.DataFrame:
    def named(col: str) -> pl.Expr:
        if col not in raw.columns:
            return pl.lit(None, pl.String)
        return pl.col(col).replace_strict(text, default=None, return_dtype=pl.String)

    return raw.select(
        "event_idx",
        pl.lit(TABLE).alias("process"),  # where the tasks come from: the DB has no trace process to name
        pl.format("Plane {}", pl.col("planeId")).alias("plane"),
        named("taskType").alias("name"),
        named("taskType").alias("task_type"),
        pl.col("srcRank").alias("src_rank"),
        pl.col("dstRank").alias("dst_rank"),
        named("transportType").alias("transport_type"),
        named("linkType").alias("link_type"),
        (pl.col("size") if "size" in raw.columns else pl.lit(None, pl.Int64)).alias("size_bytes"),
        (pl.col("start_ns") / 1000).alias("ts_us"),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1000).alias("dur_us"),
    ).select(COLUMNS)
