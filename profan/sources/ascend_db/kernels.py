"""Kernel rows of torch_npu's DB export, as the kernel pass reduces kernel_details.csv's: ``TASK`` joined to
``COMPUTE_TASK_INFO`` (ids into ``STRING_IDS`` for every text column), pipe ratios from ``TASK_PMU_INFO``, and one
row per ``COMMUNICATION_OP`` on the communication core, cited by the TASK rowid of its first device task.
"""

from __future__ import annotations

import json

import polars as pl

from profan.rulepack import limits
from profan.sources.ascend_db.sqlite import Db, big_frame, frame, ids_of
from profan.sources.ascend_db.steps import with_steps
from profan.sources.ascend_text import kernels as ascend_kernels

# canonical kernel column -> COMPUTE_TASK_INFO column (ids into STRING_IDS): only what the kernel pass groups by
COMPUTE_COLUMNS = {"name_id": "name", "type_id": "opType", "core_id": "taskType", "shape_id": "inputShapes"}


ID_KEYS = ("name_id", "type_id", "core_id", "shape_id")


KERNEL_SCHEMA = {
    "src_line": pl.Int64,
    "task_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    **{k: pl.Int64 for k in ID_KEYS},
}


def compute_rows(db: Db) -> pl.DataFrame:
    """One row per compute task: TASK joined to COMPUTE_TASK_INFO in SQLite (the join uses its primary key),
    ids for every text column. ``src_line`` is the TASK rowid the evidence cites."""
    c = [db.col("COMPUTE_TASK_INFO", src, key, "c.") for key, src in COMPUTE_COLUMNS.items()]
    sql = (
        "SELECT t.rowid, t.globalTaskId, t.startNs, t.endNs, "
        + ", ".join(c)
        + " FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
    )
    return big_frame(db, sql, KERNEL_SCHEMA)


def comm_op_rows(db: Db) -> tuple[pl.DataFrame, int]:
    """One kernel row per COMMUNICATION_OP, as kernel_details.csv writes one per HCCL op (name, type); its
    ``src_line`` is the TASK rowid of the op's first device task (`first_tasks`), the TASK row evidence reads back
    with the op's name and span. (rows, ops with no device task: not cited, so skipped and counted)."""
    if not db.has("COMMUNICATION_OP", "opName", "startNs", "endNs", "opId"):
        return pl.DataFrame(schema=KERNEL_SCHEMA), 0
    sql = (
        "SELECT o.opId, NULL, o.startNs, o.endNs, o.opName, "
        + db.col("COMMUNICATION_OP", "opType", "type_id", "o.")
        + ", NULL, NULL FROM COMMUNICATION_OP o"
    )
    rows = frame(db.conn, sql, KERNEL_SCHEMA)
    first = first_tasks(db)
    rows = rows.with_columns(pl.col("src_line").replace_strict(first, default=None, return_dtype=pl.Int64))
    uncited = rows.filter(pl.col("src_line").is_null()).height
    return rows.filter(pl.col("src_line").is_not_null()), uncited


def first_tasks(db: Db) -> dict[int, int]:
    """opId -> the TASK rowid of the op's first device task (its lowest globalTaskId in COMMUNICATION_TASK_INFO).
    Two scans, never a lookup per task: TASK has no index on globalTaskId, and a join per row costs as much as
    the compute tasks' join."""
    if not (db.has("COMMUNICATION_TASK_INFO", "globalTaskId", "opId") and db.has("TASK", "globalTaskId")):
        return {}
    firsts = dict(db.conn.execute("SELECT opId, min(globalTaskId) FROM COMMUNICATION_TASK_INFO GROUP BY opId"))
    if not firsts:
        return {}
    want = json.dumps(sorted({int(value) for value in firsts.values() if isinstance(value, int)}))
    rowid = dict(
        db.conn.execute(
            "SELECT globalTaskId, min(rowid) FROM TASK WHERE globalTaskId IN (SELECT value FROM json_each(?)) "
            "GROUP BY globalTaskId",
            (want,),
        )
    )
    return {int(key): rowid[value] for key, value in firsts.items() if isinstance(key, int) and value in rowid}


def pmu_ratios(db: Db) -> pl.DataFrame | None:
    """Per task, each pipe's ratio (the larger of its aic_/aiv_ form, as the text reader takes it) from
    TASK_PMU_INFO, rows of the ratio metrics only (their ids looked up first, so SQLite filters by integer)."""
    if not db.has("TASK_PMU_INFO", "globalTaskId", "name", "value"):
        return None
    names = {f"{pre}{p}_ratio": p for p in ascend_kernels.PIPES for pre in ("", "aic_", "aiv_")}
    ids = ids_of(db.conn, "STRING_IDS", set(names))
    if not ids:
        return None
    sql = f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({','.join('?' * len(ids))})"
    rows = frame(db.conn, sql, {"task_id": pl.Int64, "metric": pl.Int64, "value": pl.Float64}, tuple(ids))
    if rows.is_empty():
        return None
    pipe = {key: names[value] for key, value in ids.items()}
    rows = rows.with_columns(pl.col("metric").replace_strict(pipe, return_dtype=pl.Utf8).alias("pipe"))
    # Float32: a ratio of 0..1 needs no more, and millions of kernel rows carry seven of them
    got = rows.pivot("pipe", index="task_id", values="value", aggregate_function="max")
    return got.with_columns(pl.exclude("task_id").cast(pl.Float32))


def bad_expr() -> pl.Expr:
    """A row that cannot be sized: no start or end, an end before its start, or longer than max_duration_us —
    the same rule as a kernel_details.csv row's duration."""
    dur = pl.col("dur_us")
    return (dur.is_null() | (dur < 0) | (dur > limits.active().max_duration_us)).fill_null(True).alias("bad")


def kernel_table(
    db: Db, spans: pl.DataFrame, compute: pl.DataFrame, ops: pl.DataFrame
) -> tuple[pl.DataFrame, list[str]]:
    """The kernel rows the kernel pass reduces: compute tasks and communication ops with their step, start and
    duration in µs, ``bad`` and the pipe ratios (TASK_PMU_INFO), as one lazy query (only the columns the pass
    reads are made)."""
    pmu = pmu_ratios(db)
    rows = pl.concat(
        [compute.lazy().with_columns(pl.lit(False).alias("comm")), ops.lazy().with_columns(pl.lit(True).alias("comm"))]
    )
    pipes = [p for p in ascend_kernels.PIPES if pmu is not None and p in pmu.columns]
    if pipes:
        rows = rows.join(pmu.lazy().select("task_id", *pipes), on="task_id", how="left")  # row order is no key
    rows = (
        with_steps(rows, spans)
        .with_columns(
            (pl.col("start_ns") / 1000).alias("start_us"),
            ((pl.col("end_ns") - pl.col("start_ns")) / 1000).alias("dur_us"),
        )
        .with_columns(bad_expr())
        .drop("task_id", "start_ns", "end_ns")
        .collect()
    )
    small = {k: pl.Int32 for k in ID_KEYS if (rows[k].max() or 0) < 2**31 and (rows[k].min() or 0) >= -(2**31)}
    return rows.cast(small), pipes  # ids of STRING_IDS fit in 32 bits in practice: half the memory
