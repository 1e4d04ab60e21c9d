"""Expert load from tokens: how many rows entered each expert and each rank, from what the trace recorded.

Time is a poor proxy for load: an expert's time carries its rank's speed and every stall of the host besides the
tokens it got (one 8 ms ``topk`` stall on a CPU run reads as a hot expert). The token counts are exact where the
capture holds them (`profan.sources.trace.kineto_moe`):

* per expert — the first matmul-like op inside each ``expert_<id>`` range: its first input's rows are the tokens
  that entered the expert (`record_function` ranges the program names per expert);
* per rank — the dispatch all-to-all before a layer's expert ranges: its output tensor's rows are the tokens the
  rank received (``Input Dims``), its output split sizes how many came from each peer (``Concrete Inputs``).

The dispatch is told from the combine by its place, not its name (both are the same op): the all-to-all carrying
rows that ends last before an expert range is that layer's dispatch, the first one after it its combine.
"""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData

EXPERT_COLUMNS = ("rank", "step", "expert_id", "tokens", "range_idx", "input_idx")
RANK_COLUMNS = ("rank", "step", "received", "dispatch_idx", "recv_splits")


def expert_rows(events: pl.DataFrame, expert_pattern: str) -> pl.DataFrame:
    """One row per expert range: step, expert id, tokens (rows of the first expert-input op inside it, same
    thread), the range's and that op's event indexes."""
    ranges = events.filter(pl.col("kind") == "range").with_columns(
        pl.col("name").str.extract(expert_pattern, 1).cast(pl.Int64, strict=False).alias("expert_id")
    )
    inputs = events.filter(pl.col("kind") == "input", pl.col("rows_in").is_not_null()).select(
        "tid", pl.col("ts_us").alias("in_ts"), pl.col("rows_in").alias("tokens"), pl.col("event_idx").alias("input_idx")
    )
    joined = ranges.sort("ts_us").join_asof(
        inputs.sort("in_ts"), left_on="ts_us", right_on="in_ts", by="tid", strategy="forward", check_sortedness=False
    )
    inside = pl.col("in_ts") < pl.col("end_us")
    joined = joined.with_columns(
        pl.when(inside).then(pl.col("tokens")).alias("tokens"),
        pl.when(inside).then(pl.col("input_idx")).alias("input_idx"),
    )
    return joined.select(
        "step", "expert_id", "tokens", pl.col("event_idx").alias("range_idx"), "input_idx", "ts_us", "end_us", "tid"
    )


def dispatch_rows(events: pl.DataFrame, experts: pl.DataFrame) -> pl.DataFrame:
    """The dispatch all-to-all of each layer: of the all-to-alls carrying rows, the one ending last before an
    expert range starts (same thread), one row per such call: step, rows received, its split sizes, its index."""
    a2a = events.filter(pl.col("kind") == "a2a", pl.col("rows_in").is_not_null()).select(
        "tid", "end_us", "step", "rows_in", "recv_splits", pl.col("event_idx").alias("dispatch_idx")
    )
    if a2a.is_empty() or experts.is_empty():
        return pl.DataFrame(
            schema={"step": pl.Int64, "received": pl.Int64, "dispatch_idx": pl.Int64, "recv_splits": pl.Utf8}
        )
    first = experts.select("tid", pl.col("ts_us").alias("range_ts")).sort("range_ts")
    found = first.join_asof(
        a2a.sort("end_us"), left_on="range_ts", right_on="end_us", by="tid", strategy="backward", check_sortedness=False
    ).filter(pl.col("dispatch_idx").is_not_null())
    calls = found.unique("dispatch_idx", maintain_order=True)
    return calls.select("step", pl.col("rows_in").alias("received"), "dispatch_idx", "recv_splits")


def token_tables(ranks: list[RankData], expert_pattern: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per expert range: rank, step, expert, tokens, locators; per dispatch call: rank, step, rows received,
    locator, split sizes) over every rank whose trace recorded them, profiled steps only."""
    experts, dispatch = [], []
    for rank in ranks:
        evidence = rank.moe_tokens
        if evidence is None or evidence.is_empty():
            continue
        e = expert_rows(evidence, expert_pattern)
        d = dispatch_rows(evidence, e)
        experts.append(e.with_columns(pl.lit(rank.rank, pl.Int64).alias("rank")))
        dispatch.append(d.with_columns(pl.lit(rank.rank, pl.Int64).alias("rank")))
    if not experts:
        return pl.DataFrame(), pl.DataFrame()
    ex = pl.concat(experts).filter(pl.col("step").is_not_null(), pl.col("expert_id").is_not_null())
    frame = pl.concat(dispatch).filter(pl.col("step").is_not_null())
    return ex.select(EXPERT_COLUMNS), frame.select(RANK_COLUMNS)


def load_tables(experts: pl.DataFrame, dispatch: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Tokens per expert (summed over the profiled steps and layers) and per rank: received by its dispatch
    all-to-alls where the trace has them, else the sum of its experts' tokens; ``source`` says which."""
    per_expert = (
        experts.group_by("expert_id")
        .agg(pl.col("tokens").sum(), pl.col("rank").first(), pl.col("input_idx").drop_nulls().head(20).alias("rows"))
        .sort("expert_id")
    )
    from_experts = experts.group_by("rank").agg(pl.col("tokens").sum().alias("expert_tokens"))
    from_a2a = dispatch.group_by("rank").agg(
        pl.col("received").sum(), pl.col("dispatch_idx").head(20).alias("rows"), pl.len().alias("calls")
    )
    inputs = experts.group_by("rank").agg(pl.col("input_idx").drop_nulls().head(20).alias("_in"), pl.len().alias("_n"))
    per_rank = from_experts.join(from_a2a, on="rank", how="full", coalesce=True).join(inputs, on="rank", how="left")
    per_rank = per_rank.with_columns(
        pl.coalesce("rows", "_in").alias("rows"),
        pl.coalesce("calls", "_n").alias("calls"),
        pl.coalesce("received", "expert_tokens").alias("tokens"),
        pl.when(pl.col("received").is_not_null())
        .then(pl.lit("dispatch all-to-all"))
        .otherwise(pl.lit("expert ranges"))
        .alias("source"),
    ).drop("_in", "_n")
    return per_expert, per_rank.sort("rank")
