"""Expert GEMMs launched one per expert with few rows each, where one grouped GEMM would serve (table
``moe_expert_gemms``, check ``moe-small-expert-gemms``).

A rank holding several experts of a layer can run them as one grouped GEMM (CUTLASS grouped GEMM, Megatron-Core's
``--moe-grouped-gemm``, vLLM's fused MoE, Ascend GroupedMatmul) or as one GEMM per expert in a loop. The loop
pays per expert what the grouped kernel pays once — the launch, the gap while the host prepares the next expert's
rows — and with few rows per expert each GEMM fills few tiles. Where the program names each expert's work
(``record_function("expert_<id>")``, `profan.analyses.moe.tokens`), each range is one expert's launch, its rows
are the first GEMM's input rows (``Input Dims``), and the ranges that follow one dispatch all-to-all are one
layer's experts on this rank. Per layer: experts launched, their median and largest rows, the span from the first
to the last expert, their summed time and the gaps between them (span less the union of the ranges) — what a
grouped kernel saves at least.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.analyses.moe.tokens import expert_rows
from profan.model.evidence import cite_events
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack

CHECK = "moe-small-expert-gemms"
COLUMNS = ("rank", "step", "layer", "experts", "median_rows", "max_rows", "span_us", "expert_us", "gap_us")
COLUMNS += ("first_range", "source")
LAYER_COLUMNS = ("step", "layer", "tokens", "ts_us", "end_us", "range_idx")


def _layers(events: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """One rank's expert ranges with ``layer``: the number of dispatch all-to-alls that ended before each (same
    thread, same step), so the ranges between two all-to-alls are one layer's."""
    ranges = expert_rows(events, pattern).filter(pl.col("step").is_not_null(), pl.col("expert_id").is_not_null())
    a2a = events.filter(pl.col("kind") == "a2a").select("tid", pl.col("end_us").alias("a2a_end")).sort("a2a_end")
    a2a = a2a.with_columns(pl.int_range(pl.len()).over("tid").alias("layer"))
    joined = ranges.sort("ts_us").join_asof(
        a2a, left_on="ts_us", right_on="a2a_end", by="tid", strategy="backward", check_sortedness=False
    )
    return joined.with_columns(pl.col("layer").fill_null(-1)).select(LAYER_COLUMNS)


def _module_layers(events: pl.DataFrame) -> pl.DataFrame:
    """Where no expert range is named: each experts module call (``expert_module``) is one layer, and its GEMMs
    of the first projection (the outermost matmul ops inside it with the first one's input width) are one per
    expert — rows from their first input. The gaps are then those between that projection's GEMMs only."""
    modules = events.filter(pl.col("kind") == "module").select(
        "tid", pl.col("ts_us").alias("m_ts"), pl.col("end_us").alias("m_end"), pl.col("event_idx").alias("layer")
    )
    inputs = events.filter(pl.col("kind") == "input", pl.col("rows_in").is_not_null())
    if modules.is_empty() or inputs.is_empty():
        return pl.DataFrame()
    inside = (
        inputs.sort("ts_us")
        .join_asof(
            modules.sort("m_ts"),
            left_on="ts_us",
            right_on="m_ts",
            by="tid",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("layer").is_not_null(), pl.col("end_us") <= pl.col("m_end"))
        .sort("layer", "ts_us")
    )
    # outermost only (aten::linear holds an aten::addmm), then the first projection's
    outer = inside.filter(
        (pl.col("ts_us") >= pl.col("end_us").cum_max().shift(1).over("layer")) | pl.col("ts_us").is_first_distinct()
    )
    outer = outer.filter(pl.col("width") == pl.col("width").first().over("layer"))
    return outer.select(
        "step", "layer", pl.col("rows_in").alias("tokens"), "ts_us", "end_us", pl.col("event_idx").alias("range_idx")
    )


def expert_gemms(ranks: list[RankData], pack: RulePack) -> pl.DataFrame:
    """Per rank, step and layer (`COLUMNS`): the experts launched one by one and the gaps between them."""
    pattern = pack.check("moe-expert-imbalance")["token_events"]["expert_range"]
    frames = []
    for rank in ranks:
        if rank.moe_tokens is None or rank.moe_tokens.is_empty():
            continue
        layers = _layers(rank.moe_tokens, pattern).with_columns(pl.lit("expert ranges").alias("source"))
        if layers.is_empty():
            layers = _module_layers(rank.moe_tokens)
            layers = layers.with_columns(pl.lit("experts module, first projection").alias("source"))
        if not layers.is_empty():
            frames.append(layers.with_columns(pl.lit(rank.rank, pl.Int64).alias("rank")))
    if not frames:
        return pl.DataFrame()
    ranges = pl.concat(frames, how="vertical_relaxed").with_columns((pl.col("end_us") - pl.col("ts_us")).alias("us"))
    # the gap before each range: its start less the latest end of the layer's ranges before it (never negative)
    ranges = ranges.sort("rank", "step", "layer", "ts_us").with_columns(
        (pl.col("ts_us") - pl.col("end_us").cum_max().shift(1).over("rank", "step", "layer"))
        .clip(lower_bound=0.0)
        .fill_null(0.0)
        .alias("gap")
    )
    table = ranges.group_by("rank", "step", "layer").agg(
        pl.len().cast(pl.Int64).alias("experts"),
        pl.col("tokens").median().alias("median_rows"),
        pl.col("tokens").max().cast(pl.Int64).alias("max_rows"),
        (pl.col("end_us").max() - pl.col("ts_us").min()).alias("span_us"),
        pl.col("us").sum().alias("expert_us"),
        pl.col("gap").sum().alias("gap_us"),
        pl.col("range_idx").first().alias("first_range"),
        pl.col("source").first(),
    )
    return table.select(COLUMNS).sort("rank", "step", "layer")


def expert_gemm_findings(
    ranks: list[RankData], table: pl.DataFrame, steps: pl.DataFrame, pack: RulePack
) -> list[Finding]:
    """One finding per rank whose layers launch at least ``min_experts`` experts one by one with a median of at
    most ``small_rows`` rows: graded by the gaps between them as a share of the step (info below warning)."""
    if table.is_empty():
        return []
    chk = pack.check(CHECK)
    small = table.filter(pl.col("experts") >= chk["min_experts"], pl.col("median_rows") <= chk["small_rows"])
    if small.is_empty():
        return []
    step_us = steps.group_by("rank", "step").agg(pl.col("step_us").max()) if "step_us" in steps.columns else None
    per_step = small.group_by("rank", "step").agg(
        pl.col("gap_us").sum(),
        pl.col("experts").sum(),
        pl.col("median_rows").median(),
        pl.len().alias("layers"),
        pl.col("source").first(),
    )
    if step_us is not None:
        per_step = per_step.join(step_us, on=["rank", "step"], how="left")
    else:
        per_step = per_step.with_columns(pl.lit(None, pl.Float64).alias("step_us"))
    by_rank = {rank.rank: rank for rank in ranks}
    out = []
    means = pl.all().exclude("source", "step").mean()
    per_rank = per_step.group_by("rank").agg(means, pl.col("step").alias("steps"), pl.col("source").first())
    for row in per_rank.sort("rank").iter_rows(named=True):
        share = row["gap_us"] / row["step_us"] if row["step_us"] else 0.0
        sev = graded(share, chk) or chk["severity"]
        cited = small.filter(pl.col("rank") == row["rank"])["first_range"].drop_nulls().head(20).to_list()
        out.append(_finding(by_rank[row["rank"]], row, share, sev, (chk, cited)))
    return out


def _finding(rank: RankData, row: dict, share: float, sev: str, context: tuple) -> Finding:
    """``context``: the check and the expert ranges to cite (the first of each layer)."""
    chk, cited = context
    per_layer = row["experts"] / row["layers"]
    steps = [step for step in row["steps"] if step is not None]
    of_step = f"{pct(share)} of the step" if steps else "not held to a step (no step marker)"
    title = (
        f"Rank {rank.rank} runs its experts one GEMM per expert ({per_layer:.0f} per layer, median "
        f"{row['median_rows']:.0f} rows each): the gaps between them are {of_step}"
    )
    when = f"Per step (mean over steps {', '.join(map(str, sorted(steps)))})" if steps else "Over the capture"
    message = (
        f"{when}: {row['layers']:.0f} MoE layer call(s) "
        f"each launch {per_layer:.0f} experts separately, a median of {row['median_rows']:.0f} token rows per "
        f"expert (at most {chk['small_rows']} counts as small); between one expert's work and the next the rank "
        f"spends {ms(row['gap_us'])} ({of_step}) that one grouped GEMM over the local experts would not. Read "
        f"from the {row['source']}: rows are each expert GEMM's first input (Input Dims)."
    )
    file = rank.files.get("kineto_trace") or rank.files.get(rank.kernel_file)
    evidence = (cite_events(file, cited, len(cited), {"rank": rank.rank, "source": row["source"]}),) if file else ()
    metrics = {
        "share": round(share, 6),
        "gap_us": round(row["gap_us"], 3),
        "experts_per_layer": round(per_layer, 3),
        "median_rows": row["median_rows"],
        "layers": row["layers"],
    }
    return Finding(
        check=CHECK,
        severity=sev,
        rank=rank.rank,
        title=title,
        message=message,
        metrics=metrics,
        evidence=evidence,
        steps=tuple(sorted(steps)),
    )
