"""Reader for torch_npu's DB export: ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db`` (SQLite, written
with ``export_type=db``) and the ``analysis.db`` beside it.

It yields the tables the text readers yield — the kernel groups of `profan.ranks.kernel_pass`, the step split of
``step_trace_time.csv``, the ops, bandwidth rows and packet sizes of ``communication.json`` — so every analysis
runs unchanged and a report from a DB export reads like one from text. The DB holds the same facts as rows:

* kernel rows (`profan.sources.ascend_db.kernels`): ``TASK`` (startNs/endNs) joined to ``COMPUTE_TASK_INFO``
  (name, op type, core, shapes, all ids into ``STRING_IDS``), pipe ratios from ``TASK_PMU_INFO``, and one row per
  ``COMMUNICATION_OP`` on the communication core, as kernel_details.csv writes them;
* steps (`profan.sources.ascend_db.steps`): ``STEP_TIME`` spans; Computing / Communication(Not Overlapped) / Free
  are the interval unions of the compute tasks and the communication ops in each step, as the profiler's own
  overlap analysis computes them (``OVERLAP_ANALYSIS`` is not in every level's DB);
* communication (`profan.sources.ascend_db.comm`): ``analysis.db`` (``CommAnalyzerTime``,
  ``CommAnalyzerBandwidth``: communication.json's numbers), else ``COMMUNICATION_OP`` with its elapsed and wait
  time only.

Tables and columns are read by name (`profan.sources.ascend_db.sqlite`): extra columns and unknown schema versions
are fine; a missing optional table is said once, a missing required one is the file's one-line error. Rows reach
polars as integer ids (names are joined from ``STRING_IDS`` after grouping, on the distinct ids only):
bench/README.md has the measurements.

Evidence cites rows as ``/TABLE/ROWID`` pointers into the DB file (`profan.sources.ascend_db.rows` reads them
back); the rank's logical files are ``<db>#TASK`` and ``<db>#STEP_TIME`` (see `profan.model.evidence`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.sources.ascend_db.comm import comm_tables
from profan.sources.ascend_db.kernels import ID_KEYS, comm_op_rows, compute_rows, kernel_table
from profan.sources.ascend_db.sqlite import Db, frame, open_db, read_errors, strings
from profan.sources.ascend_db.steps import step_spans, steps_table
from profan.sources.ascend_text import steps as ascend_steps


@dataclass
class DbRank:
    """What one rank's DB export yields: the kernel rows (integer keys) with their key expressions and pipes, the
    step, communication and packet tables, the files they are cited in, and the counts and notes to say."""

    kernel_rows: pl.DataFrame
    keyed: tuple[list[str], list[pl.Expr]]
    pipes: list[str]
    steps: pl.DataFrame
    comm_ops: pl.DataFrame
    comm_bw: pl.DataFrame
    comm_packets: pl.DataFrame
    comm_file: Path
    variant: str
    uncited_ops: int = 0
    device_id: int | None = None
    notes: list[str] = field(default_factory=list)


def read(path: Path, analysis: Path | None, comm_core: str) -> DbRank:
    """One rank's DB export, read. ``comm_core``: the core kernel_details.csv files communication ops under (the
    rule pack's first ``comm_cores``), given to the COMMUNICATION_OP rows."""
    db = open_db(path)
    try:
        with read_errors(path, "the DB export"):
            return _read(db, analysis, comm_core)
    finally:
        db.conn.close()


def _read(db: Db, analysis: Path | None, comm_core: str) -> DbRank:
    spans = step_spans(db)
    compute = compute_rows(db)
    ops, uncited = comm_op_rows(db)
    # the step split first: it needs the compute tasks' spans alone, and `compute` is dropped once it is read
    comm_iv = _all_op_spans(db) if uncited else ops.select(pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
    compute_iv = compute.select(pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
    device = _device(db)
    steps, why = ascend_steps.usable(steps_table(spans, compute_iv.filter(pl.col("e") >= pl.col("s")), comm_iv, device))
    if why := {key: value for key, value in why.items() if value}:
        db.notes.append(f"STEP_TIME: skipped {sum(why.values())} of {spans.height} {ascend_steps.skipped_what(why)}")
    del compute_iv
    rows, pipes = kernel_table(db, spans, compute, ops)
    del compute
    names = strings(db, pl.concat([rows[key] for key in ID_KEYS]))
    text = {key: pl.col(key).replace_strict(names, default=None, return_dtype=pl.Utf8) for key in ID_KEYS}
    keys = [
        pl.col("step"),
        text["name_id"].alias("name"),
        text["type_id"].fill_null("N/A").alias("type"),
        pl.when(pl.col("comm")).then(pl.lit(comm_core)).otherwise(text["core_id"].fill_null("N/A")).alias("core"),
        text["shape_id"].str.strip_chars(' \t\r"').alias("input_shapes"),
    ]
    c_ops, c_bw, c_packets, c_file = comm_tables(db, analysis)
    if spans.is_empty():
        db.notes.append("has no STEP_TIME rows: kernels are outside any step and there is no step split")
    return DbRank(
        rows,
        (["step", *ID_KEYS, "comm"], keys),
        pipes,
        steps,
        c_ops,
        c_bw,
        c_packets,
        c_file,
        f"torch_npu DB export, schema {db.version or 'unknown'}, {'pipe ratios' if pipes else 'no pipe ratios'}",
        uncited,
        device,
        db.notes,
    )


def _all_op_spans(db: Db) -> pl.DataFrame:
    return frame(db.conn, "SELECT startNs, endNs FROM COMMUNICATION_OP", {"s": pl.Int64, "e": pl.Int64})


def _device(db: Db) -> int | None:
    """The rank's device id (RANK_DEVICE_MAP), as step_trace_time.csv's Device_id column holds it."""
    if not db.has("RANK_DEVICE_MAP", "deviceId"):
        return None
    got = db.conn.execute("SELECT deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
    return int(got[0]) if got and isinstance(got[0], int) else None
