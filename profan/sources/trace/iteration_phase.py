"""The phase of each model iteration — prefill, decode, mixed, or unknown — from evidence, never a guess.

Evidence, first that tells wins (rules/serving.toml): an annotation inside the iteration that names its batch
(``[[phase_annotation]]``: vLLM's execute label, SGLang's ForwardMode), the attention kernels it ran
(``[[phase_kernel]]``: a prefill and a decode variant in one iteration make it mixed), the query length of its
token input (1: decode; more: prefill). Each phase cites the event that decided it (``phase_event``) and the rule
(``phase_by``).
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.serving import PhaseRule, ServingRules

PHASE_SCHEMA = {"iteration": pl.Int64, "phase": pl.String, "phase_by": pl.String, "phase_event": pl.Int64}
QUERY_LENGTH = "query-length"  # phase_by of the token input's shape


def _in_window(points: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """``points`` (with ``ts_us``) with the iteration whose host window holds their start."""
    w = win.select("iteration", pl.col("start_us").alias("_w0"), pl.col("end_us").alias("_w1")).sort("_w0")
    out = points.sort("ts_us").join_asof(w, left_on="ts_us", right_on="_w0", strategy="backward")
    return out.filter(pl.col("iteration").is_not_null() & (pl.col("ts_us") <= pl.col("_w1"))).drop("_w0", "_w1")


def _matches(frame: pl.DataFrame, rules: tuple[PhaseRule, ...]) -> pl.DataFrame:
    """Rows of ``frame`` (``iteration, event_idx, name``) that a rule matches, with its phase and id (the first
    rule that matches a row; one pass per rule, not per row)."""
    parts = [
        frame.filter(pl.col("name").str.contains(rule.pattern)).select(
            "iteration", "event_idx", pl.lit(rule.phase).alias("phase"), pl.lit(rule.id).alias("phase_by")
        )
        for rule in rules
    ]
    if not parts:
        return pl.DataFrame(
            schema={"iteration": pl.Int64, "event_idx": pl.Int64, "phase": pl.String, "phase_by": pl.String}
        )
    return pl.concat(parts).unique(["event_idx"], keep="first", maintain_order=True)


def by_annotation(marked: pl.DataFrame, win: pl.DataFrame, rules: ServingRules) -> pl.DataFrame:
    """Per iteration, the phase its first phase-naming annotation says (the marker itself, or one inside it)."""
    ann = _in_window(marked.filter(pl.col("kind") == "annotation").select("event_idx", "name", "ts_us"), win)
    hit = _matches(ann.sort("ts_us", "event_idx"), rules.phase_annotations)
    return hit.group_by("iteration", maintain_order=True).first().rename({"event_idx": "phase_event"})


def by_kernels(work: pl.DataFrame, rules: ServingRules) -> pl.DataFrame:
    """Per iteration, the phase its attention kernels tell: one variant's phase, or mixed where it ran both a
    prefill and a decode variant; cited by its first such kernel (of the rarer phase when mixed)."""
    hit = _matches(work.sort("ts_us", "event_idx"), rules.phase_kernels)
    per = hit.group_by("iteration", "phase", maintain_order=True).agg(
        pl.col("phase_by").first(), pl.col("event_idx").first().alias("phase_event"), pl.len().alias("_n")
    )
    return (
        per.sort("iteration", "_n", "phase_event")
        .group_by("iteration", maintain_order=True)
        .agg(
            pl.when(pl.col("phase").n_unique() > 1)
            .then(pl.lit("mixed"))
            .otherwise(pl.col("phase").first())
            .first()
            .alias("phase"),
            pl.col("phase_by").str.join("+"),
            pl.col("phase_event").first(),
        )
    )


def tokens(token_events: pl.DataFrame | None, win: pl.DataFrame) -> pl.DataFrame:
    """Per iteration, its first token input: ``batch`` (first dim of a 2-D input), ``query_len`` (its last dim),
    ``tokens`` (all its elements: the tokens the forward takes, padding included) and ``token_event``."""
    schema = {
        "iteration": pl.Int64,
        "batch": pl.Int64,
        "query_len": pl.Int64,
        "tokens": pl.Int64,
        "token_event": pl.Int64,
    }
    if token_events is None or token_events.is_empty():
        return pl.DataFrame(schema=schema)
    first = _in_window(token_events, win).sort("ts_us", "event_idx").group_by("iteration", maintain_order=True).first()
    two_d = pl.col("dims").list.len() == 2
    return first.select(
        "iteration",
        pl.when(two_d).then(pl.col("dims").list.first()).alias("batch"),
        pl.when(two_d).then(pl.col("dims").list.last()).alias("query_len"),
        pl.col("dims")
        .list.eval(pl.element().cast(pl.Int64))
        .list.eval(pl.element().product())
        .list.first()
        .alias("tokens"),
        pl.col("event_idx").alias("token_event"),
    ).cast(schema)  # type: ignore[arg-type]


def phases(
    win: pl.DataFrame, marked: pl.DataFrame, work: pl.DataFrame, toks: pl.DataFrame, rules: ServingRules
) -> pl.DataFrame:
    """Per iteration (`PHASE_SCHEMA`): the first evidence that tells — annotation, kernels, query length — else
    unknown."""
    by_shape = toks.filter(pl.col("query_len").is_not_null()).select(
        "iteration",
        pl.when(pl.col("query_len") == 1).then(pl.lit("decode")).otherwise(pl.lit("prefill")).alias("phase"),
        pl.lit(QUERY_LENGTH).alias("phase_by"),
        pl.col("token_event").alias("phase_event"),
    )
    told = [by_annotation(marked, win, rules), by_kernels(work, rules), by_shape]
    cols = ["iteration", "phase", "phase_by", "phase_event"]
    ranked = pl.concat([t.select(cols).with_columns(pl.lit(index).alias("_rank")) for index, t in enumerate(told)])
    best = ranked.sort("iteration", "_rank").group_by("iteration", maintain_order=True).first().drop("_rank")
    out = win.select("iteration").join(best, on="iteration", how="left")
    return out.with_columns(pl.col("phase").fill_null("unknown")).cast(PHASE_SCHEMA)  # type: ignore[arg-type]
