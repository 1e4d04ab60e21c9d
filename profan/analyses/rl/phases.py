"""The phases of an RL step in time, from the framework's annotations on every role's trace (rules/rl.toml
``[[phase]]``) and the one phase no annotation marks, the weight sync.

The phases run in turn (verl's trainer calls them one after the other and waits for each), so a step is cut at
the phases' ends: a phase runs from the end of the one before it (across every rank) to its own last end, which
is how the driver's timer measures it too (dispatch, the call, and the result's way back). The first step starts
where its first phase's input arrives (`lead_in`); the weight sync, after the last annotated phase, ends with the
last host or device work any rank does before the next step's input arrives (verl's update_weights carries no
annotation). The n-th annotation of a phase on a rank is its n-th profiled step.
"""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData
from profan.rulepack.rl import RlRules

SPAN_COLS = ("rank", "role", "role_rank", "file", "phase", "occurrence", "event_idx", "start_us", "end_us")


def phase_spans(ranks: list[RankData], rules: RlRules) -> pl.DataFrame:
    """Every annotation that marks a phase, with its rank, role and occurrence (1 for the first profiled step)."""
    frames = []
    for rank in ranks:
        spans = rank.rl_spans.with_columns(
            pl.col("name").replace_strict(rules.annotation_phase, default=None, return_dtype=pl.String).alias("phase")
        ).filter(pl.col("phase").is_not_null())
        spans = spans.sort("start_us").with_columns(pl.int_range(1, pl.len() + 1).over("phase").alias("occurrence"))
        frames.append(
            spans.with_columns(
                pl.lit(rank.rank).alias("rank"),
                pl.lit(rank.info["role"]).alias("role"),
                pl.lit(rank.info["role_rank"]).alias("role_rank"),
                pl.lit(rank.files["kineto_trace"]).alias("file"),
            ).select(SPAN_COLS)
        )
    return pl.concat(frames) if frames else pl.DataFrame()


def lead_in(spans: pl.DataFrame, busy: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """Each span's start moved back to the host work that starts at most ``lead_in_us`` before it on its rank:
    its input arriving (Ray deserialising the call's arguments)."""
    ops = busy.select("rank", pl.col("start_us").alias("_op"))
    joined = spans.join(ops, on="rank").filter(
        (pl.col("_op") < pl.col("start_us")) & (pl.col("_op") >= pl.col("start_us") - rules.lead_in_us)
    )
    early = joined.group_by("rank", "event_idx").agg(pl.col("_op").min().alias("_early"))
    return (
        spans.join(early, on=["rank", "event_idx"], how="left")
        .with_columns(pl.coalesce("_early", "start_us").alias("lead_us"))
        .drop("_early")
    )


def windows(spans: pl.DataFrame, busy: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """Per step (occurrence) and phase in step order: start_us, end_us of its window, and the driver and
    unannotated phases with the window the trace gives them (a driver phase none: the timer alone has it)."""
    order = [phase.name for phase in rules.phases if phase.name in set(spans["phase"])]
    first = order[0]
    spans = lead_in(spans, busy, rules)
    ends = spans.group_by("occurrence", "phase").agg(pl.col("end_us").max(), pl.col("lead_us").min())
    rows = []
    prev_end = None
    steps = sorted(set(ends["occurrence"]))
    for step in steps:
        mine = ends.filter(pl.col("occurrence") == step)
        at = dict(zip(mine["phase"], mine["end_us"], strict=True))
        start = prev_end if prev_end is not None else mine.filter(pl.col("phase") == first)["lead_us"].min()
        for name in order:
            if name in at:
                rows.append((step, name, start, at[name]))
                start = at[name]
        sync_end = _sync_end(spans, busy, step, start, first)
        for phase in rules.phases:
            if phase.unannotated:
                rows.append((step, phase.name, start, sync_end))
        prev_end = sync_end
    return pl.DataFrame(rows, schema=["occurrence", "phase", "start_us", "end_us"], orient="row")


def _sync_end(spans: pl.DataFrame, busy: pl.DataFrame, k: int, after: float, first: str) -> float:
    """The end of the last work any rank does after ``after`` (the last annotated phase's end) and before its
    next first-phase input arrives (the trace's end after the last step): the weight sync's end. No such work:
    ``after`` (the sync is not seen)."""
    nxt = spans.filter((pl.col("occurrence") == k + 1) & (pl.col("phase") == first))
    limit = nxt.group_by("rank").agg(pl.col("lead_us").min().alias("_limit"))
    fallback = nxt["lead_us"].min() if not nxt.is_empty() else float("inf")
    work = busy.join(limit, on="rank", how="left").with_columns(pl.col("_limit").fill_null(fallback))
    work = work.filter((pl.col("start_us") >= after) & (pl.col("start_us") < pl.col("_limit")))
    return float(work["end_us"].max()) if not work.is_empty() else after
