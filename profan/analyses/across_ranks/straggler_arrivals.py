"""Arrivals at the collectives: which rank arrives last, by how much, and whether that is more than jitter.

Per aligned collective (``align.align``) the last-arriving rank is the one with the shortest op; its lateness is
``median(duration) - its duration``. A last arrival is an *outlier* only when its lateness is above ``mad_z``
robust standard deviations (1.4826 × median absolute deviation of that collective's lateness) and above
``min_lag_us`` — so ordinary jitter never counts. A rank's *hold-up* in a step is, summed over the collectives
where it is the outlier last arrival, how much later it came than the second-latest rank: the time those
collectives would have finished sooner without it. `across_ranks.stragglers` names the ranks from these tables.
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.pack import RulePack

KEY = ["step", "group", "seq"]


CHECK = "straggler"


def lateness_table(aligned: pl.DataFrame, pack: RulePack) -> pl.DataFrame:
    """aligned rows + is_last, second lateness, robust scale, instance outlier, caused/peer wait, start lag."""
    chk = pack.check(CHECK)
    frame = aligned.filter(pl.col("present") >= chk["min_ranks"])
    if frame.is_empty():
        return frame
    frame = frame.with_columns(
        (pl.col("lateness_us").rank("ordinal", descending=True).over(KEY) == 1).alias("is_last"),
        pl.col("lateness_us").sort(descending=True).get(1).over(KEY).alias("second_us"),
        pl.col("lateness_us").sum().over(KEY).alias("_sum"),
        (pl.col("start_us") - pl.col("start_us").min().over(KEY)).alias("start_lag_us"),
    )
    frame = frame.with_columns(
        (1.4826 * (pl.col("lateness_us") - pl.col("lateness_us").median().over(KEY)).abs().median().over(KEY)).alias(
            "sigma_us"
        )
    )
    frame = frame.with_columns(
        (
            pl.col("is_last")
            & (pl.col("lateness_us") >= chk["min_lag_us"])
            & (pl.col("lateness_us") >= chk["mad_z"] * pl.col("sigma_us"))
        ).alias("flagged"),
        ((pl.col("present") - 1) * (pl.col("lateness_us") - pl.col("second_us"))).alias("caused_us"),
        # every peer waited (its lateness gap to the last rank); summed over peers
        (pl.col("present") * pl.col("lateness_us") - pl.col("_sum")).alias("peers_wait_us"),
    ).drop("_sum")
    return frame


def rank_step_table(late: pl.DataFrame) -> pl.DataFrame:
    """Per (step, rank): collectives, times last, times an outlier, and the hold-up: summed over the collectives
    where it is the outlier last arrival, how much later it came than the second-latest rank — the time each of
    those collectives would have finished sooner without it (``lag_us``; peers' extra wait is (n-1) times that)."""
    if late.is_empty():
        return pl.DataFrame()
    flagged = pl.col("flagged")
    return (
        late.with_columns((pl.col("lateness_us") - pl.col("second_us")).alias("_margin"))
        .group_by("step", "rank")
        .agg(
            pl.len().alias("collectives"),
            pl.col("is_last").sum().alias("times_last"),
            flagged.sum().alias("times_flagged"),
            pl.col("_margin").filter(flagged).sum().alias("lag_us"),
            pl.col("lateness_us").filter(flagged).sum().alias("late_vs_median_us"),
            pl.col("caused_us").filter(flagged).sum().alias("caused_wait_us"),
            pl.col("peers_wait_us").filter(pl.col("is_last")).sum().alias("peers_wait_us"),
            pl.col("lateness_us").sum().alias("lateness_sum_us"),
        )
        .sort("step", "rank")
    )


def instance_table(late: pl.DataFrame) -> pl.DataFrame:
    """One row per aligned collective: who was last, by how much, spreads of starts and ends."""
    if late.is_empty():
        return pl.DataFrame()
    last = late.filter(pl.col("is_last"))
    return last.select(
        "step",
        "group",
        "group_name",
        "seq",
        "name",
        "present",
        pl.col("rank").alias("last_rank"),
        pl.col("lateness_us").alias("last_lateness_us"),
        "sigma_us",
        "flagged",
        "start_spread_us",
        "end_spread_us",
    ).sort("step", "group", "seq")
