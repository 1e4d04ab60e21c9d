"""An MoE layer's device time by what it does: dispatch, combine, routing, experts (the bucket rules' ``part``).

Why a table beside the breakdown and not new buckets: the breakdown's bucket totals are what every other analysis
and the reports compare, and an EP library's dispatch is communication there while its routing is MoE. The parts
cut across that: each row is one part of one bucket, so the breakdown's totals stay as they were and its MoE and
communication rows split here into the parts a rule could tell. Each row names the rules that decided it and the
context they matched (an annotation, the launching op, a module), so the report says why a kernel family is
dispatch or routing; MoE time no rule places in a part is the ``moe`` row with an empty part.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import kernel_table
from profan.model.rank import RankData
from profan.rulepack.pack import RulePack

PARTS_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "part": pl.Utf8,
    "bucket": pl.Utf8,
    "time_us": pl.Float64,
    "share": pl.Float64,
    "kernels": pl.Int64,
    "rules": pl.Utf8,
    "decided_by": pl.Utf8,
    "top_op": pl.Utf8,
}
NO_PART = ""  # MoE time no rule placed in a part (a launching op or module that says MoE, not which part)


def parts_of(pack: RulePack) -> pl.DataFrame:
    """rule_id -> part, for the rules that name one."""
    named = pack.rule_parts()
    return pl.DataFrame(
        {"rule_id": list(named), "part": list(named.values())}, schema={"rule_id": pl.Utf8, "part": pl.Utf8}
    )


def moe_parts(ranks: list[RankData], pack: RulePack, moe_bucket: str = "moe") -> pl.DataFrame:
    """Per rank, step and part: time, share of the step's summed kernel time, kernel count, the rules that decided
    it and the context they matched (the most common), the op with the most time. Empty when no kernel of the job
    is MoE or has a part."""
    frame = kernel_table(ranks, ["step", "bucket", "rule_id", "decided_by", "op", "time_us", "count"])
    if frame is None:
        return pl.DataFrame(schema=PARTS_SCHEMA)
    total = frame.group_by("rank", "step").agg(pl.col("time_us").sum().alias("_step_us"))
    frame = frame.join(parts_of(pack), on="rule_id", how="left")
    frame = frame.filter(pl.col("part").is_not_null() | (pl.col("bucket") == moe_bucket))
    if frame.is_empty():
        return pl.DataFrame(schema=PARTS_SCHEMA)
    frame = frame.with_columns(pl.col("part").fill_null(NO_PART))
    out = (
        frame.group_by("rank", "step", "part", "bucket")
        .agg(
            pl.col("time_us").sum(),
            pl.col("count").sum().cast(pl.Int64).alias("kernels"),
            pl.col("rule_id").drop_nulls().unique().sort().str.join(", ").alias("rules"),
            pl.col("decided_by").drop_nulls().mode().sort().first().alias("decided_by"),
            pl.col("op").sort_by("time_us", descending=True).first().alias("top_op"),
        )
        .join(total, on=["rank", "step"], how="left", nulls_equal=True)
        .with_columns((pl.col("time_us") / pl.col("_step_us")).alias("share"))
    )
    return out.select(list(PARTS_SCHEMA)).sort(
        ["rank", "step", "time_us", "part", "bucket"], descending=[False, False, True, False, False], nulls_last=True
    )
