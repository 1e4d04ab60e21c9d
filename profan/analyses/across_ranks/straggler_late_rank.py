"""One late rank, in the step where it holds the others up most: the collectives it arrives last at, the typical
rank it is compared with, why it is late (`straggler_windows.explain`), and whether it only inherited the delay
through an earlier collective (its own windows are no longer than the typical rank's).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profan.analyses.across_ranks.straggler_arrivals import CHECK, KEY
from profan.analyses.across_ranks.straggler_windows import WindowComparison, explain
from profan.model.rank import RankData
from profan.rulepack.pack import Check, RulePack


@dataclass(frozen=True)
class LateRank:
    """The numbers behind one straggler finding: the rank in the step where it holds the others up most, against
    a typical rank of the same collectives."""

    rank: int
    step: int | None
    worst: dict  # its straggler_ranks row in that step
    steps: pl.DataFrame  # its straggler_ranks rows of every step it is a straggler in
    last_rows: pl.DataFrame  # its aligned rows in that step where it arrives last
    picked: pl.DataFrame  # ... and where it is an outlier
    top: dict  # the last arrival it starts latest at (clock check)
    typical: int
    why: WindowComparison
    share: float | None  # hold-up / step time
    recorded: pl.Series  # the peers' own Wait Time at the picked collectives (communication.json)
    also: pl.DataFrame  # other ranks last in that step, below the straggler threshold


def late_rank(
    slow: int, frame: pl.DataFrame, late: pl.DataFrame, per: pl.DataFrame, ranks_by: dict[int, RankData], pack: RulePack
) -> LateRank:
    chk = pack.check(CHECK)
    worst = frame.sort("lag_us", descending=True).row(0, named=True)
    step = worst["step"]
    in_step = pl.col("step").eq_missing(step)
    mine = late.filter((pl.col("rank") == slow) & in_step)
    picked = mine.filter(pl.col("flagged"))
    at_picked = late.join(picked.select(KEY), on=KEY, how="semi")
    members = set(at_picked["rank"].to_list())
    stragglers = set(per.filter(pl.col("straggler"))["rank"].to_list())
    late_ranks = set(per.filter(in_step & (pl.col("times_flagged") > 0))["rank"].to_list())
    # a typical rank: not late itself where possible, and present at the same collectives
    typical = next(
        _typical_rank(per, step, ex, members)
        for ex in (stragglers | late_ranks | {slow}, stragglers | {slow}, {slow})
        if members - ex
    )
    last_rows = mine.filter(pl.col("is_last")).sort("group", "seq")
    others = per.filter(in_step & (pl.col("rank") != slow) & ~pl.col("straggler"))
    also = late.filter(
        in_step
        & pl.col("is_last")
        & (pl.col("lateness_us") >= chk["min_lag_us"])
        & pl.col("rank").is_in(others["rank"].implode())
    )
    return LateRank(
        rank=slow,
        step=step,
        worst=worst,
        steps=frame,
        last_rows=last_rows,
        picked=picked,
        top=last_rows.sort("start_lag_us", descending=True).row(0, named=True),
        typical=typical,
        why=explain(ranks_by, late, slow, typical, picked.select(KEY), pack),
        share=worst["lag_us"] / worst["step_us"] if worst["step_us"] not in (None, float("inf")) else None,
        recorded=at_picked.filter(pl.col("rank") != slow)["wait_us"].drop_nulls(),
        also=also,
    )


def _typical_rank(per: pl.DataFrame, step, exclude: set[int], candidates: set[int]) -> int:
    frame = per.filter(
        pl.col("step").eq_missing(step) & ~pl.col("rank").is_in(list(exclude)) & pl.col("rank").is_in(list(candidates))
    )
    vals = sorted(frame.select("lateness_sum_us", "rank").iter_rows())
    return int(vals[len(vals) // 2][1])


def inherited(late: LateRank, chk: Check) -> bool:
    """Late, but not by its own doing: its pre-collective windows are no longer than the typical rank's, so it
    inherited the delay through an earlier collective (e.g. the TP partner of a straggler, late at EP)."""
    why = late.why
    lag_us = round(late.worst["lag_us"], 3)  # as the finding states it
    return why.cause_class != "unknown" and why.extra_window_us < chk["own_window_share"] * lag_us
