"""A colocated RL job's switches between the training and the inference engine (rules/rl.toml ``[[switch]]``:
verl's sharding manager waking the rollout engine up and resharding the actor's weights into it, then putting it
to sleep). They run inside the generation call, so they are shown beside the step's phases, not in its order:
per step and rank each switch's time (``rl_switches``), and per step the slowest rank's as rows of ``rl_phases``
measured "inside generation", beside the framework's timer where it logs one (verl's timing_s/reshard)."""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData
from profan.rulepack.rl import RlRules

INSIDE = "trace (inside generation)"


def spans(ranks: list[RankData], rules: RlRules) -> pl.DataFrame:
    """Every annotation that marks a switch: rank, role, role_rank, file, switch, event_idx, start_us, end_us."""
    named = rules.annotation_switch
    frames = [
        rank.rl_spans.filter(pl.col("name").is_in(list(named))).select(
            pl.lit(rank.rank).alias("rank"),
            pl.lit(rank.info["role"]).alias("role"),
            pl.lit(rank.info["role_rank"]).alias("role_rank"),
            pl.lit(rank.files["kineto_trace"]).alias("file"),
            pl.col("name").replace_strict(named, return_dtype=pl.String).alias("switch"),
            "event_idx",
            "start_us",
            "end_us",
        )
        for rank in ranks
        if named and rank.rl_spans is not None
    ]
    return pl.concat(frames) if frames else pl.DataFrame()


def per_step(switch_spans: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per step, rank and switch: switch_us (its spans' sum), count, and the spans' event indices; a switch is
    the step's whose windows hold its start."""
    if switch_spans.is_empty():
        return pl.DataFrame()
    extent = windows.group_by("step").agg(pl.col("start_us").min().alias("_s0"), pl.col("end_us").max().alias("_s1"))
    placed = switch_spans.join(extent, how="cross").filter(pl.col("start_us").is_between(pl.col("_s0"), pl.col("_s1")))
    return (
        placed.group_by("step", "rank", "role", "role_rank", "file", "switch")
        .agg(
            (pl.col("end_us") - pl.col("start_us")).sum().alias("switch_us"),
            pl.len().alias("count"),
            pl.col("event_idx").sort().alias("event_idx"),
        )
        .sort("step", "rank", "switch")
    )


def phase_rows(steps: pl.DataFrame, timers: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """The switches as rows of ``rl_phases``: per step the slowest rank's time in each, with its timer."""
    if steps.is_empty():
        return pl.DataFrame()
    timer_of = {switch.name: switch.timer or None for switch in rules.switches}
    rows = steps.group_by("step", "switch").agg(pl.col("switch_us").max().alias("phase_us"))
    rows = rows.select(
        "step",
        pl.col("switch").alias("phase"),
        "phase_us",
        pl.col("switch").replace_strict(timer_of, return_dtype=pl.String).alias("timer"),
        pl.lit(INSIDE).alias("measured"),
    )
    out = rows.join(timers.select("step", "timer", "timer_us", "line"), on=["step", "timer"], how="left")
    return out.with_columns(((pl.col("phase_us") - pl.col("timer_us")) / pl.col("timer_us") * 100).alias("diff_pct"))
