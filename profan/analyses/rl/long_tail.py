"""The rollout's long tail: every rollout worker's generation ends when its longest response ends, and the step
goes on only when the last worker is done, so the others idle for the difference.

Per step and worker: when its generation ends against the last one (``behind_us``), how many forwards it ran (one
per generated token, rules/rl.toml ``forward_op``: the length of the batch's longest response), and for the step
the share of the pool's generation time spent waiting for the last worker; ``tail_us`` is how much sooner the
phase would end if the last worker ended with the next-latest one.
"""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData
from profan.rulepack.rl import RlRules


def workers(spans: pl.DataFrame, ranks: list[RankData], rules: RlRules) -> pl.DataFrame:
    """Per step and generating rank: start_us, end_us, behind_us, forwards, and the step's tail_us and
    wait_share (the same on each of its rows)."""
    first = next(phase.name for phase in rules.phases if not phase.driver and not phase.unannotated)
    gen = spans.filter((pl.col("phase") == first) & pl.col("step").is_not_null())
    if gen.is_empty():
        return pl.DataFrame()
    marks = pl.concat(
        [
            rank.rl_forwards.with_columns(pl.lit(rank.rank).alias("rank"))
            for rank in ranks
            if rank.rl_forwards is not None
        ]
    )
    inside = gen.join(marks, on="rank").filter(pl.col("ts_us").is_between(pl.col("start_us"), pl.col("end_us")))
    counts = inside.group_by("rank", "step").agg(pl.len().alias("forwards"))
    out = gen.join(counts, on=["rank", "step"], how="left").with_columns(pl.col("forwards").fill_null(0))
    out = out.with_columns(
        (pl.col("end_us").max().over("step") - pl.col("end_us")).alias("behind_us"),
        (pl.col("end_us") - pl.col("start_us")).alias("gen_us"),
    )
    two = out.group_by("step").agg(
        (pl.col("end_us").max() - pl.col("end_us").sort(descending=True).get(pl.min_horizontal(1, pl.len() - 1))).alias(
            "tail_us"
        ),
        (pl.col("behind_us").sum() / (pl.col("behind_us") + pl.col("gen_us")).sum()).alias("wait_share"),
    )
    return out.join(two, on="step").sort("step", "rank")
