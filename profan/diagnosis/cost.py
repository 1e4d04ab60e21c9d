"""The cost model of a step, per rank: where its time went, in parts that add up to the step.

compute + exposed communication (transfer, and waiting for peers) + idle = the step, each part with the rows it
comes from: the step_trace_time.csv row (Ascend) or the first and last device event of the step's window (traces),
and the communication.json file whose ops split the exposed time into transfer and waiting. Idle is split where
the trace records the launches: ``idle_host_us``, the device waiting for the host to issue its next work, and
``idle_other_us``, waiting with the work already issued (`sources.trace.kineto`). Where nothing splits a part it stays
whole (``exposed_unsplit_us``; null idle parts), not guessed.
"""

from __future__ import annotations

import polars as pl

COLUMNS = [
    "rank",
    "step",
    "step_us",
    "compute_us",
    "exposed_transfer_us",
    "exposed_wait_us",
    "exposed_unsplit_us",
    "idle_us",
    "idle_host_us",
    "idle_other_us",
    "file",
    "line",
    "first_event",
    "last_event",
    "split_file",
]


def step_cost(steps: pl.DataFrame, traced: pl.DataFrame, exposed: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: the parts of the step. ``steps``: step_trace_time.csv rows; ``traced``: the traces' step
    windows (table trace_steps); ``exposed``: communication.json's transfer and waiting per step (comm_exposed)."""
    parts = [
        *([_from_step_trace(steps)] if not steps.is_empty() else []),
        *([_from_traces(traced)] if not traced.is_empty() else []),
    ]
    if not parts:
        return pl.DataFrame()
    # a rank with both a step_trace row and a trace window for a step: the step_trace row (the profiler's own)
    cost = pl.concat(parts, how="vertical_relaxed").unique(["rank", "step"], keep="first", maintain_order=True)
    split = (
        exposed.select("rank", "step", (pl.col("transfer_ms") * 1000).alias("_transfer"), pl.col("comm_file"))
        if not exposed.is_empty()
        else pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "_transfer": pl.Float64, "comm_file": pl.String})
    )
    split_known = pl.col("_transfer").is_not_null()
    transfer = pl.when(split_known).then(pl.min_horizontal(pl.col("_transfer"), pl.col("exposed_us")))
    return (
        cost.join(split, on=["rank", "step"], how="left")
        .with_columns(
            transfer.alias("exposed_transfer_us"),
            (pl.col("exposed_us") - transfer).alias("exposed_wait_us"),
            pl.when(~split_known).then(pl.col("exposed_us")).alias("exposed_unsplit_us"),
            pl.col("comm_file").alias("split_file"),
        )
        .select(COLUMNS)
        .sort("rank", "step")
    )


def _from_step_trace(steps: pl.DataFrame) -> pl.DataFrame:
    """The parts as step_trace_time.csv gives them, each row citing its line; its Free is not split."""
    return steps.select(
        "rank",
        "step",
        "step_us",
        pl.col("computing_us").alias("compute_us"),
        pl.col("comm_not_overlapped_us").alias("exposed_us"),
        pl.col("free_us").alias("idle_us"),
        pl.lit(None, pl.Float64).alias("idle_host_us"),
        pl.lit(None, pl.Float64).alias("idle_other_us"),
        "file",
        pl.col("src_line").cast(pl.Int64).alias("line"),
        pl.lit(None, pl.Int64).alias("first_event"),
        pl.lit(None, pl.Int64).alias("last_event"),
    )


def _from_traces(traced: pl.DataFrame) -> pl.DataFrame:
    """The parts of each ProfilerStep window of a trace, citing its first and last device event."""

    def column(name: str, dtype: type[pl.DataType]) -> pl.Expr:
        return (pl.col(name).cast(dtype) if name in traced.columns else pl.lit(None, dtype)).alias(name)

    return traced.filter(pl.col("scope") == "step").select(
        "rank",
        "step",
        "step_us",
        pl.col("computing_us").alias("compute_us"),
        pl.col("comm_not_overlapped_us").alias("exposed_us"),
        pl.col("free_us").alias("idle_us"),
        column("idle_host_us", pl.Float64),
        column("idle_other_us", pl.Float64),
        "file",
        pl.lit(None, pl.Int64).alias("line"),
        column("first_event", pl.Int64),
        column("last_event", pl.Int64),
    )
