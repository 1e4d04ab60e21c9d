"""Ascend ``trace_view.json`` semantics (format reference ascend-formats.md §3) on the chrome-trace event table.

* processes by their ``process_name`` metadata (``Python``, ``CANN``, ``Ascend Hardware``, ``HCCL`` or
  ``Communication``, ``Overlap Analysis``) — pids are formatted numbers that mean nothing on their own;
* Overlap Analysis lanes by ``thread_name`` (``Computing``, ``Communication``, ``Communication(Not Overlapped)``,
  ``Free``): their tid order differs between producers;
* HCCL op events on ``Group … Communication`` threads, task events on ``Plane k`` threads with their args
  (transport and link type, size, bandwidth);
* ``ProfilerStep#N`` on the Python lane.

The per-step Computing / Communication(Not Overlapped) / Free derived here is what torch_npu sums into
``step_trace_time.csv``; profan recomputes it so the two can be cross-checked.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.rulepack import limits
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.common import intervals
from profan.sources.trace.chrome import (
    Trace,
    bad_args_warning,
    bad_steps_warning,
    name_matches,
    no_phase_warning,
    not_utf8_warning,
    parse,
    placeable_start,
    step_number,
    usable_duration,
)

LANES = {
    "Computing": "computing_us",
    "Communication": "communication_us",
    "Communication(Not Overlapped)": "comm_not_overlapped_us",
    "Free": "free_us",
}
TOP_EVENTS = 20


def _names(frame: pl.DataFrame, kind: str, keys: list[str]) -> pl.DataFrame:
    return (
        frame.filter((pl.col("ph") == "M") & (pl.col("name").cast(pl.String) == kind))
        .select(*[pl.col(key).cast(pl.String) for key in keys], pl.col("arg_name").alias(kind))
        .unique(keys, keep="last")
    )


def usable(frame: pl.DataFrame) -> pl.Expr:
    """X events whose duration can be summed and whose start can be placed in the capture (`usable_duration`,
    `placeable_start` over ``ev``: the rules of the Kineto reader): the others are left out of every lane, and
    `load_rank_trace` counts them."""
    return usable_duration() & placeable_start(frame)


def lanes(frame: pl.DataFrame) -> pl.DataFrame:
    """X events (`usable`) with their ``process_name`` and ``thread_name``."""
    x = frame.filter((pl.col("ph") == "X") & usable(frame)).with_columns(
        pl.col("pid", "tid", "name", "cat").cast(pl.String)
    )
    return (
        x.join(_names(frame, "process_name", ["pid"]), on="pid", how="left")
        .join(_names(frame, "thread_name", ["pid", "tid"]), on=["pid", "tid"], how="left")
        .with_columns((pl.col("ts_us") + pl.col("dur_us")).alias("end_us"))
    )


def steps(x: pl.DataFrame, step_name: str) -> pl.DataFrame:
    """ProfilerStep spans on the Python lane (``step_name``: roles ``kineto_step``); one whose number is no int64
    has step null (`load` drops it)."""
    frame = x.filter((pl.col("process_name") == "Python") & pl.col("name").str.contains(step_name))
    return frame.select(
        step_number(pl.col("name"), step_name).alias("step"),
        pl.col("event_idx").alias("step_event"),
        pl.col("ts_us").alias("start_us"),
        "end_us",
    ).sort("start_us")


def overlap_split(x: pl.DataFrame, step_spans: pl.DataFrame) -> pl.DataFrame:
    """Per step: the Overlap Analysis lane totals, summed as torch_npu does (an event counts in the step its
    start falls in, with its whole duration); one row with null step when the trace has no ProfilerStep."""
    ov = _overlap_events(x, step_spans)
    if ov.is_empty():
        return pl.DataFrame()
    totals = ov.group_by("step", "step_event").agg(
        *[pl.col("dur_us").filter(pl.col("lane") == lane).sum().alias(col) for lane, col in LANES.items()],
        pl.len().alias("events"),
        pl.struct("event_idx", "dur_us")
        .top_k_by(["dur_us", "event_idx"], TOP_EVENTS, reverse=[False, True])
        .alias("top_events"),
        pl.col("ts_us").min().alias("start_us"),
        pl.col("end_us").max().alias("end_us"),
    )
    return totals.with_columns(
        pl.col("top_events").list.eval(pl.element().struct.field("event_idx")),
        pl.lit("step").alias("scope"),
        (pl.col("communication_us") - pl.col("comm_not_overlapped_us")).alias("overlapped_us"),
        (pl.col("computing_us") + pl.col("comm_not_overlapped_us") + pl.col("free_us")).alias("step_us"),
    ).sort("step")


def overlap_blocks(x: pl.DataFrame, step_spans: pl.DataFrame) -> pl.DataFrame:
    """Each step's blocks in time (`intervals.step_blocks`) from the Overlap Analysis lanes: the Computing lane's
    events are the compute, the Communication lane's the communication (exposed where no Computing event covers
    it), the rest of the step's window — from its first lane event's start to its last one's end, the events
    `overlap_split` sums — idle, which is what the Free lane holds."""
    ov = _overlap_events(x, step_spans)
    if ov.is_empty():
        return pl.DataFrame()
    by = ["step"]
    windows = ov.group_by(by).agg(pl.col("ts_us").min().alias("start_us"), pl.col("end_us").max())
    lane = pl.col("lane")
    compute = intervals.union_runs(ov.filter(lane == "Computing"), by)
    comm = intervals.union_runs(ov.filter(lane == "Communication"), by)
    blocks = intervals.step_blocks(windows, compute, comm, by)
    return blocks.with_columns(pl.lit("overlap_analysis").alias("source"))


def _overlap_events(x: pl.DataFrame, step_spans: pl.DataFrame) -> pl.DataFrame:
    """The Overlap Analysis lane events (``lane``) with the step whose span holds their start."""
    frame = (
        x.filter(pl.col("process_name") == "Overlap Analysis")
        .with_columns(pl.coalesce("thread_name", "name").alias("lane"))
        .filter(pl.col("lane").is_in(list(LANES)))
    )
    if frame.is_empty():
        return frame
    if step_spans.is_empty():
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("step"), pl.lit(None, pl.Int64).alias("step_event"))
    else:
        sp = step_spans.select("step", "step_event", pl.col("start_us").alias("_s0"), pl.col("end_us").alias("_s1"))
        frame = frame.sort("ts_us").join_asof(sp.sort("_s0"), left_on="ts_us", right_on="_s0", strategy="backward")
        frame = frame.filter(pl.col("ts_us") <= pl.col("_s1"))
    return frame


def hccl(x: pl.DataFrame, trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(HCCL ops on Group threads, plane tasks aggregated per plane / transport / link type)."""
    h = trace.with_details(x.filter(pl.col("process_name").is_in(default_roles().ascend_comm_processes)))
    thread = pl.col("thread_name").fill_null("")
    ops = h.filter(thread.str.contains(r"^Group .*Communication")).select(
        "event_idx", pl.col("thread_name").alias("group"), "name", "ts_us", "dur_us", "data_type", "alg_type", "count"
    )
    tasks = h.filter(thread.str.contains(r"^Plane \d+"))
    links = (
        tasks.group_by(pl.col("thread_name").alias("plane"), "transport_type", "link_type")
        .agg(
            pl.len().alias("tasks"),
            pl.col("dur_us").sum().alias("time_us"),
            pl.col("size_bytes").sum().alias("bytes"),
            # longest first, ties by the earlier event: the same trace cites the same events
            pl.col("event_idx")
            .sort_by(["dur_us", "event_idx"], descending=[True, False], nulls_last=True)
            .head(5)
            .alias("top_events"),
        )
        .with_columns((pl.col("bytes") / pl.col("time_us") / 1e3).alias("bandwidth_gbps"))
        .sort("plane", "transport_type", "link_type")
    )
    return ops.sort("ts_us"), links


def load(path: Path) -> tuple[Trace, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(trace, steps, overlap split per step, HCCL ops, HCCL plane links)."""
    return _load(path)[:5]


def _load(
    path: Path, loading: str | None = None, roles: Roles | None = None
) -> tuple[Trace, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, int, pl.DataFrame]:
    """`load`, how many ProfilerSteps were left out for a number that is no int64, and the steps' blocks in
    time (`overlap_blocks`). ``loading``: the data loader's name pattern, for the split's `loading_before`;
    ``roles``: the rule pack's (the step markers' name)."""
    from profan.sources.common.cache import cached_parse

    trace, _ = cached_parse(path, "trace_view", parse)
    x = lanes(trace.events)
    frame = steps(x, (roles or default_roles()).kineto_step)
    bad_steps = frame["step"].null_count()
    frame = frame.filter(pl.col("step").is_not_null())
    ops, links = hccl(x, trace)
    split = overlap_split(x, frame)
    if loading is not None:
        split = loading_before(x, frame, split, loading)
    return trace, frame, split, ops, links, bad_steps, overlap_blocks(x, frame)


def loading_before(x: pl.DataFrame, step_spans: pl.DataFrame, split: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """``split`` with ``loading_before_us``: per step, how long the host was inside its data loader (events whose
    name matches ``pattern``, roles ``kineto_data_loading``) between the step's start (its ProfilerStep) and its
    first Overlap Analysis event — the time step_trace_time.csv calls Preparing. Null where the trace records no
    loader at all."""
    if split.is_empty() or "step" not in split.columns or step_spans.is_empty():
        return split
    spans = x.filter(name_matches(x, pattern)).select(pl.col("ts_us").alias("_ls"), pl.col("end_us").alias("_le"))
    if spans.is_empty():  # no loader recorded (another input pipeline, or none): not a time of zero
        return split.with_columns(pl.lit(None, pl.Float64).alias("loading_before_us"))
    # each split row to its own ProfilerStep event: a step number may repeat (captures appended to one file)
    window = split.select("step_event", "start_us").join(
        step_spans.select("step_event", pl.col("start_us").alias("_s0")), on="step_event"
    )
    hit = (
        window.join_where(spans, pl.col("_ls") < pl.col("start_us"), pl.col("_le") > pl.col("_s0"))
        .group_by("step_event")
        .agg((pl.min_horizontal("_le", "start_us") - pl.max_horizontal("_ls", "_s0")).sum().alias("loading_before_us"))
    )
    return split.join(hit, on="step_event", how="left").with_columns(
        pl.when(pl.col("step_event").is_in(window["step_event"].implode()))
        .then(pl.col("loading_before_us").fill_null(0.0))
        .alias("loading_before_us")
    )


def load_rank_trace(rd, path: Path, roles: Roles | None = None) -> Trace:
    """Add the trace_view-derived step split and HCCL lanes to an Ascend ``RankData``, and say what was left out:
    events without a usable duration or start, steps of no usable number, invalid UTF-8 read as U+FFFD, args
    that are no object. Returns the parsed trace, for the HCCL plane tasks (`hccl_tasks.plane_tasks`). ``roles``:
    the rule pack's (the data loader's name, for the time it holds before each step's first task)."""
    roles = roles or default_roles()
    trace, _st, split, ops, links, bad_steps, blocks = _load(path, roles.kineto_data_loading, roles)
    file = rd.files["trace_view"]
    skipped = trace.events.select(((pl.col("ph") == "X") & ~usable(trace.events)).sum()).item()
    rd.count(
        "trace_view",
        int(trace.events.height),
        int(skipped),
        "trace events (events whose start or duration is missing or not a number, whose duration is negative "
        f"or longer than {limits.active().max_duration_us:,} µs (max_duration_us), or whose start is past int64 "
        "nanoseconds or more than max_duration_us from the trace's median start)",
    )
    if bad_steps:
        rd.warnings.append(bad_steps_warning(file, bad_steps))
    if trace.not_utf8:
        rd.warnings.append(not_utf8_warning(file, trace.not_utf8))
    if trace.no_phase:
        rd.warnings.append(no_phase_warning(file, trace.no_phase))
    if trace.bad_args:
        rd.warnings.append(bad_args_warning(file, trace.bad_args))
    if not split.is_empty():
        rd.trace_steps = split.with_columns(pl.lit("overlap_analysis").alias("source"))
    if not blocks.is_empty():
        rd.step_blocks = blocks
    if not ops.is_empty():
        rd.trace_comm = ops.with_columns(pl.lit("hccl_op").alias("source"))
    if not links.is_empty():
        rd.info["hccl_planes"] = int(links["plane"].n_unique())
        rd.trace_links = links
    return trace
