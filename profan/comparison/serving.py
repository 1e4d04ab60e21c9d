"""``compare`` of two serving runs, per phase: a prefill and a decode iteration differ by orders of magnitude, so a
serving run's step totals say nothing until its iterations are paired by phase.

Each side's iterations are those `analyze` finds (`profan.analyses.serving`), pooled over the side's ranks. Two
tables, B minus A, each row citing both sides' slowest iterations (the events that marked them):

* ``compare_phases``: per phase, the iteration count, the period p50 / p90 / mean, the device busy share and the
  time per token where tokens are known;
* ``compare_phase_buckets``: per phase and bucket, the device time per iteration.

Nothing for a comparison where either side has no iterations (a training run compares as it always did).
"""

from __future__ import annotations

import polars as pl

from profan.analyses.serving.iterations import bucket_table, iteration_table
from profan.analyses.serving.phases import PHASE_ORDER
from profan.comparison.sides import Side

SLOWEST = 3  # iterations cited per side and phase


def _side_phases(its: pl.DataFrame, side: Side) -> pl.DataFrame:
    """One side's iterations pooled per phase: counts, period statistics, busy share, time per token, the
    slowest iterations' marker events with their file (relative to the common root)."""
    period, known = pl.col("period_us"), pl.col("tokens").is_not_null()
    slow = its.sort("period_us", "iteration", descending=[True, False])
    out = slow.group_by("phase", maintain_order=True).agg(
        pl.len().alias("iterations"),
        period.median().alias("p50_us"),
        period.quantile(0.9, "nearest").alias("p90_us"),
        period.mean().alias("mean_us"),
        (pl.col("busy_us").sum() / period.sum()).alias("busy_share"),
        (period.filter(known).sum() / pl.col("tokens").filter(known).sum()).alias("us_per_token"),
        pl.col("event_idx").head(SLOWEST).alias("events"),
        pl.col("file").first(),
    )
    if side.prefix:  # as `Side.file`: the path relative to the folder holding both sides
        out = out.with_columns((pl.lit(f"{side.prefix}/") + pl.col("file")).alias("file"))
    return out.rename({col: f"{side.label.lower()}_{col}" for col in out.columns if col != "phase"})


def _side_buckets(its: pl.DataFrame, buckets: pl.DataFrame, side: Side) -> pl.DataFrame:
    """One side's device time per phase and bucket, per iteration of the phase (pooled over its ranks)."""
    counts = its.group_by("phase").agg(pl.len().alias("_n"))
    phased = buckets.join(its.select("rank", "iteration", "phase"), on=["rank", "iteration"])
    out = phased.group_by("phase", "bucket").agg(pl.col("time_us").sum()).join(counts, on="phase")
    label = side.label.lower()
    return out.select("phase", "bucket", (pl.col("time_us") / pl.col("_n")).alias(f"{label}_per_iteration_us"))


def phase_tables(sa: Side, sb: Side) -> dict[str, pl.DataFrame]:
    """``compare_phases`` and ``compare_phase_buckets`` (B minus A), or nothing when a side has no iterations."""
    its_a, its_b = iteration_table(sa.ranks), iteration_table(sb.ranks)
    if its_a.is_empty() or its_b.is_empty():
        return {}
    phases = _side_phases(its_a, sa).join(_side_phases(its_b, sb), on="phase", how="full", coalesce=True)
    phases = phases.with_columns(
        (pl.col("b_p50_us") - pl.col("a_p50_us")).alias("delta_p50_us"),
        (pl.col("b_p50_us") / pl.col("a_p50_us")).alias("ratio_p50"),
        (pl.col("b_mean_us") - pl.col("a_mean_us")).alias("delta_mean_us"),
    )
    keys = ["phase", "bucket"]
    split = _side_buckets(its_a, bucket_table(sa.ranks), sa).join(
        _side_buckets(its_b, bucket_table(sb.ranks), sb), on=keys, how="full", coalesce=True
    )
    split = split.with_columns(pl.col("a_per_iteration_us", "b_per_iteration_us").fill_null(0.0))
    split = split.with_columns((pl.col("b_per_iteration_us") - pl.col("a_per_iteration_us")).alias("delta_us"))
    order = pl.col("phase").replace_strict(PHASE_ORDER, default=len(PHASE_ORDER), return_dtype=pl.Int64)
    return {
        "compare_phases": phases.sort(order),
        "compare_phase_buckets": split.sort([order, "delta_us", "bucket"], descending=[False, True, False]),
    }
