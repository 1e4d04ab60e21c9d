"""A serving capture's model iterations (one forward of the running batch each), from the events the trace
reader already holds: the marker events (`marks`, picked out of the parse by the serving rules), the device
events and the ProfilerSteps. No second read of the trace: every step is a polars expression over those frames.

Why in the reader: the marks are picked from the parse's full event table, which only the reader sees (the
per-rank map keeps the device events and steps, not every annotation). The iteration table per rank is what
the serving analyses (`profan.analyses.serving`) read, as the step table is for a training capture.

Segmentation, best marker first (rules/serving.toml): ``ProfilerStep#N`` where a serving capture steps the
profiler per iteration; else the first marker rule with a match (framework annotations, graph launches, the
top-level model forward of a ``with_stack`` capture), its outermost events. A capture is a serving capture when
a marker matches and no training op does. Each iteration's period runs from its start to the next one's start
(the last: to the end of its host window or of its device work, whichever is later), so the periods tile the
captured iterations' span; the device events launched inside an iteration's host window are its work.
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.serving import ServingRules
from profan.rulepack.serving import rules as serving_rules
from profan.sources.common import intervals
from profan.sources.trace import layer_pattern

MARK_SCHEMA = {
    "event_idx": pl.Int64,
    "rule": pl.String,
    "kind": pl.String,
    "order": pl.Int64,
    "name": pl.String,
    "ts_us": pl.Float64,
    "end_us": pl.Float64,
}
PROFILER_STEP = "profiler_step"


def no_marks() -> pl.DataFrame:
    """The marks of a capture read with the iteration view off: none."""
    return pl.DataFrame(schema=MARK_SCHEMA)


def marks(frame: pl.DataFrame, rules: ServingRules | None = None) -> tuple[pl.DataFrame, bool]:
    """The parse's events that match a marker rule (`MARK_SCHEMA`, ``order`` the rule's place: lower is better),
    and whether any op of the trace is a training op (then no event is a serving marker)."""
    rules = rules or serving_rules()
    if frame.is_empty():
        return no_marks(), False
    name = pl.col("name").cast(pl.String)
    names = frame.select(name.unique()).to_series()  # the regexes run on the distinct names, not on every event
    if names.str.contains(rules.training_op).any():
        return no_marks(), True
    complete = frame.filter((pl.col("ph") == "X") & pl.col("dur_us").is_not_null())
    parts = [
        complete.filter(
            (pl.col("cat").cast(pl.String) == marker.cat)
            & name.is_in(names.filter(names.str.contains(marker.pattern)).implode())
        ).select(
            "event_idx",
            pl.lit(marker.id).alias("rule"),
            pl.lit(marker.kind).alias("kind"),
            pl.lit(index, pl.Int64).alias("order"),
            name.alias("name"),
            pl.col("ts_us").cast(pl.Float64),
            (pl.col("ts_us") + pl.col("dur_us")).cast(pl.Float64).alias("end_us"),
        )
        for index, marker in enumerate(rules.markers)
    ]
    return pl.concat(parts).cast(MARK_SCHEMA).sort("ts_us", "event_idx"), False  # type: ignore[arg-type]


def or_layer_marks(marked: pl.DataFrame, unless: bool, dev: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """The marks, or where there are none (and not ``unless``: the trace trains, has ProfilerSteps, or is read
    with the iteration view off) those of its layer pattern (`layer_pattern.layer_marks`): the last marker."""
    if unless or not marked.is_empty():
        return marked
    return layer_pattern.layer_marks(dev, evidence, serving_rules(), MARK_SCHEMA)


def without_layer_marks(kt):
    """The trace without its layer-pattern marks: an RL job's rollout generates without a serving marker, and
    its step ledger (`profan.analyses.rl`), not the serving view, is what reads its forwards."""
    from dataclasses import replace

    return replace(kt, marks=kt.marks.filter(pl.col("rule") != serving_rules().layer_id))


def windows(marked: pl.DataFrame, steps: pl.DataFrame, step_cat: str) -> pl.DataFrame:
    """The host windows of the rank's iterations (``iteration, marker, rule, event_idx, name, start_us,
    end_us``): its ProfilerSteps when it has them, else the outermost events of its best marker rule; empty for a
    capture no marker matches."""
    if marked.is_empty():
        return pl.DataFrame()
    host = steps.filter(pl.col("cat") == step_cat) if not steps.is_empty() else steps
    if not host.is_empty():
        w = host.select(
            pl.lit(PROFILER_STEP).alias("marker"),
            pl.lit("ProfilerStep").alias("rule"),
            "event_idx",
            pl.col("name").cast(pl.String),
            "start_us",
            "end_us",
        )
    else:
        best = marked.filter(pl.col("order") == pl.col("order").min()).sort("ts_us", "event_idx")
        outer = pl.col("end_us").cum_max().shift(1)
        best = best.filter(outer.is_null() | (pl.col("ts_us") >= outer))
        w = best.select(
            pl.col("kind").alias("marker"),
            "rule",
            "event_idx",
            "name",
            pl.col("ts_us").alias("start_us"),
            "end_us",
        )
    w = w.sort("start_us", "event_idx")
    return w.with_row_index("iteration", offset=1).with_columns(pl.col("iteration").cast(pl.Int64))


def assign(dev: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """Each device event with the iteration whose host window launched it (its launch's time, else its own
    start, inside the window); events of no iteration are left out."""
    launch = pl.col("launch_us") if "launch_us" in dev.columns else pl.lit(None, pl.Float64)
    graph = pl.col("graph").fill_null(False) if "graph" in dev.columns else pl.lit(False).alias("graph")
    bucket = pl.col("bucket") if "bucket" in dev.columns else pl.lit("other").alias("bucket")
    at = pl.coalesce(launch, pl.col("ts_us")).alias("_at")
    dur = pl.col("dur_us") if "dur_us" in dev.columns else (pl.col("end_us") - pl.col("ts_us")).alias("dur_us")
    d = dev.select("event_idx", "name", "ts_us", "end_us", dur, graph, bucket.cast(pl.String), at)
    d = d.sort("_at").join_asof(
        win.select("iteration", pl.col("start_us").alias("_w0"), pl.col("end_us").alias("_w1")).sort("_w0"),
        left_on="_at",
        right_on="_w0",
        strategy="backward",
    )
    return d.filter(pl.col("iteration").is_not_null() & (pl.col("_at") <= pl.col("_w1"))).drop("_w0", "_w1")


def device_work(work: pl.DataFrame) -> pl.DataFrame:
    """Per iteration, its device events' count, first start, last end and busy time (interval union: overlaps
    count once)."""
    busy = intervals.union_length(intervals.union_runs(work, ["iteration"]), ["iteration"], "busy_us")
    span = work.group_by("iteration").agg(
        pl.len().alias("kernels"),
        pl.col("graph").sum().cast(pl.Int64).alias("graph_kernels"),
        pl.col("ts_us").min().alias("device_start_us"),
        pl.col("end_us").max().alias("device_end_us"),
    )
    return span.join(busy, on="iteration", how="left")


def periods(win: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """The windows with their device work and their periods: ``period_us`` from the iteration's start to the
    next one's (the last: to its host or device end, the later), ``idle_us`` the device's idle time in the
    period, ``between_kernels_us`` its idle time between the iteration's own first and last device event (what a
    launch-bound iteration loses), ``gap_after_us`` the host's time from the window's end to the next start,
    ``device_gap_us`` the device's idle from the iteration's last device event to the next iteration's first (0
    where they overlap, where either has no device event, and after the last)."""
    out = win.join(device_work(work), on="iteration", how="left").sort("iteration")
    out = out.with_columns(pl.col("kernels", "graph_kernels").fill_null(0), pl.col("busy_us").fill_null(0.0))
    last_end = pl.max_horizontal("end_us", pl.col("device_end_us").fill_null(pl.col("end_us")))
    nxt = pl.col("start_us").shift(-1)
    out = out.with_columns(pl.coalesce(nxt, last_end).alias("next_us"))
    return out.with_columns(
        (pl.col("next_us") - pl.col("start_us")).alias("period_us"),
        (pl.col("end_us") - pl.col("start_us")).alias("host_us"),
        (pl.col("next_us") - pl.col("start_us") - pl.col("busy_us")).clip(0.0).alias("idle_us"),
        (pl.col("device_end_us") - pl.col("device_start_us") - pl.col("busy_us"))
        .clip(0.0)
        .fill_null(0.0)
        .alias("between_kernels_us"),
        (nxt - pl.col("end_us")).clip(0.0).fill_null(0.0).alias("gap_after_us"),
        (pl.col("device_start_us").shift(-1) - pl.col("device_end_us")).clip(0.0).fill_null(0.0).alias("device_gap_us"),
    )


ITERATION_COLUMNS = [
    "iteration",
    "marker",
    "rule",
    "event_idx",
    "name",
    "phase",
    "phase_by",
    "phase_event",
    "start_us",
    "end_us",
    "next_us",
    "period_us",
    "host_us",
    "kernels",
    "graph_kernels",
    "busy_us",
    "idle_us",
    "between_kernels_us",
    "gap_after_us",
    "device_gap_us",
    "batch",
    "query_len",
    "tokens",
    "token_event",
]


def bucket_time(work: pl.DataFrame) -> pl.DataFrame:
    """Per iteration and bucket, its device events' summed time (``iteration, bucket, time_us``, as the
    breakdown sums kernel time: overlapping events each count)."""
    return work.group_by("iteration", "bucket").agg(pl.col("dur_us").sum().alias("time_us")).sort("iteration", "bucket")


def rank_view(
    kt, dev: pl.DataFrame, step_cat: str, rules: ServingRules | None = None
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """The rank's iterations (`ITERATION_COLUMNS`, one row each, in time order) and their device time per bucket
    (`bucket_time`), or (None, None) for a capture that is no serving capture (no marker, or a training op)."""
    from profan.sources.trace import iteration_phase, kineto_tokens

    rules = rules or serving_rules()
    win = windows(kt.marks, kt.steps, step_cat)
    if win.is_empty():
        return None, None
    work = assign(dev, win)
    toks = iteration_phase.tokens(kineto_tokens.rank_tokens(kt.path, rules), win)
    out = periods(win, work).join(iteration_phase.phases(win, kt.marks, work, toks, rules), on="iteration")
    return out.join(toks, on="iteration", how="left").select(ITERATION_COLUMNS).sort("iteration"), bucket_time(work)


def rank_iterations(kt, dev: pl.DataFrame, step_cat: str, rules: ServingRules | None = None) -> pl.DataFrame | None:
    """The rank's iterations alone (`rank_view`)."""
    return rank_view(kt, dev, step_cat, rules)[0]
