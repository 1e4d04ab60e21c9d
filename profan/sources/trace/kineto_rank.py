"""What the per-rank map takes from a Kineto trace: the device events classified into kernel groups, the step
split and blocks in time, the collectives, all on the `KinetoTrace` that `profan.sources.trace.kineto` reads.

Why a module of its own: `profan.sources.trace.kineto` says what a trace means (steps, device events, collectives);
this one reduces that to a rank's tables. The per-rank map loads a rank's trace once (`load_cached`) and classifies
its device events once (`device_events`), then hands both to the collectives pass
(`profan.ranks.collectives.kineto_collectives`) and to `load_rank_trace`.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.model.evidence import MAX_CITED
from profan.rulepack import limits, rl
from profan.rulepack.classify import classify_distinct, uses_neighbors, with_neighbors
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.common import intervals
from profan.sources.rl import forwards as rl_forwards
from profan.sources.trace import kineto_ep, kineto_iterations, kineto_moe
from profan.sources.trace.chrome import bad_args_warning, bad_steps_warning, no_phase_warning, not_utf8_warning
from profan.sources.trace.kineto import KinetoTrace, load, parse_trace, parse_variant

GROUP_KEYS = ["step", "op", "name", "type", "core", "input_shapes", "bucket", "rule_id"]
TOP_EVENTS = 20  # largest events kept per group, for evidence


def classify_events(dev: pl.DataFrame, rules: list, roles: Roles | None = None) -> pl.DataFrame:
    """Bucket, rule id and deciding context per device event, decided once per distinct value of the fields the
    rules read. Where rules read ``neighbors`` (a kernel's place among the layer's anchor kernels on its stream,
    `classify.with_neighbors`), a second pass decides with it."""
    anchors = (roles or default_roles()).layer_anchor_buckets
    out = classify_distinct(dev, rules)
    if uses_neighbors(rules) and not out.is_empty():
        over = ["stream"] if "stream" in out.columns else []
        out = with_neighbors(out, ["ts_us", "event_idx"], over, anchors, "context")
        out = classify_distinct(out.drop("bucket", "rule_id", "decided_by"), rules)
    return out


def kernel_groups(dev: pl.DataFrame) -> pl.DataFrame:
    """The same shape as the kernel_details groups, with event indexes in ``lines`` (the locator column)."""
    d = dev.with_columns(pl.lit(None, pl.String).alias("input_shapes"))
    return (
        d.group_by(GROUP_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("dur_us").sum().alias("time_us"),
            pl.col("dur_us").max().alias("max_us"),
            pl.lit(None, pl.Float64).alias("wait_us"),
            pl.col("ts_us").min().alias("first_start_us"),
            pl.col("end_us").max().alias("last_end_us"),
            # one top-k of (event, duration) pairs, ties broken by the earlier event so the choice is reproducible
            pl.struct("event_idx", "dur_us")
            .top_k_by(["dur_us", "event_idx"], TOP_EVENTS, reverse=[False, True])
            .alias("_top"),
            pl.col("context").drop_nulls().mode().sort().first().alias("context"),
            # what decided the group's bucket beyond the name (rule's context fields), its most common value
            pl.col("decided_by").drop_nulls().mode().sort().first().alias("decided_by"),
        )
        .with_columns(
            pl.col("_top").list.eval(pl.element().struct.field("event_idx")).alias("lines"),
            pl.col("_top").list.eval(pl.element().struct.field("dur_us")).alias("line_durs"),
        )
        .drop("_top")
        .sort(  # every key breaks ties: one order for the same trace
            ["step", "time_us", *GROUP_KEYS[1:]],
            descending=[False, True, *[False] * (len(GROUP_KEYS) - 1)],
            nulls_last=True,
        )
    )


def _union_us(runs: pl.DataFrame, by: list[str], name: str) -> pl.DataFrame:
    """Length of the union of [ts, end) intervals per group — overlapping events count once (``runs``:
    `intervals.union_runs`, which the step's blocks in time are cut from too)."""
    return intervals.union_length(runs, by, name)


def device_split(
    dev: pl.DataFrame,
    steps: pl.DataFrame,
    roles: Roles | None = None,
    loading: pl.DataFrame | None = None,
    host: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Computing / Communication(Not Overlapped) / Free per step (`device_split_blocks`, without the blocks)."""
    return device_split_blocks(dev, steps, roles, loading, host)[0]


def device_split_blocks(
    dev: pl.DataFrame,
    steps: pl.DataFrame,
    roles: Roles | None = None,
    loading: pl.DataFrame | None = None,
    host: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Computing / Communication(Not Overlapped) / Free per step, from the device lanes themselves, and the same
    time placed in time: each step's blocks of compute, exposed communication and idle (`intervals.step_blocks`;
    the whole trace's when it has no ProfilerStep), cut from the very runs the totals are the lengths of.

    The split step_trace_time.csv gives, by interval union (overlaps count once, no timestamp rounded). A step's
    window runs from the first start to the last end of its own events, and every device event inside it
    counts, whichever step launched it (when the host runs ahead, the previous step's kernels still occupy the
    device). One row per ProfilerStep with device events, one (``scope`` = trace) for the whole trace; ``device``
    says what was measured (GPU, or CPU for a CPU-only trace). The time before a window, when the device may wait
    for the step's input, is ``idle_before_us`` (`_idle_before`; ``loading``: the host's data-loading spans);
    for it and the longest idle stretch, ``host``'s spans (`kineto.host_spans`) name what the host was doing."""
    if dev.is_empty():
        return pl.DataFrame(), pl.DataFrame()
    launch = pl.col("launch_us") if "launch_us" in dev.columns else pl.lit(None, pl.Float64).alias("launch_us")
    graph = pl.col("graph") if "graph" in dev.columns else pl.lit(False).alias("graph")
    d = dev.select(
        "step", "event_idx", "ts_us", "end_us", launch, (pl.col("bucket") == "communication").alias("_comm"), graph
    )
    own = d.filter(pl.col("step").is_not_null()).with_columns(pl.lit("step").alias("scope"))
    whole = d.with_columns(pl.lit(None, pl.Int64).alias("step"), pl.lit("trace").alias("scope"))
    by = ["scope", "step"]
    span = _spans(pl.concat([own, whole]), by)
    foreign = _foreign_events(d, span.filter(pl.col("scope") == "step"))
    scoped = pl.concat([own, foreign.drop("_own"), whole])
    runs = {
        "busy_us": intervals.union_runs(scoped, by),
        "computing_us": intervals.union_runs(scoped.filter(~pl.col("_comm")), by),
        "communication_us": intervals.union_runs(scoped.filter(pl.col("_comm")), by),
    }
    out = span.join(foreign.group_by(by).agg(pl.len().alias("other_events")), on=by, how="left", nulls_equal=True)
    for name, value in runs.items():
        out = out.join(_union_us(value, by, name), on=by, how="left", nulls_equal=True)
    out = out.with_columns(
        pl.col("computing_us", "communication_us").fill_null(0.0), pl.col("other_events").fill_null(0)
    )
    out = out.with_columns(
        (pl.col("end_us") - pl.col("start_us")).alias("step_us"),
        (pl.col("computing_us") + pl.col("communication_us") - pl.col("busy_us")).alias("overlapped_us"),
    )
    out = out.with_columns(
        (pl.col("communication_us") - pl.col("overlapped_us")).alias("comm_not_overlapped_us"),
        (pl.col("step_us") - pl.col("busy_us")).alias("free_us"),
        pl.lit("CPU" if (dev["core"] == "CPU").all() else "GPU").alias("device"),
    )
    out = out.join(_step_events(steps, roles or default_roles()), on="step", how="left")
    out = _idle_split(out.join(_longest_gap(scoped, by), on=by, how="left", nulls_equal=True), scoped, by)
    out = _idle_before(out, loading, _first_idle_start(d, span, steps, roles or default_roles()))
    out = _host_columns(out, host)
    return out.select(*SPLIT_COLUMNS).sort("scope", "step", nulls_last=True), _blocks(span, runs, by)


def _host_columns(out: pl.DataFrame, host: pl.DataFrame | None) -> pl.DataFrame:
    """``out`` with what the host did in its longest idle stretch (``gap_*``) and in the idle time before each
    step (``before_*``): `_host_during`."""
    by = ["scope", "step"]
    gaps = out.select(*by, (pl.col("gap_end_us") - pl.col("gap_us")).alias("_a"), pl.col("gap_end_us").alias("_b"))
    before = out.select(
        *by, (pl.col("start_us") - pl.col("idle_before_us")).alias("_a"), pl.col("start_us").alias("_b")
    )
    return _host_during(_host_during(out, gaps, host, "gap"), before, host, "before")


def _first_idle_start(frame: pl.DataFrame, span: pl.DataFrame, steps: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """Where the idle time before the first step window begins (``step, _first_from, _first_event``): its
    ProfilerStep's start on the host, or later the end of the last device event of no step (or another) that
    began before the window (the tail of work launched before the capture's first step), with that event."""
    schema = {"step": pl.Int64, "_first_from": pl.Float64, "_first_event": pl.Int64}
    windows = span.filter(pl.col("scope") == "step").sort("start_us", "step")
    if windows.is_empty():
        return pl.DataFrame(schema=schema)
    step, start = int(windows["step"][0]), float(windows["start_us"][0])
    host = steps.filter((pl.col("cat") == roles.kineto_annotation_cat) & (pl.col("step") == step))["start_us"].min()
    if host is None or host >= start:
        return pl.DataFrame(schema=schema)
    tail = frame.filter(pl.col("ts_us") < start).sort("end_us", "event_idx", descending=[True, False]).head(1)
    later = not tail.is_empty() and float(tail["end_us"][0]) > host
    row = {"step": [step], "_first_from": [float(tail["end_us"][0]) if later else float(host)]}
    return pl.DataFrame({**row, "_first_event": [int(tail["event_idx"][0]) if later else None]}, schema=schema)


def _idle_before(out: pl.DataFrame, loading: pl.DataFrame | None, first_from: pl.DataFrame) -> pl.DataFrame:
    """``out`` with, per step window, the device's idle time since the previous step's window ended
    (``idle_before_us``; windows that overlap leave none), ``before_event`` the event it starts at (the latest
    end of the earlier windows), and of that time what the host spent in its data loader
    (``loading_before_us``: overlap with the ``loading`` spans, with ``loading_event`` the span that overlaps
    it most). The first window has no previous one: its idle time runs from its step's start on the host
    (`_first_idle_start`; the host annotation, cited as the step's ``step_event``, or the device work left from
    before the step) — a step that begins with the host preparing its input for longer than the device computes
    it is idle for most of its period. Null where the step has no host annotation, and for the whole trace's
    row."""
    frame = (
        out.filter(pl.col("scope") == "step")
        .sort("start_us", "step")
        .select("scope", "step", "start_us", "end_us", "last_event")
        .join(first_from, on="step", how="left")
    )
    latest = pl.when(pl.col("end_us") == pl.col("end_us").cum_max()).then(pl.col("last_event")).forward_fill()
    # the end the idle time starts at is the latest so far: a window inside another ends earlier
    frame = frame.with_columns(
        pl.col("end_us").cum_max().shift(1).alias("_prev_end"), latest.shift(1).alias("before_event")
    )
    first = pl.col("_prev_end").is_null()
    frame = frame.with_columns(
        pl.when(first).then(pl.col("_first_from")).otherwise(pl.col("_prev_end")).alias("_prev_end"),
        pl.when(first).then(pl.col("_first_event")).otherwise(pl.col("before_event")).alias("before_event"),
    )
    frame = frame.with_columns((pl.col("start_us") - pl.col("_prev_end")).clip(0.0).alias("idle_before_us"))
    if loading is not None and not loading.is_empty():
        hit = (
            frame.filter(pl.col("idle_before_us") > 0)
            .join_where(
                loading.rename({"event_idx": "loading_event", "start_us": "_ls", "end_us": "_le"}),
                pl.col("_ls") < pl.col("start_us"),
                pl.col("_le") > pl.col("_prev_end"),
            )
            .with_columns(
                (pl.min_horizontal("_le", "start_us") - pl.max_horizontal("_ls", "_prev_end")).alias("_overlap")
            )
            .group_by("step")
            .agg(
                pl.col("_overlap").sum().alias("loading_before_us"),
                pl.col("loading_event").sort_by("_overlap", "loading_event", descending=[True, False]).first(),
            )
        )
        frame = frame.join(hit, on="step", how="left").with_columns(
            pl.when(pl.col("idle_before_us").is_not_null())
            .then(pl.min_horizontal("loading_before_us", "idle_before_us").fill_null(0.0))
            .alias("loading_before_us")
        )
    else:
        frame = frame.with_columns(
            pl.when(pl.col("idle_before_us").is_not_null()).then(0.0).alias("loading_before_us"),
            pl.lit(None, pl.Int64).alias("loading_event"),
        )
    cols = ["idle_before_us", "before_event", "loading_before_us", "loading_event"]
    return out.join(frame.select("scope", "step", *cols), on=["scope", "step"], how="left", nulls_equal=True)


HOST_COVER = 0.5  # a host span tells what the host did in an idle stretch when it covers this share of it
HOST_COLUMNS = ("op_event", "op", "op_us", "call_event", "call", "call_us")


def _host_during(out: pl.DataFrame, stretches: pl.DataFrame, host: pl.DataFrame | None, prefix: str) -> pl.DataFrame:
    """``out`` with, per idle stretch (``scope, step, _a, _b``), the innermost host op and runtime call that
    cover at least `HOST_COVER` of it: the shortest such span, since the frames around it (the step, the
    training loop) cover the stretch too and say nothing of it. ``{prefix}_op_event``, ``{prefix}_op``,
    ``{prefix}_op_us`` (its time inside the stretch) and the same for ``call``."""
    names = [f"{prefix}_{c}" for c in HOST_COLUMNS]
    by = ["scope", "step"]
    stretches = stretches.filter(pl.col("_b") > pl.col("_a"))
    if host is None or host.is_empty() or stretches.is_empty():
        empty = [
            pl.lit(None, t).alias(name) for name, t in zip(names, (pl.Int64, pl.String, pl.Float64) * 2, strict=True)
        ]
        return out.with_columns(empty)
    inside = pl.min_horizontal("end_us", "_b") - pl.max_horizontal("start_us", "_a")
    frame = stretches.join_where(host, pl.col("start_us") < pl.col("_b"), pl.col("end_us") > pl.col("_a"))
    frame = frame.with_columns(inside.alias("_in")).filter(pl.col("_in") >= HOST_COVER * (pl.col("_b") - pl.col("_a")))
    length = pl.col("end_us") - pl.col("start_us")
    best = frame.sort(length, "event_idx").group_by(*by, "kind", maintain_order=True).first()
    for kind in ("op", "call"):
        picked = best.filter(pl.col("kind") == kind).select(
            *by,
            pl.col("event_idx").alias(f"{prefix}_{kind}_event"),
            pl.col("name").alias(f"{prefix}_{kind}"),
            pl.col("_in").alias(f"{prefix}_{kind}_us"),
        )
        out = out.join(picked, on=by, how="left", nulls_equal=True)
    return out


def _spans(events: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Each step's window (and the whole trace's): from its first event's start to its last event's end."""
    return events.group_by(by).agg(
        pl.col("ts_us").min().alias("start_us"),
        pl.col("end_us").max().alias("end_us"),
        pl.len().alias("events"),
        pl.col("event_idx").sort_by("ts_us").first().alias("first_event"),
        pl.col("event_idx").sort_by("end_us").last().alias("last_event"),
        pl.col("graph").sum().alias("graph_events"),  # replayed from a CUDA / HIP graph (roles kineto_graph_launch)
    )


def _blocks(span: pl.DataFrame, runs: dict[str, pl.DataFrame], by: list[str]) -> pl.DataFrame:
    """The steps' blocks in time; the whole trace's only when it has no step (its blocks would repeat theirs)."""
    windows = span.filter(pl.col("scope") == "step")
    if windows.is_empty():
        windows = span.filter(pl.col("scope") == "trace")
    blocks = intervals.step_blocks(windows, runs["computing_us"], runs["communication_us"], by)
    return blocks.drop("scope").with_columns(pl.lit("device_lanes").alias("source"))


SPLIT_COLUMNS = (
    "scope",
    "step",
    "device",
    "step_event",
    "gpu_step_event",
    "step_name",
    "first_event",
    "last_event",
    "events",
    "other_events",
    "graph_events",
    "start_us",
    "end_us",
    "step_us",
    "computing_us",
    "communication_us",
    "overlapped_us",
    "comm_not_overlapped_us",
    "free_us",
    "idle_host_us",
    "idle_other_us",
    "idle_unknown_us",
    "idle_before_us",
    "before_event",
    "loading_before_us",
    "loading_event",
    "busy_us",
    "gap_us",
    "gap_before_event",
    "gap_after_event",
    *(f"gap_{c}" for c in HOST_COLUMNS),
    *(f"before_{c}" for c in HOST_COLUMNS),
)


def _foreign_events(frame: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Device events of another step (or of none) that overlap a step's window, clipped to it: one row per
    (window, event). An inequality join, so an event is paired only with the few windows it overlaps."""
    w = windows.select("step", pl.col("start_us").alias("_w0"), pl.col("end_us").alias("_w1"))
    j = frame.rename({"step": "_own"}).join_where(w, pl.col("ts_us") < pl.col("_w1"), pl.col("end_us") > pl.col("_w0"))
    j = j.filter(pl.col("_own").ne_missing(pl.col("step")))
    return j.select(
        "step",
        "event_idx",
        pl.max_horizontal("ts_us", "_w0").alias("ts_us"),
        pl.min_horizontal("end_us", "_w1").alias("end_us"),
        "launch_us",
        "_comm",
        "graph",
        pl.lit("step").alias("scope"),
        "_own",
    )


def _step_events(steps: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """Per step, its ProfilerStep annotation on the CPU and on the GPU (event indexes) and its name."""
    cpu = steps.filter(pl.col("cat") == roles.kineto_annotation_cat).unique("step", keep="first")
    gpu = steps.filter(pl.col("cat") == roles.kineto_gpu_annotation_cat).unique("step", keep="first")
    names = steps.sort("cat").unique("step", keep="first").select("step", pl.col("name").alias("step_name"))
    return names.join(cpu.select("step", pl.col("event_idx").alias("step_event")), on="step", how="left").join(
        gpu.select("step", pl.col("event_idx").alias("gpu_step_event")), on="step", how="left"
    )


def _idle_split(out: pl.DataFrame, frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``out`` with, per group, the idle time the device spent waiting for the host, apart from the rest. In each
    gap between device events, the part before the launch call of the event that ends it (its runtime event, same
    ``correlation``) is host-bound: the device had nothing queued and waited for the host to issue work (launch
    overhead, Python between ops, data loading). The rest of a gap the work was already issued: the device waited
    on something else (a synchronisation, another stream, a peer). A gap whose next event has no launch record
    cannot be split (``idle_unknown_us``). The launch latency itself is left out of the host's part, so it is a
    lower bound."""
    s = frame.select(*by, "ts_us", "end_us", "launch_us").sort(*by, "ts_us")
    s = s.with_columns(pl.col("end_us").cum_max().shift(1).over(by).alias("_prev_end"))
    s = s.with_columns((pl.col("ts_us") - pl.col("_prev_end")).alias("_gap")).filter(pl.col("_gap") > 0)
    host = pl.min_horizontal((pl.col("launch_us") - pl.col("_prev_end")).clip(0.0), pl.col("_gap"))
    split = s.group_by(by).agg(
        host.filter(pl.col("launch_us").is_not_null()).sum().alias("idle_host_us"),
        pl.col("_gap").filter(pl.col("launch_us").is_null()).sum().alias("idle_unknown_us"),
    )
    known = pl.col("device") == "GPU"  # a CPU-only trace launches nothing: its idle is not split
    return (
        out.join(split, on=by, how="left", nulls_equal=True)
        .with_columns(
            pl.when(known).then(pl.col("idle_host_us").fill_null(0.0)).alias("idle_host_us"),
            pl.when(known).then(pl.col("idle_unknown_us").fill_null(0.0)).alias("idle_unknown_us"),
        )
        .with_columns(
            (pl.col("free_us") - pl.col("idle_host_us") - pl.col("idle_unknown_us")).clip(0.0).alias("idle_other_us")
        )
    )


def _longest_gap(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per group, the longest stretch with no device event: its length and the two events around it — the one
    whose end it starts at (the latest end so far) and the next one to start. Evidence for idle time that a
    reader can check: the gap is the second event's ts minus the first's ts + dur."""
    s = frame.select(*by, "event_idx", "ts_us", "end_us").sort(*by, "ts_us", "event_idx")
    s = s.with_columns(pl.col("end_us").cum_max().over(by).alias("_max_end"))
    s = s.with_columns(
        pl.when(pl.col("end_us") == pl.col("_max_end"))
        .then(pl.col("event_idx"))
        .forward_fill()
        .over(by)
        .alias("_holder")
    )
    s = s.with_columns(
        pl.col("_max_end").shift(1).over(by).alias("_prev_end"),
        pl.col("_holder").shift(1).over(by).alias("gap_before_event"),
    )
    s = s.with_columns((pl.col("ts_us") - pl.col("_prev_end")).alias("gap_us")).filter(pl.col("gap_us") > 0)
    return (
        s.sort("gap_us", "event_idx", descending=[True, False])
        .group_by(by, maintain_order=True)
        .first()
        .select(
            *by,
            "gap_us",
            "gap_before_event",
            pl.col("event_idx").alias("gap_after_event"),
            pl.col("ts_us").alias("gap_end_us"),
        )
    )


# --------------------------------------------------------------------------- the per-rank map entry point


RUNS_NAMED = 3  # runs described in a step's row: the ones whose fusing saves most
OPS_NAMED = 6  # the ops of a run its description names, in order of their first kernel


def elementwise_runs(dev: pl.DataFrame, chk) -> pl.DataFrame:
    """Per step (null: outside any step), the runs of consecutive elementwise kernels on one stream, nothing
    else between them (check unfused-elementwise: which kernels are elementwise, the shortest run): ``total_us``
    the step's summed kernel time, ``runs``, ``kernels`` and ``run_us`` of the runs, ``saving_us`` what one kernel
    per run would save (each run's time beyond its longest kernel), ``named`` the largest runs in words and
    ``events`` their kernels' event indexes, longest first (the evidence). Decided in the map, where the events
    are in order; the reduce gets a row per step."""
    elementwise = pl.col("name").str.contains(chk["elementwise_kernel"]) & (
        pl.col("bucket") != "communication"
    ).fill_null(True)
    words = [pl.col(c).fill_null("") if c in dev.columns else pl.lit("").alias(c) for c in ("module", "context")]
    lane = pl.col("stream") if "stream" in dev.columns else pl.col("tid")  # a CPU-only trace's ops: their thread
    d = dev.select(
        "step", lane.alias("_lane"), "ts_us", "event_idx", "dur_us", *words, elementwise.fill_null(False).alias("_ew")
    )
    d = d.sort("step", "_lane", "ts_us", "event_idx", nulls_last=True)
    moved = pl.lit(False)
    for col in ("_ew", "step", "_lane"):
        moved = moved | pl.col(col).ne_missing(pl.col(col).shift(1))
    d = d.with_columns(moved.fill_null(True).cum_sum().alias("_run"))
    totals = d.group_by("step").agg(pl.col("dur_us").sum().alias("total_us"))
    runs = (
        d.filter("_ew")
        .group_by("step", "_run")
        .agg(
            pl.len().alias("kernels"),
            pl.col("dur_us").sum().alias("run_us"),
            (pl.col("dur_us").sum() - pl.col("dur_us").max()).alias("saving_us"),
            pl.col("event_idx"),
            pl.col("dur_us").alias("_durs"),
            pl.col("ts_us").min().alias("_first"),
            pl.col("module").first().str.split("/").list.last().alias("_module"),
            pl.col("context").filter(pl.col("context") != "").unique(maintain_order=True).alias("_ops"),
        )
        .filter(pl.col("kernels") >= chk["min_run"])
        .sort("step", "saving_us", "_first", descending=[False, True, False], nulls_last=True)
    )
    per_step = runs.group_by("step", maintain_order=True).agg(
        pl.len().alias("runs"),
        pl.col("kernels").sum(),
        pl.col("run_us").sum(),
        pl.col("saving_us").sum(),
        *(
            pl.col(c).head(RUNS_NAMED).list.explode(keep_nulls=False, empty_as_null=False)
            for c in ("event_idx", "_durs")
        ),
    )
    # the largest runs' kernels, longest first (as every kernel citation lists its rows)
    # (an evidence item lists MAX_CITED: a run of a million kernels ships no more than that to the reduce)
    longest_first = pl.col("_durs").list.eval(pl.element().arg_sort(descending=True).head(MAX_CITED))
    per_step = per_step.select(
        pl.exclude("event_idx", "_durs"), pl.col("event_idx").list.gather(longest_first).alias("events")
    )
    per_step = per_step.join(_run_kinds(runs), on="step", nulls_equal=True, maintain_order="left")
    return totals.join(per_step, on="step", how="inner", nulls_equal=True).sort("step", nulls_last=True)


def _run_kinds(runs: pl.DataFrame) -> pl.DataFrame:
    """Per step, the largest kinds of run in words — its kernels, module and ops — runs alike (one per layer)
    said once with how many there are, the kinds that save most first."""
    more = pl.when(pl.col("_ops").list.len() > OPS_NAMED).then(pl.lit(", …")).otherwise(pl.lit(""))
    ops = pl.col("_ops").list.head(OPS_NAMED).list.join(", ") + more
    where = pl.when(pl.col("_module") != "").then(pl.format(" in {}", "_module")).otherwise(pl.lit(""))
    named = pl.format("{} kernels{} ({}), {} ms", "kernels", where, ops, (pl.col("run_us") / 1000).round(2))
    return (
        runs.with_columns(named.alias("_named"))
        .group_by("step", "_named")
        .agg(pl.len().alias("_n"), pl.col("saving_us").sum().alias("_saving"), pl.col("_first").min())
        .sort("step", "_saving", "_first", descending=[False, True, False], nulls_last=True)
        .group_by("step", maintain_order=True)
        .agg(
            pl.when(pl.col("_n") > 1)
            .then(pl.format("{} (×{})", "_named", "_n"))
            .otherwise(pl.col("_named"))
            .head(RUNS_NAMED)
            .alias("named")
        )
    )


def load_cached(path: Path, roles: Roles | None = None, iterations: bool = True) -> tuple[KinetoTrace, bool]:
    """The rank's `KinetoTrace` (its parse through the Parquet cache) and whether the cache served the parse;
    ``iterations``: look for serving iterations (`kineto.load`)."""
    from profan.sources.common.cache import cached_parse

    roles = roles or default_roles()
    trace, hit = cached_parse(path, parse_variant(roles), lambda p: parse_trace(p, roles))
    return load(path, trace, roles, iterations), hit


def device_events(rd, kt: KinetoTrace, path: Path, pack, captures: list[Path] = ()) -> pl.DataFrame:
    """The trace's device events, replayed graph kernels given their captured op, classified: what the kernel
    groups and the collectives' windows are made of. Raises ProfanInputError when the trace holds nothing to
    analyse."""
    from profan.model.errors import ProfanInputError

    roles: Roles = pack.roles
    if kt.device.is_empty():
        device = ", ".join(dict.fromkeys(kineto_device_cat.lower() for kineto_device_cat in roles.kineto_device_cats))
        raise ProfanInputError(
            path, f"no device activity ({device}) and no {roles.kineto_cpu_op_cat} events: nothing to analyse"
        )
    if "graph" in kt.device.columns:  # kernels replayed from a graph take their op from its capture
        from profan.sources.trace import graph_replay

        graph_replay.fill(rd, kt, list(captures), roles)
    return classify_events(kt.device, pack.rules_for("cpu" if kt.cpu_only else "gpu"), roles)


def _count_skipped(rd, kt: KinetoTrace) -> None:
    """Count the trace's events and those left out of the device timeline, with why, in one warning: device
    events that cannot be sized or placed, and events that look like device work but no reader takes
    (`kineto.device_like`: no category, or phase B/E) — never dropped without a word."""
    lim = limits.active().max_duration_us
    what = (
        "trace events (device events whose start or duration is missing or not a number, whose duration is "
        f"negative or longer than {lim:,} µs (max_duration_us), or whose start is past int64 nanoseconds or more "
        "than max_duration_us from the trace's median start"
    )
    odd = []
    if kt.no_category:
        odd.append(f"{kt.no_category} with a launch's correlation id but no category (nor a stream)")
    if kt.not_complete:
        odd.append(f"{kt.not_complete} device events of phase B/E, not complete X events")
    what += "; device work profan cannot read: " + ", ".join(odd) + ")" if odd else ")"
    rd.count("kineto_trace", kt.events_read, kt.device_skipped + kt.no_category + kt.not_complete, what)


def load_rank_trace(rd, kt: KinetoTrace, hit: bool, dev: pl.DataFrame, pack) -> None:
    """Fill a ``RankData`` from one Kineto trace and its classified device events (`device_events`): kernel
    groups (event-index locators), device split per step, communication events."""
    roles: Roles = pack.roles
    rd.groups = kernel_groups(dev)
    rd.kernel_locator, rd.kernel_file = "events", "kineto_trace"
    rd.kernel_variant = "Kineto trace, CPU-only (top-level cpu_ops)" if kt.cpu_only else "Kineto trace (GPU)"
    rd.trace_steps, rd.step_blocks = device_split_blocks(dev, kt.steps, roles, kt.loading, kt.host)
    rd.trace_comm = kt.collectives
    moe = pack.check("moe-expert-imbalance")
    rd.moe_tokens = kineto_moe.rank_token_events(kt, moe["token_events"], moe["token_read_max_mb"])
    ep = pack.check("moe-ep-exposed")
    ep_tab = kineto_ep.ep_time(dev, pack.rule_parts(), tuple(ep["ep_parts"]), ep["comm_bucket"], ep["total_part"])
    rd.ep_time = None if ep_tab.is_empty() else ep_tab
    rd.fusible = elementwise_runs(dev, pack.check("unfused-elementwise"))
    view = kineto_iterations.without_layer_marks(kt) if "role" in rd.info else kt  # an RL role's generation: its ledger
    rd.iterations, rd.iteration_buckets = kineto_iterations.rank_view(view, dev, roles.kineto_annotation_cat)
    _count_skipped(rd, kt)
    if "role" in rd.info:  # an RL job's trace: what its step ledger reads (`analyses.rl`)
        rd.rl_spans, rd.rl_forwards = kt.annotations, rl_forwards.with_dims(kt.path, kt.forwards, rl.rules())
        rd.rl_busy = dev.select("event_idx", pl.col("ts_us").alias("start_us"), "end_us")
    rd.info.update(
        {
            key: value
            for key, value in {
                "device": kt.device_name,
                "world_size": kt.world_size,
                "rank_in_trace": kt.rank if kt.rank_origin == "distributedInfo.rank" else None,
                "steps": sorted(set(kt.steps["step"].to_list())) or None,
                "cache": "hit" if hit else None,
            }.items()
            if value is not None
        }
    )
    if kt.notes:
        rd.info["trace_notes"] = kt.notes
    if kt.no_phase:
        rd.warnings.append(no_phase_warning(rd.files["kineto_trace"], kt.no_phase))
    if kt.bad_args:
        rd.warnings.append(bad_args_warning(rd.files["kineto_trace"], kt.bad_args))
    if kt.adopted:
        rd.warnings.append(
            f"{rd.files['kineto_trace']}: read {kt.adopted} event(s) with no category as device activity: they "
            "carry a stream and a launch's correlation id, as only device work does (a kernel, or a Memcpy/Memset "
            "by its name)"
        )
    if kt.bad_steps:
        rd.warnings.append(bad_steps_warning(rd.files["kineto_trace"], kt.bad_steps))
    if kt.not_utf8:
        rd.warnings.append(not_utf8_warning(rd.files["kineto_trace"], kt.not_utf8))
    if kt.rank_problem:
        rd.warnings.append(
            f"{rd.files['kineto_trace']}: {kt.rank_problem}; the rank was taken as {rd.rank} ({rd.rank_origin})"
        )
    if kt.rank_origin == "distributedInfo.rank" and kt.rank != rd.rank:
        rd.warnings.append(f"distributedInfo.rank is {kt.rank} but the rank was taken as {rd.rank} ({rd.rank_origin})")
