"""The last marker of a serving capture's iterations: the repetition of the model's per-layer op pattern, for a
capture that has no ProfilerStep, no serving annotation, no graph launch and no top-level module forward.

Why it holds: a decoder's forward runs the same layer L times, so an op the layer runs once (its attention, its
activation) occurs L times per iteration at a regular distance in the op sequence, and a longer distance separates
the last layer of one iteration from the first of the next (the op-count gaps of a two-layer model alternate
55–63 / 117 on the CPU captures). That alone could be any repeated block (a ResNet's), so the pattern counts only
where it agrees with the forward's token input: each iteration embeds its tokens once (rules/serving.toml
``token_op``) before its first layer, and every iteration has the same L layers. Each iteration then starts at
its token op and runs to the next one's; nothing agrees: no iteration (the capture stays one span).
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.serving import ServingRules


def layer_marks(dev: pl.DataFrame, evidence: pl.DataFrame, rules: ServingRules, schema: dict) -> pl.DataFrame:
    """The iterations' marks (``schema``: `kineto_iterations.MARK_SCHEMA`), one per token op event, where some op
    repeats as a layer pattern that agrees with them (module docstring); empty otherwise."""
    empty = pl.DataFrame(schema=schema)
    if dev.is_empty() or evidence.is_empty():
        return empty
    tokens = _token_events(evidence, rules)
    if tokens.height < rules.layer_min_iterations:
        return empty
    at = pl.coalesce(pl.col("launch_us"), pl.col("ts_us")) if "launch_us" in dev.columns else pl.col("ts_us")
    seq = dev.select("name", at.alias("_at"), "end_us").sort("_at").with_row_index("k")
    seq = seq.join_asof(tokens.select("token", pl.col("ts_us").alias("_at")), on="_at", strategy="backward")
    anchor = _anchor(seq, tokens.height, rules.layer_min_layers)
    if anchor is None:
        return empty
    ends = seq.drop_nulls("token").group_by("token").agg(pl.col("end_us").max().alias("end_us"))
    out = tokens.join(ends, on="token", how="left").sort("token")
    return out.select(
        "event_idx",
        pl.lit(rules.layer_id).alias("rule"),
        pl.lit("layer_pattern").alias("kind"),
        pl.lit(len(rules.markers), pl.Int64).alias("order"),
        "name",
        "ts_us",
        pl.max_horizontal("end_us", "ts_us").alias("end_us"),
    ).cast(schema)  # type: ignore[arg-type]


def _token_events(evidence: pl.DataFrame, rules: ServingRules) -> pl.DataFrame:
    """The token op's complete events in time order, numbered from 0 (``token``)."""
    name = pl.col("name").cast(pl.String)
    names = evidence.select(name.unique()).to_series()
    hits = names.filter(names.str.contains(rules.token_op))
    events = evidence.filter((pl.col("ph") == "X") & name.is_in(hits.implode()) & pl.col("dur_us").is_not_null())
    return (
        events.select("event_idx", name.alias("name"), pl.col("ts_us").cast(pl.Float64))
        .sort("ts_us", "event_idx")
        .with_row_index("token")
        .with_columns(pl.col("token").cast(pl.Int64))
    )


def _anchor(seq: pl.DataFrame, iterations: int, min_layers: int) -> str | None:
    """The op that repeats as the layer pattern: it occurs the same L ≥ ``min_layers`` times after each token op
    (every occurrence falls after the token op of its own iteration, L to an iteration), and the distance from
    one iteration's last layer to the next one's first is longer than any between two layers of an iteration.
    Of several, the one that occurs most; None where no op does."""
    per = (
        seq.drop_nulls("token")
        .group_by("name", "token")
        .agg(pl.len().alias("layers"))
        .group_by("name")
        .agg(
            pl.col("token").n_unique().alias("iterations"),
            pl.col("layers").min().alias("low"),
            pl.col("layers").max().alias("high"),
        )
    )
    even = per.filter(
        (pl.col("iterations") == iterations) & (pl.col("low") == pl.col("high")) & (pl.col("low") >= min_layers)
    )
    if even.is_empty():
        return None
    occurrences = seq.filter(pl.col("name").is_in(even["name"].implode())).sort("name", "k")
    gaps = occurrences.with_columns(
        (pl.col("k") - pl.col("k").shift(1).over("name")).alias("gap"),
        (pl.col("token") != pl.col("token").shift(1).over("name")).alias("crosses"),
    ).drop_nulls("gap")
    split = gaps.group_by("name").agg(
        pl.col("gap").filter(pl.col("crosses")).min().alias("between"),
        pl.col("gap").filter(~pl.col("crosses")).max().alias("within"),
        pl.len().alias("n"),
    )
    good = split.filter(pl.col("between") > pl.col("within")).sort("n", "name", descending=[True, False])
    return None if good.is_empty() else str(good["name"][0])
