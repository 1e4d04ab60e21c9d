"""Where a kernel was launched from, beyond its launching op: the forward op of a backward op, and the nn.Module.

A kernel's name rarely says which layer it serves: a GEMM is a QKV projection or an MLP matmul, a softmax is
attention or a classifier head. Its launching op (``context``, `kineto._device_events`) narrows that down; two
more links in a Kineto trace say the rest, and the bucket rules match them (``rules/buckets/gpu.toml``):

* ``fwd_context``: a backward kernel runs on an autograd thread, inside a backward node (``AddmmBackward0``…)
  whose ``Sequence number`` is the one its forward op recorded on the forward thread (``Fwd thread id`` > 0 marks
  the backward side). The forward op's name is the backward kernel's ``fwd_context``; its place in time is where
  the module is looked up, since the backward thread runs inside no module.
* ``module``: with ``with_modules`` / ``with_stack``, every ``nn.Module`` forward is a Python frame (roles
  ``kineto_python_cat``, ``kineto_module_frame``). The innermost module frame around the launch on its thread,
  with every enclosing one, is the ``module`` path (``Model/Layer/Attention/Linear``, instance numbers removed).
* ``annotation``: the same for the program's own ``record_function`` ranges (``moe_layer/expert_4``): how a
  model nobody wrote rules for names its parts.

Everything is joins on sorted times (`polars.DataFrame.join_asof`), bounded by the nesting depth of the modules,
never a loop over events.
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.roles import Roles

MAX_DEPTH = 64  # module nesting levels resolved; deeper frames keep their ancestors' path
_INSTANCE = r"_\d+$"  # the profiler numbers module instances (Linear_12): one path per layer kind, not per layer


def add_context(frame: pl.DataFrame, dev: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """``dev`` with ``fwd_context`` and ``module``. ``dev`` needs ``link_ext`` (the launching op's External id),
    ``launch_tid`` and ``launch_us`` (the launch call's thread and time), as `kineto._device_events` sets them."""
    ops = _cpu_ops(frame, roles)
    at = _launch_points(dev, ops)
    at = _forward_points(at, ops)
    at = _innermost(at, module_paths(frame, roles), "module")
    at = _innermost(at, annotation_paths(frame, roles), "annotation")
    return dev.with_columns(at["fwd_context"], at["module"], at["annotation"])


def _cpu_ops(frame: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    cols = set(frame.columns)
    seq = pl.col("seq") if "seq" in cols else pl.lit(None, pl.Int64)
    fwd = pl.col("fwd_tid") if "fwd_tid" in cols else pl.lit(None, pl.Int64)
    return frame.filter((pl.col("cat") == roles.kineto_cpu_op_cat) & (pl.col("ph") == "X")).select(
        "ext_id",
        pl.col("tid").cast(pl.String),
        "ts_us",
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
        pl.col("name").cast(pl.String),
        seq.alias("seq"),
        fwd.alias("fwd_tid"),
    )


def _launch_points(dev: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Per device event (in order): the launching op's thread and start, else the launch call's."""
    by_ext = ops.filter(pl.col("ext_id").is_not_null()).unique("ext_id", keep="first")
    d = dev.select("link_ext", "launch_tid", "launch_us").with_row_index("_i")
    d = d.join(
        by_ext.select(pl.col("ext_id").alias("link_ext"), pl.col("tid").alias("_otid"), pl.col("ts_us").alias("_ots")),
        on="link_ext",
        how="left",
    )
    return d.select(
        "_i",
        pl.coalesce("_otid", "launch_tid").alias("tid"),
        pl.coalesce("_ots", "launch_us").alias("at_us"),
    ).sort("_i")


def _enclosing(points: pl.DataFrame, spans: pl.DataFrame, keep: list[str]) -> pl.DataFrame:
    """For each point (``tid``, ``at_us``), the columns ``keep`` of the latest span starting at or before it on
    its thread, if that span still runs (null otherwise)."""
    p = points.filter(pl.col("tid").is_not_null() & pl.col("at_us").is_not_null()).sort("at_us")
    s = spans.select("tid", pl.col("ts_us").alias("_s0"), pl.col("end_us").alias("_s1"), *keep).sort("_s0")
    j = p.join_asof(s, left_on="at_us", right_on="_s0", by="tid", strategy="backward", check_sortedness=False)
    inside = pl.col("_s1") >= pl.col("at_us")
    return j.select("_i", *[pl.when(inside).then(pl.col(c)).alias(c) for c in keep])


def _forward_points(frame: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """``at`` with ``fwd_context`` (the forward op of the backward node around the launch) and the point where
    the module is looked up: the forward op's thread and start for backward work, the launch's otherwise.

    Sequence numbers count per forward thread; the forward ops are taken from the thread that records most of
    them (the training loop's). Of the forward ops sharing a number, the last to start is the one that made the
    node (the number moves on once it has)."""
    backward = ops.filter(pl.col("seq").is_not_null() & (pl.col("fwd_tid") > 0))
    forward = ops.filter(pl.col("seq").is_not_null() & (pl.col("fwd_tid").fill_null(0) == 0))
    empty = frame.with_columns(pl.lit(None, pl.String).alias("fwd_context"))
    if backward.is_empty() or forward.is_empty():
        return empty
    main = forward.group_by("tid").len().sort(["len", "tid"], descending=[True, False])["tid"][0]
    fwd = (
        forward.filter(pl.col("tid") == main)
        .sort("ts_us")
        .group_by("seq")
        .agg(pl.col("name").last().alias("fwd_context"), pl.col("ts_us").last().alias("_fts"))
        .with_columns(pl.lit(main).alias("_ftid"))
    )
    node = _enclosing(frame, backward, ["seq"]).join(fwd, on="seq", how="left")
    out = frame.join(node.select("_i", "fwd_context", "_ftid", "_fts"), on="_i", how="left").sort("_i")
    has = pl.col("_fts").is_not_null()
    return out.select(
        "_i",
        pl.when(has).then(pl.col("_ftid")).otherwise(pl.col("tid")).alias("tid"),
        pl.when(has).then(pl.col("_fts")).otherwise(pl.col("at_us")).alias("at_us"),
        "fwd_context",
    )


def module_paths(frame: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """The nn.Module frames with their full path (tid, ts_us, end_us, path), outermost module first."""
    frames = frame.filter((pl.col("cat") == roles.kineto_python_cat) & (pl.col("ph") == "X"))
    name = pl.col("name").cast(pl.String).str.extract(roles.kineto_module_frame, 1).str.replace(_INSTANCE, "")
    return span_paths(frames, name)


def annotation_paths(frame: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """The record_function ranges a program names its own parts with (``expert_4``, ``moe_layer``,
    ``## forward ##``) with their full path, outermost first; not the step markers, which every event is in."""
    name = pl.col("name").cast(pl.String)
    spans = frame.filter(
        (pl.col("cat") == roles.kineto_annotation_cat) & (pl.col("ph") == "X") & ~name.str.contains(roles.kineto_step)
    )
    return span_paths(spans, name)


def span_paths(frames: pl.DataFrame, name: pl.Expr) -> pl.DataFrame:
    """Nested spans named by ``name`` (null: not one) with their full path (tid, ts_us, end_us, path).

    Nesting is resolved level by level: the frames no other remaining frame contains are one level, disjoint on
    their thread, so each frame of the next level finds its parent by one as-of join on start time."""
    rest = (
        frames.select(
            pl.col("tid").cast(pl.String),
            "ts_us",
            (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
            name.alias("module"),
            "event_idx",
        )
        .filter(pl.col("module").is_not_null() & pl.col("ts_us").is_not_null() & pl.col("end_us").is_not_null())
        .sort(["tid", "ts_us", "end_us", "event_idx"], descending=[False, False, True, False])
    )
    levels: list[pl.DataFrame] = []
    parent: pl.DataFrame | None = None
    for _ in range(MAX_DEPTH):
        if rest.is_empty():
            break
        prev_end = pl.col("end_us").cum_max().shift(1).over("tid")
        rest = rest.with_columns((prev_end.is_null() | (pl.col("ts_us") >= prev_end)).alias("_top"))
        top = rest.filter("_top").drop("_top")
        rest = rest.filter(~pl.col("_top")).drop("_top")
        top = top.with_columns(pl.col("module").alias("path")) if parent is None else _under(top, parent)
        levels.append(top)
        parent = top
    if not levels:
        return pl.DataFrame(schema={"tid": pl.String, "ts_us": pl.Float64, "end_us": pl.Float64, "path": pl.String})
    return pl.concat(levels).select("tid", "ts_us", "end_us", "path")


def _under(top: pl.DataFrame, parent: pl.DataFrame) -> pl.DataFrame:
    """A level's frames with the path of the frame of the level above that holds them."""
    up = parent.select("tid", pl.col("ts_us").alias("_p0"), pl.col("path").alias("_pp")).sort("_p0")
    j = top.sort("ts_us").join_asof(
        up, left_on="ts_us", right_on="_p0", by="tid", strategy="backward", check_sortedness=False
    )
    path = pl.when(pl.col("_pp").is_not_null()).then(pl.col("_pp") + "/" + pl.col("module")).otherwise("module")
    return j.with_columns(path.alias("path")).drop("_p0", "_pp")


def _innermost(frame: pl.DataFrame, modules: pl.DataFrame, column: str) -> pl.DataFrame:
    """``at`` with ``column``: the path of the innermost of the nested spans ``modules`` (`span_paths`) around
    each point on its thread.

    The frames cut each thread's time into pieces with one innermost module each: a frame's start begins its
    own piece, its end resumes its parent's. One as-of join on those boundaries names every point's piece."""
    if modules.is_empty():
        return frame.with_columns(pl.lit(None, pl.String).alias(column))
    parent = pl.col("path").str.replace(r"/[^/]*$", "")
    resumed = pl.when(pl.col("path").str.contains("/")).then(parent)
    depth = pl.col("path").str.count_matches("/").cast(pl.Int32)
    # at one instant: ends before starts, an inner frame's end before its parent's, an outer start before its child's
    bounds = pl.concat(
        [
            modules.select(
                "tid", pl.col("ts_us").alias("_b"), pl.col("path").alias("_m"), pl.lit(1).alias("_o"), depth.alias("_d")
            ),
            modules.select(
                "tid", pl.col("end_us").alias("_b"), resumed.alias("_m"), pl.lit(0).alias("_o"), (-depth).alias("_d")
            ),
        ]
    ).sort(["_b", "_o", "_d"])
    p = frame.filter(pl.col("tid").is_not_null() & pl.col("at_us").is_not_null()).sort("at_us")
    j = p.join_asof(bounds, left_on="at_us", right_on="_b", by="tid", strategy="backward", check_sortedness=False)
    return frame.join(j.select("_i", pl.col("_m").alias(column)), on="_i", how="left").sort("_i")
