"""Kineto (PyTorch profiler) semantics on top of the chrome-trace event table.

What a Kineto trace means for profan (format reference kineto-traces.md §3):

* **rank**: ``distributedInfo.rank``; else a number in the file name (``worker3_…``, ``rank3``); else 0, said so.
* **steps**: ``ProfilerStep#N`` annotations (CPU ``user_annotation``; GPU-side ``gpu_user_annotation`` too).
  A device event belongs to the step during which the CPU launched it (runtime event with the same
  ``correlation``); without a launch record, to the GPU-side step span holding its start.
* **device activity**: ``kernel``/``gpu_memcpy``/``gpu_memset`` events. A CPU-only trace has none; there the
  top-level ``cpu_op`` events of the main thread (the thread holding the steps, else the busiest) stand in, with
  the collectives that run on a worker thread and include waiting for peers (``gloo:*``): the main thread only
  enqueues those and then blocks outside any op, so without them the waiting would look like idle time.
* **context**: the CPU op that launched a kernel (same ``External id``, or via the launch's ``correlation``),
  so rules can decide ambiguous names (an expert GEMM launched from ``vllm::moe_forward`` is MoE).
* **collectives**: NCCL/RCCL kernels, ``c10d::*`` / ``record_param_comms`` cpu_ops and ``nccl:*`` / ``gloo:*``
  annotations (gloo ones run on a worker thread and include waiting for peers).
* **other writers**: the categories another writer gives the same events are read as today's (roles
  ``kineto_category_aliases``: the 2020-21 profiler's ``Operator`` / ``Kernel`` / ``Runtime`` / ``Memcpy`` /
  ``Memset``, whose ``ProfilerStep#N`` is an operator; MTIA's on-device and runtime events), and the report counts
  them. A bare event array (no top-level object) is read the same way.
* **graph replay**: a kernel whose launch is a graph launch (roles ``kineto_graph_launch``) was not launched by the
  op around that call: its context comes from the graph's capture trace (`profan.sources.trace.graph_replay`), and the
  step split counts such events (``graph_events``).
* **hostile or broken writers**: a device event whose start cannot be placed in the capture (`placeable_start`)
  is skipped and counted like one without a number; events that look like device work but have no category
  or are no complete event (phase ``B``/``E``) are counted and said, never dropped silently; one with no category
  that carries a stream and a launch's correlation id is read as device activity (`_uncategorised`), said too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.rulepack import rl
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.trace import kineto_context, kineto_iterations
from profan.sources.trace.chrome import (
    DROPPED,
    Trace,
    name_matches,
    parse,
    placeable_start,
    step_number,
    usable_duration,
)

# Every category, step marker, collective name and dtype size below comes from the rule pack's roles
# (rules/roles.toml: kineto_*, collectives, dtype_bytes, rank_in_trace_name); functions take them as ``roles``,
# the built-in ones when the caller has no pack.
# The ``source`` of a collective event: profan's own labels (in the collectives table), not trace categories.
SOURCE_KERNEL, SOURCE_CPU_OP, SOURCE_ANNOTATION = "kernel", "cpu_op", "annotation"


@dataclass
class KinetoTrace:
    """One rank's trace reduced to what analyses need; every row keeps its ``event_idx``."""

    path: Path
    rank: int
    rank_origin: str
    rank_problem: str | None  # what was wrong with distributedInfo.rank when it could not be used (said)
    device: pl.DataFrame  # device activity: event_idx, cat, name, op, ts_us, dur_us, end_us, step, context, …
    steps: pl.DataFrame  # step, event_idx, cat, start_us, end_us (CPU and GPU-side ProfilerStep events)
    collectives: pl.DataFrame  # communication events of all three kinds
    cpu_only: bool
    events_read: int
    device_skipped: int = 0  # device (or CPU-only: cpu_op) events without a usable duration or start, left out
    no_category: int = 0  # events with a launch's correlation id but no category (nor a stream): left out
    not_complete: int = 0  # device-looking events of phase B/E (no complete X event): left out
    adopted: int = 0  # events with no category read as device activity (stream and correlation id): said
    bad_args: int = 0  # events whose args is no JSON object, read as having none
    bad_steps: int = 0  # ProfilerStep annotations whose number is no int64: no step, left out
    not_utf8: int = 0  # invalid UTF-8 sequences in the event text, read as U+FFFD
    no_phase: int = 0  # elements of the event array without a "ph" field (no chrome-trace event), left out
    world_size: int | None = None
    device_name: str | None = None
    notes: list[str] = field(default_factory=list)
    # the host's data-loading spans (roles kineto_data_loading): event_idx, start_us, end_us
    loading: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the host's long spans (`host_spans`): event_idx, name, kind (op / call), start_us, end_us
    host: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the framework's annotations but the steps' (`annotation_spans`): event_idx, name, start_us, end_us
    annotations: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the starts of the ops an RL generation counts its forwards by (rules/rl.toml forward_op): event_idx, ts_us
    forwards: pl.DataFrame = field(default_factory=pl.DataFrame)
    # a serving capture's iteration markers (`kineto_iterations.marks`) and whether the trace trains (then none)
    marks: pl.DataFrame = field(default_factory=pl.DataFrame)
    trains: bool = False


HOST_SPAN_US = 500.0  # host spans this long or longer can name what the host did while the device sat idle


def keep_expr(roles: Roles | None = None) -> pl.Expr:
    roles = roles or default_roles()
    x = pl.col("ph") == "X"
    # of the Python frames, the nn.Module ones (the module context of launches, `kineto_context`) and those
    # long enough to name the host's work in an idle stretch (`host_spans`): a trace has tens of thousands
    frames = (pl.col("cat") == roles.kineto_python_cat) & (
        pl.col("name").cast(pl.String).str.contains(roles.kineto_module_frame) | (pl.col("dur_us") >= HOST_SPAN_US)
    )
    return (pl.col("ph") == "M") | (x & (pl.col("cat").is_in(roles.kineto_keep_cats) | frames)) | device_like(roles)


def device_like(roles: Roles) -> pl.Expr:
    """Events that look like device work but no reader would take: of phase X, B or E with no category and a
    launch's ``correlation`` id, or of a device category (any writer's name) and phase B or E. Kept by the parse
    so that `load` can count and say them (or read the uncategorised ones, `_uncategorised`): dropped with the
    rest, all kernels without ``cat`` used to vanish into a report of a GPU idle 99.6% of the time."""
    ph, cat = pl.col("ph"), pl.col("cat")
    no_cat = cat.is_null() & pl.col("correlation").is_not_null()
    not_x = cat.is_in(list(roles.kineto_device_cats_all)) & ph.is_in(["B", "E"])
    return (ph.is_in(["X", "B", "E"]) & (no_cat | not_x)).fill_null(False)


def parse_variant(roles: Roles | None = None) -> str:
    """The cache variant of a parse with `keep_expr`: the kept categories and those whose args are read shape the
    table."""
    r, base = roles or default_roles(), default_roles()
    if (r.kineto_keep_cats, r.kineto_detail_cats) == (base.kineto_keep_cats, base.kineto_detail_cats):
        return "kineto/4"
    return f"kineto/4/keep={','.join(sorted(set(r.kineto_keep_cats)))}/detail={','.join(sorted(r.kineto_detail_cats))}"


def parse_trace(path: Path, roles: Roles | None = None) -> Trace:
    """The chrome-trace parse a Kineto reading needs: the roles' categories kept, device activity's args read."""
    roles = roles or default_roles()
    return parse(path, keep=keep_expr(roles), detail=roles.kineto_detail_cats)


def normalised(frame: pl.DataFrame, roles: Roles) -> tuple[pl.DataFrame, dict[str, int]]:
    """The events with other writers' categories read as today's (roles ``kineto_category_aliases``: the
    2020-21 profiler's Operator / Kernel / Memcpy…, MTIA's mtia_ccp_events…), and how many of each were. Such a
    writer records ProfilerStep#N as an operator: that one is the step annotation, not an op."""
    aliases = roles.kineto_category_aliases
    cat = pl.col("cat").cast(pl.String)
    counts = frame.filter(cat.is_in(list(aliases))).group_by(cat).len().sort("cat")
    if counts.is_empty():
        return frame, {}
    as_op = [key for key, value in aliases.items() if value == roles.kineto_cpu_op_cat]
    step = cat.is_in(as_op) & pl.col("name").cast(pl.String).str.contains(roles.kineto_step)
    new = pl.when(step).then(pl.lit(roles.kineto_annotation_cat)).otherwise(cat.replace(aliases))
    return frame.with_columns(new.cast(pl.Categorical).alias("cat")), dict(counts.iter_rows())


def rank_of(meta: dict, path: Path, roles: Roles | None = None) -> tuple[int, str, str | None]:
    """(rank, where it came from, what was wrong with distributedInfo.rank): ``distributedInfo.rank`` when it is
    a whole number ≥ 0, else the file name, else 0. An unusable distributedInfo.rank (``"three"``, ``1.5``,
    ``-1``) is the third value, so the caller can say it."""
    info = meta.get("distributedInfo")
    raw = info.get("rank") if isinstance(info, dict) else None
    problem = None
    if raw is not None:
        if (rank := _whole_number(raw)) is not None:
            return rank, "distributedInfo.rank", None
        shown = json.dumps(raw)  # a value of any length and shape: cut for the one-line warning
        problem = f"distributedInfo.rank {shown if len(shown) <= 40 else shown[:39] + '…'} is not a rank number"
    match = re.search((roles or default_roles()).rank_in_trace_name, path.name)
    if match and (rank := _whole_number(match.group(1))) is not None:
        return rank, f"file name {path.name}", problem
    return 0, "assumed 0 (no distributedInfo.rank, no rank in the file name)", problem


def op_of(name: pl.Expr, roles: Roles | None = None) -> pl.Expr:
    """A short kernel label: ``void ns::kernel<…>(…)`` -> ``ns::kernel``; ``Memcpy HtoD (…)`` -> ``Memcpy HtoD``
    (the decorations removed are roles ``kineto_label_strip``)."""
    s = name
    for pattern in (roles or default_roles()).kineto_label_strip:
        s = s.str.replace_all(pattern, "")
    return (s.str.extract(r"^([^<(]+)", 1).str.strip_chars().fill_null(s)).alias("op")


def step_table(frame: pl.DataFrame, roles: Roles | None = None) -> pl.DataFrame:
    """One row per ProfilerStep annotation. One whose number does not fit an int64 has step null here: `load`
    drops and counts it."""
    roles = roles or default_roles()
    s = frame.filter(
        pl.col("cat").is_in(list(roles.kineto_step_cats))
        & pl.col("name").cast(pl.String).str.contains(roles.kineto_step)
    )
    return s.select(
        step_number(pl.col("name").cast(pl.String), roles.kineto_step).alias("step"),
        "event_idx",
        pl.col("name").cast(pl.String),
        pl.col("cat").cast(pl.String),
        pl.col("tid").cast(pl.String),
        pl.col("ts_us").alias("start_us"),
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
    ).sort("cat", "start_us")


def _in_span(points: pl.DataFrame, spans: pl.DataFrame, at: str) -> pl.DataFrame:
    """Step of each point (column ``at``) whose time falls in a [start, end) span; spans are disjoint steps."""
    if spans.is_empty():
        return points.with_columns(pl.lit(None, pl.Int64).alias("step"))
    sp = spans.select(pl.col("start_us").alias("_s0"), pl.col("end_us").alias("_s1"), "step").sort("_s0")
    p = points.with_row_index("_i").sort(at)
    frame = p.join_asof(sp, left_on=at, right_on="_s0", strategy="backward")
    frame = frame.with_columns(pl.when(pl.col(at) < pl.col("_s1")).then(pl.col("step")).alias("step"))
    return frame.sort("_i").drop("_i", "_s0", "_s1")


def _main_thread(cpu: pl.DataFrame, steps: pl.DataFrame, roles: Roles) -> str | None:
    cpu_steps = steps.filter(pl.col("cat") == roles.kineto_annotation_cat)
    if not cpu_steps.is_empty():
        return cpu_steps["tid"][0]
    if cpu.is_empty():
        return None
    busiest = cpu.group_by("tid").agg(pl.col("dur_us").sum()).sort("dur_us", descending=True)
    return str(busiest["tid"][0])


def _top_level(ops: pl.DataFrame) -> pl.DataFrame:
    """cpu_ops not nested in an earlier op of the same thread (their time is the thread's busy time)."""
    frame = ops.sort(["tid", "ts_us", "end_us"], descending=[False, False, True])
    frame = frame.with_columns(pl.col("end_us").cum_max().shift(1).over("tid").alias("_prev_end"))
    return frame.filter(pl.col("_prev_end").is_null() | (pl.col("ts_us") >= pl.col("_prev_end"))).drop("_prev_end")


def _without_waiting(ops: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """The main thread's ops less those that enclose a collective op without being one (e.g. an autograd node
    whose backward runs an all_to_all): where collectives wait for peers on the main thread's behalf, such an
    op's own time is mostly that wait, so its children stand for it — the wait is the collective's span, not
    work. The collective ops themselves stay."""
    comm = pl.col("name").str.contains(roles.kineto_comm_ops)
    starts = ops.filter(comm)["ts_us"].sort()
    if starts.is_empty():
        return ops
    inside = pl.lit(starts).search_sorted(pl.col("end_us"), side="left") - pl.lit(starts).search_sorted(
        pl.col("ts_us"), side="left"
    )
    return ops.filter(comm | (inside == 0))


def _enclosing_op(points: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """Name of the cpu_op on the launching thread that encloses each launch (``launch_tid``, ``launch_us``).

    Older Kineto traces carry no op ``External id`` on kernels, so the link is by time: the latest op starting
    before the launch if it still runs (the innermost), else the top-level op around it.
    """
    p = points.select(pl.col("launch_tid").alias("tid"), pl.col("launch_us")).with_row_index("_i")
    p = p.filter(pl.col("launch_us").is_not_null() & pl.col("tid").is_not_null()).sort("launch_us")
    o = ops.select("tid", "ts_us", "end_us", "name")
    out = p
    for label, table in (("_inner", o), ("_top", _top_level(o))):
        j = p.join_asof(
            table.sort("ts_us"),
            left_on="launch_us",
            right_on="ts_us",
            by="tid",
            strategy="backward",
            check_sortedness=False,
        )
        out = out.join(
            j.select("_i", pl.when(pl.col("end_us") >= pl.col("launch_us")).then(pl.col("name")).alias(label)),
            on="_i",
            how="left",
        )
    full = pl.DataFrame({"_i": pl.Series(range(points.height), dtype=pl.UInt32)})
    res = full.join(out.select("_i", pl.coalesce("_inner", "_top").alias("ctx")), on="_i", how="left").sort("_i")
    return res["ctx"]


def _device_events(trace: Trace, frame: pl.DataFrame, steps: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    dev = frame.filter(pl.col("cat").is_in(list(roles.kineto_device_cats)) & (pl.col("ph") == "X"))
    dev = trace.with_details(dev).with_columns(
        pl.col("cat").cast(pl.String),
        pl.col("name").cast(pl.String),
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
    )
    runtime = (
        frame.filter(pl.col("cat").is_in(list(roles.kineto_runtime_cats)) & pl.col("correlation").is_not_null())
        .select(
            "correlation",
            pl.col("ts_us").alias("launch_us"),
            pl.col("ext_id").alias("launch_ext"),
            pl.col("tid").cast(pl.String).alias("launch_tid"),
            pl.col("name").cast(pl.String).str.contains(roles.kineto_graph_launch).alias("graph"),
        )
        .unique("correlation", keep="first")
    )
    # a kernel replayed from a graph was launched by the graph launch, not by the op around it: it has no context
    # here (`profan.sources.trace.graph_replay` gives it the op that launched it at capture)
    dev = dev.join(runtime, on="correlation", how="left").with_columns(pl.col("graph").fill_null(False))
    dev = dev.with_columns(
        pl.when(~pl.col("graph")).then(pl.col("launch_ext")).alias("launch_ext"),
        pl.when(~pl.col("graph")).then(pl.col("launch_tid")).alias("launch_tid"),
    )
    ops = (
        frame.filter(pl.col("cat").is_in(list(roles.kineto_op_cats)) & pl.col("ext_id").is_not_null())
        .sort(pl.col("cat").cast(pl.String))  # cpu_op before user_annotation
        .select("ext_id", pl.col("name").cast(pl.String).alias("context"))
        .unique("ext_id", keep="first")
    )
    # a replayed kernel's own External id is the graph launch's op too (CUDA): not its context either
    link = pl.when(~pl.col("graph")).then(pl.coalesce("ext_id", "launch_ext"))
    dev = dev.with_columns(link.alias("link_ext")).join(
        ops, left_on="link_ext", right_on="ext_id", how="left", suffix="_op"
    )
    if dev["context"].null_count():
        cpu = frame.filter(pl.col("cat") == roles.kineto_cpu_op_cat).select(
            pl.col("tid").cast(pl.String),
            "ts_us",
            (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
            pl.col("name").cast(pl.String),
        )
        dev = dev.with_columns(pl.coalesce(pl.col("context"), _enclosing_op(dev, cpu)).alias("context"))
    dev = kineto_context.add_context(frame, dev, roles)  # fwd_context and module: more for the rules to match
    cpu_spans = steps.filter(pl.col("cat") == roles.kineto_annotation_cat)
    gpu_spans = steps.filter(pl.col("cat") == roles.kineto_gpu_annotation_cat)
    dev = _in_span(dev, cpu_spans, "launch_us").rename({"step": "_cpu_step"})
    dev = _in_span(dev, gpu_spans, "ts_us").rename({"step": "_gpu_step"})
    dev = dev.with_columns(
        pl.when(pl.col("launch_us").is_not_null() & (cpu_spans.height > 0))
        .then(pl.col("_cpu_step"))
        .otherwise(pl.col("_gpu_step"))
        .alias("step")
    )
    return dev.with_columns(
        op_of(pl.col("name"), roles), pl.lit("GPU").alias("core"), pl.col("cat").alias("type")
    ).drop("_cpu_step", "_gpu_step")


def _cpu_activity(ev: pl.DataFrame, steps: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """The work of a CPU-only trace: the main thread's top-level cpu_ops, and the collectives whose span includes
    waiting for peers (roles ``kineto_peer_wait_ops``: gloo runs them on a worker thread while the main thread
    blocks outside any op). Those spans are the rank's communication lane, as NCCL kernels are on a GPU."""

    def prepared(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(
            pl.col("cat").cast(pl.String),
            pl.col("name").cast(pl.String),
            pl.col("tid").cast(pl.String),
            (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
        )

    x = pl.col("ph") == "X"
    cpu = prepared(ev.filter((pl.col("cat") == roles.kineto_cpu_op_cat) & x))
    waits = prepared(
        ev.filter(
            x
            & (pl.col("cat") == roles.kineto_annotation_cat)
            & pl.col("name").cast(pl.String).str.contains(roles.kineto_peer_wait_ops)
        )
    )
    main = _main_thread(cpu, steps, roles)
    ops = cpu.filter(pl.col("tid") == main) if main is not None else cpu.clear()
    top = _top_level(_without_waiting(ops, roles) if waits.height else ops)
    both = pl.concat([top, waits.select(top.columns)]).sort("ts_us", "event_idx")
    both = _in_span(both, steps.filter(pl.col("cat") == roles.kineto_annotation_cat), "ts_us")
    # an op is its own launch: its forward op (for backward work), module and annotation are looked up from it
    both = both.with_columns(
        pl.col("ext_id").alias("link_ext"), pl.col("tid").alias("launch_tid"), pl.col("ts_us").alias("launch_us")
    )
    return kineto_context.add_context(ev, both, roles).with_columns(
        pl.col("name").alias("op"),
        pl.lit("CPU").alias("core"),
        pl.col("cat").alias("type"),
        pl.lit(None, pl.String).alias("context"),
    )


def _collectives(
    trace: Trace, ev: pl.DataFrame, dev: pl.DataFrame | None, steps: pl.DataFrame, roles: Roles
) -> pl.DataFrame:
    name = pl.col("name")
    frame = ev.filter(
        (pl.col("ph") == "X")
        & pl.col("cat").is_in(list(roles.kineto_op_cats))
        & name.cast(pl.String).str.contains(roles.kineto_comm_ops)
    )
    frame = trace.with_details(frame).with_columns(
        pl.col("cat").cast(pl.String),
        name.cast(pl.String),
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
        pl.when(pl.col("cat") == roles.kineto_cpu_op_cat)
        .then(pl.lit(SOURCE_CPU_OP))
        .otherwise(pl.lit(SOURCE_ANNOTATION))
        .alias("source"),
    )
    frame = _in_span(frame, steps.filter(pl.col("cat") == roles.kineto_annotation_cat), "ts_us")
    cols = [
        "event_idx",
        "source",
        "cat",
        "name",
        "tid",
        "stream",
        "step",
        "ts_us",
        "dur_us",
        "end_us",
        "coll_name",
        "in_nelems",
        "out_nelems",
        "dtype",
        "group_size",
        "pg_name",
        "pg_ranks",
    ]
    parts = [frame.with_columns(pl.col("tid").cast(pl.String)).select(cols)]
    if dev is not None:
        k = dev.filter(name.str.contains(roles.kineto_comm_kernels)).with_columns(pl.lit(SOURCE_KERNEL).alias("source"))
        parts.insert(0, k.with_columns(pl.col("tid").cast(pl.String)).select(cols))
    both = pl.concat(parts, how="vertical_relaxed")
    size = pl.col("dtype").replace_strict(roles.dtype_bytes, default=None, return_dtype=pl.Int64)
    # gloo collectives run on a worker thread; their span includes waiting for the slowest peer
    return both.with_columns(
        (pl.max_horizontal("in_nelems", "out_nelems") * size).alias("bytes"),
        pl.col("name").str.contains(roles.kineto_peer_wait_ops).alias("includes_peer_wait"),
    ).sort("ts_us")


def load(path: Path, trace: Trace | None = None, roles: Roles | None = None, iterations: bool = True) -> KinetoTrace:
    """Read one Kineto trace (or interpret an already parsed one). ``roles``: the rule pack's (the built-in ones
    when None); ``iterations`` False: no serving marker is looked for (the rank then has no iteration table)."""
    roles = roles or default_roles()
    tr = trace if trace is not None else parse_trace(path, roles)
    evidence, aliased = normalised(tr.events, roles)
    evidence, adopted = _uncategorised(tr, evidence, roles)
    marks, trains = kineto_iterations.marks(evidence) if iterations else (kineto_iterations.no_marks(), False)
    no_category, not_complete = _unread_device(evidence, roles)
    rank, origin, rank_problem = rank_of(tr.meta, tr.path, roles)
    steps = step_table(evidence, roles)
    bad_steps = steps["step"].null_count()
    steps = steps.filter(pl.col("step").is_not_null())
    dev = _device_events(tr, evidence, steps, roles)
    cpu_only = dev.is_empty()
    notes = [_aliases_note(aliased, roles)] if aliased else []
    if cpu_only:
        dev = _cpu_activity(evidence, steps, roles)
        notes += _cpu_only_notes(dev, tr, roles)
    # an event without a duration, or a duration that is not a number of 0 up to max_duration_us, cannot be
    # sized, and one without a start that can be placed in the capture (`placeable_start`) cannot be placed in
    # its step: left out and counted (the caller says how many), never summed as nothing, as a negative time or
    # as 1e300 µs, and never stretching a step window to 10^27 ms
    placed = placeable_start(evidence)
    usable = dev.filter(usable_duration() & placed)
    skipped, dev = dev.height - usable.height, usable
    info = tr.meta.get("distributedInfo") if isinstance(tr.meta.get("distributedInfo"), dict) else {}
    props = tr.meta.get("deviceProperties")
    dev_name = props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None
    return KinetoTrace(
        path=tr.path,
        rank=rank,
        rank_origin=origin,
        rank_problem=rank_problem,
        device=dev,
        steps=steps,
        collectives=_collectives(tr, evidence, None if cpu_only else dev, steps, roles),
        cpu_only=cpu_only,
        events_read=int(evidence.height),
        device_skipped=skipped,
        no_category=no_category,
        not_complete=not_complete,
        adopted=adopted,
        bad_args=tr.bad_args,
        bad_steps=bad_steps,
        not_utf8=tr.not_utf8,
        no_phase=tr.no_phase,
        world_size=_whole_number(info.get("world_size")) or None,
        device_name=dev_name if isinstance(dev_name, str) else None,
        notes=notes,
        loading=_loading(evidence, roles, placed),
        host=host_spans(evidence, roles, placed),
        annotations=annotation_spans(evidence, roles, placed),
        forwards=_forward_starts(evidence, roles, placed),
        marks=kineto_iterations.or_layer_marks(marks, trains or not iterations or not steps.is_empty(), dev, evidence),
        trains=trains,
    )


def _forward_starts(frame: pl.DataFrame, roles: Roles, placed: pl.Expr) -> pl.DataFrame:
    """The starts of the ops an RL generation counts its forwards by (rules/rl.toml forward_op)."""
    cat, name = pl.col("cat").cast(pl.String), pl.col("name").cast(pl.String)
    ops = frame.filter((cat == roles.kineto_cpu_op_cat) & (name == rl.rules().forward_op) & placed)
    return ops.select("event_idx", "ts_us")


def annotation_spans(frame: pl.DataFrame, roles: Roles, placed: pl.Expr) -> pl.DataFrame:
    """The host's ``record_function`` ranges but ProfilerStep's: what a framework marks its phases with (an RL
    step's generate_sequences, update_actor, …), each with its event index."""
    cat, name = pl.col("cat").cast(pl.String), pl.col("name").cast(pl.String)
    step = name.str.contains(roles.kineto_step)
    s = frame.filter((cat == roles.kineto_annotation_cat) & ~step & usable_duration() & placed)
    return s.select(
        "event_idx",
        name.alias("name"),
        pl.col("ts_us").alias("start_us"),
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
    )


def _cpu_only_notes(dev: pl.DataFrame, trace: Trace, roles: Roles) -> list[str]:
    """What a CPU-only reading of the trace analyses instead of device activity, and what it leaves unread."""
    waits = int((dev["cat"] != roles.kineto_cpu_op_cat).sum())
    note = "no GPU activity in the trace: the main thread's top-level cpu_ops are analysed instead" + (
        f", with {waits} collective spans of worker threads that include waiting for peers (an op that "
        "encloses a collective op counts by its children: its own time is that wait)"
        if waits
        else ""
    )
    return [note, *_unread_note(trace.meta.get(DROPPED) or {}, roles)]


def _uncategorised(trace: Trace, frame: pl.DataFrame, roles: Roles) -> tuple[pl.DataFrame, int]:
    """The events with their categories, those with none that carry a ``stream`` and a launch's ``correlation``
    id read as device activity, and how many were. Only device work has both (a launch call has no stream), so
    such an event is a kernel, or a copy or fill when its name says so (``Memcpy …``/``Memset …``: the device
    categories of roles ``kineto_category_aliases``). Left out, they would leave the device looking idle."""
    cand = frame.filter(pl.col("cat").is_null() & (pl.col("ph") == "X") & pl.col("correlation").is_not_null())
    if cand.is_empty():
        return frame, 0
    ids = trace.with_details(cand.select("event_idx")).filter(pl.col("stream").is_not_null())["event_idx"]
    if ids.is_empty():
        return frame, 0
    device = roles.kineto_device_cats
    by_word = {key: value for key, value in roles.kineto_category_aliases.items() if value in device}
    word = pl.col("name").cast(pl.String).str.extract(r"^(\w+)", 1)
    guess = word.replace_strict(by_word, default=device[0], return_dtype=pl.String).fill_null(device[0])
    cat = pl.when(pl.col("event_idx").is_in(ids.implode())).then(guess).otherwise(pl.col("cat").cast(pl.String))
    return frame.with_columns(cat.cast(pl.Categorical).alias("cat")), ids.len()


def _unread_device(frame: pl.DataFrame, roles: Roles) -> tuple[int, int]:
    """(events with a launch's correlation id but no category, device-looking events of phase B or E): what
    `device_like` kept that no reader takes, for the caller to count and say. A B/E pair is two events."""
    x = pl.col("ph") == "X"
    row = frame.filter(device_like(roles)).select(x.sum().alias("x"), (~x).sum().alias("not_x")).row(0)
    return int(row[0]), int(row[1])


def host_spans(frame: pl.DataFrame, roles: Roles, placed: pl.Expr | None = None) -> pl.DataFrame:
    """The host's spans of at least `HOST_SPAN_US`: CPU ops, annotations other than the steps' and Python frames
    (``kind`` op), runtime calls (``kind`` call). Inside an idle stretch of the device they say what the host
    was doing: preparing the input, or blocked in a copy or a synchronisation. ``placed``: which starts can be
    placed in the capture (`placeable_start` of ``ev`` when None)."""
    ts, cat, name = pl.col("ts_us"), pl.col("cat").cast(pl.String), pl.col("name").cast(pl.String)
    ops = [roles.kineto_cpu_op_cat, roles.kineto_annotation_cat, roles.kineto_python_cat]
    step = (cat == roles.kineto_annotation_cat) & name.str.contains(roles.kineto_step)
    s = frame.filter(
        cat.is_in([*ops, *roles.kineto_runtime_cats])
        & ~step
        & usable_duration()
        & (pl.col("dur_us") >= HOST_SPAN_US)
        & (placeable_start(frame) if placed is None else placed)
    )
    kind = pl.when(cat.is_in(list(roles.kineto_runtime_cats))).then(pl.lit("call")).otherwise(pl.lit("op"))
    return s.select(
        "event_idx",
        name.alias("name"),
        kind.alias("kind"),
        ts.alias("start_us"),
        (ts + pl.col("dur_us")).alias("end_us"),
    )


def _loading(frame: pl.DataFrame, roles: Roles, placed: pl.Expr) -> pl.DataFrame:
    """The host's data-loading spans (roles ``kineto_data_loading``, on a CPU op or annotation): what the device
    may wait for between steps. A span without a usable duration or start (``placed``: `placeable_start`) is left
    out (as device events are)."""
    ts = pl.col("ts_us")
    s = frame.filter(
        pl.col("cat").is_in([roles.kineto_cpu_op_cat, roles.kineto_annotation_cat])
        & name_matches(frame, roles.kineto_data_loading)
        & usable_duration()
        & placed
    )
    return s.select("event_idx", ts.alias("start_us"), (ts + pl.col("dur_us")).alias("end_us")).sort("start_us")


def _unread_note(dropped: dict[str, int], roles: Roles) -> list[str]:
    """Where a trace shows no device activity, the categories of complete events it holds that no reader reads
    (host-side ones aside: roles ``kineto_host_cats``): one of them may be an accelerator's activity under a name
    profan does not know, never analysed silently as CPU time."""
    dropped = {key: value for key, value in dropped.items() if key not in roles.kineto_host_cats}
    if not dropped:
        return []
    top = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{key or '(no category)'}: {value:,}" for key, value in top[:6]) + (
        ", …" if len(top) > 6 else ""
    )
    return [
        f"the trace also holds {sum(dropped.values()):,} complete events of categories profan does not read "
        f"({shown}); if one of them is the device's activity, map it to today's category in roles "
        "kineto_category_aliases (a rules file: 'theirs=kernel')"
    ]


def _aliases_note(aliased: dict[str, int], roles: Roles) -> str:
    read = ", ".join(f"{value:,} {key} as {roles.kineto_category_aliases[key]}" for key, value in aliased.items())
    return f"categories another writer gives these events, read as today's: {read} (roles kineto_category_aliases)"


def _whole_number(raw: object) -> int | None:
    """A header value that should be a whole number ≥ 0 (distributedInfo.rank, world_size), as a number or its
    text; None for anything else — a trace written by hand or by another tool may hold a list, a fraction, a
    sign, a bool or a number past int64 (every table keeps ranks as Int64) there."""
    if raw is None or isinstance(raw, bool):
        return None
    text = str(raw).strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 19 and int(text) < 2**63 else None
