"""The per-phase view of a serving capture: per rank and phase (prefill, decode, mixed, unknown), how many
iterations ran, how long one took (p50 / p90 / max of its period), how the device spent them (busy, idle
between the iteration's own kernels, idle in the rest of the period), the host's gaps between iterations, the
tokens per iteration and the time per token where the token input was read, and the slowest iterations.

Why per phase: a serving report's unit is the decode iteration; a prefill takes far longer and would hide it
in one average. The periods tile each rank's captured span (`profan.sources.trace.kineto_iterations`), so a
rank's phase totals add up to that span.
"""

from __future__ import annotations

import polars as pl

SLOWEST = 3  # iterations named per rank and phase, slowest first
PHASE_ORDER = {"prefill": 0, "mixed": 1, "decode": 2, "unknown": 3}


def phase_table(iterations: pl.DataFrame) -> pl.DataFrame:
    """One row per rank and phase (`PHASE_ORDER`); empty for no iterations."""
    if iterations.is_empty():
        return pl.DataFrame()
    period = pl.col("period_us")
    known = pl.col("tokens").is_not_null()
    slow = iterations.sort("period_us", "iteration", descending=[True, False])
    out = slow.group_by("rank", "phase", maintain_order=True).agg(
        pl.len().alias("iterations"),
        period.sum().alias("time_us"),
        period.median().alias("p50_us"),
        period.quantile(0.9, "nearest").alias("p90_us"),
        period.max().alias("max_us"),
        pl.col("busy_us").sum(),
        pl.col("between_kernels_us").sum(),
        pl.col("idle_us").sum(),
        pl.col("gap_after_us").sum(),
        pl.col("device_gap_us").sum(),
        pl.col("kernels").sum(),
        pl.col("tokens").filter(known).sum().alias("tokens"),
        known.sum().alias("_with_tokens"),
        period.filter(known).sum().alias("_token_time"),
        pl.col("iteration").head(SLOWEST).alias("slowest"),
        pl.col("event_idx").head(SLOWEST).alias("slowest_events"),
        pl.col("rule").first().alias("marker"),
        pl.col("file").first(),
    )
    per_token = pl.when(pl.col("tokens") > 0).then(pl.col("_token_time") / pl.col("tokens"))
    out = out.with_columns(
        (pl.col("busy_us") / pl.col("time_us")).alias("busy_share"),
        pl.when(pl.col("_with_tokens") > 0)
        .then(pl.col("tokens") / pl.col("_with_tokens"))
        .alias("tokens_per_iteration"),
        per_token.alias("us_per_token"),
        pl.when(pl.col("_with_tokens") == 0).then(None).otherwise(pl.col("tokens")).alias("tokens"),
    ).drop("_with_tokens", "_token_time")
    order = pl.col("phase").replace_strict(PHASE_ORDER, default=len(PHASE_ORDER), return_dtype=pl.Int64)
    return out.sort("rank", order)


def phase_buckets(iterations: pl.DataFrame, buckets: pl.DataFrame) -> pl.DataFrame:
    """Per rank, phase and bucket (attention, ffn, moe, communication, …: the rule pack's), the device time of
    the phase's iterations in that bucket (``time_us``, summed as the breakdown sums kernel time), its share of
    the phase's summed device time and its time per iteration; empty for no iterations. ``buckets``: ``rank,
    iteration, bucket, time_us`` (`profan.sources.trace.kineto_iterations.bucket_time`)."""
    if iterations.is_empty() or buckets.is_empty():
        return pl.DataFrame()
    counts = iterations.group_by("rank", "phase").agg(pl.len().alias("_n"))
    phased = buckets.join(iterations.select("rank", "iteration", "phase"), on=["rank", "iteration"])
    out = phased.group_by("rank", "phase", "bucket").agg(pl.col("time_us").sum()).join(counts, on=["rank", "phase"])
    out = out.with_columns(
        (pl.col("time_us") / pl.col("time_us").sum().over("rank", "phase")).alias("share"),
        (pl.col("time_us") / pl.col("_n")).alias("per_iteration_us"),
    ).drop("_n")
    order = pl.col("phase").replace_strict(PHASE_ORDER, default=len(PHASE_ORDER), return_dtype=pl.Int64)
    return out.sort(["rank", order, "time_us", "bucket"], descending=[False, False, True, False])
