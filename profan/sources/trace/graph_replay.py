"""Kernels replayed from a CUDA / HIP graph, given the op and module that launched them when the graph was captured.

A graph replay is one runtime call (``cudaGraphLaunch`` / ``hipGraphLaunch``, roles ``kineto_graph_launch``) whose
correlation id every kernel of the graph carries: no CPU op launches each kernel, so a bucket rule that looks at
the launching op (``context``) sees none. The trace recorded while the graph was captured (SGLang and TraceLens
keep it in ``capture_traces/`` beside the replay trace) has what the replay lacks: between the capture's begin
and end calls (roles ``kineto_graph_capture``) each launch call that adds a node (roles
``kineto_graph_node_calls``) runs inside its CPU op and Python module, in the graph's order.

Mapping: a replay's kernels and a captured graph are paired when they have as many nodes; the n-th kernel of a
given name in the replay is the n-th launch of that name in the capture (the order within the graph and the name;
ROCm names the kernel on its launch call, ``args.kernel``). Where the capture does not name its kernels (CUDA's
launch calls carry no name), the position in the graph alone pairs them, and only when one captured graph has
the replay's node count. Every replayed kernel that no capture node pairs with keeps no context, and the report
counts them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.rulepack.roles import Roles
from profan.sources.trace.chrome import parse
from profan.sources.trace.kineto import KinetoTrace, normalised

NODE_COLUMNS = ["graph", "node", "launched", "occurrence", "nodes", "context", "module", "capture_event"]
_NODE_SCHEMA = {
    "graph": pl.UInt32,
    "node": pl.Int64,
    "launched": pl.String,
    "occurrence": pl.Int64,
    "nodes": pl.UInt32,
    "context": pl.String,
    "module": pl.String,
    "capture_event": pl.Int64,
}


def _keep(roles: Roles) -> pl.Expr:
    return (pl.col("ph") == "X") & pl.col("cat").is_in([*roles.kineto_keep_cats, roles.kineto_python_cat])


def _detail(roles: Roles) -> tuple[str, ...]:
    """Runtime categories (under every name): their launch calls name the kernel they launch on ROCm."""
    runtime = set(roles.kineto_runtime_cats)
    return (*runtime, *[key for key, value in roles.kineto_category_aliases.items() if value in runtime])


def capture_nodes(path: Path, roles: Roles) -> pl.DataFrame:
    """One row per graph node captured in the trace at ``path`` (`NODE_COLUMNS`): its graph (the capture's
    position in the file), position, kernel name (null where the launch does not name it), occurrence of that name
    in the graph, the graph's node count, the CPU op and module around the launch, and the launch's event index."""
    from profan.sources.common.cache import cached_parse

    cats = sorted({*roles.kineto_keep_cats, roles.kineto_python_cat})
    variant = f"graph_capture/1/keep={','.join(cats)}/detail={','.join(sorted(_detail(roles)))}"
    trace, _ = cached_parse(path, variant, lambda p: parse(p, keep=_keep(roles), detail=_detail(roles)))
    frame, _ = normalised(trace.events, roles)
    frame = frame.with_columns(
        pl.col("name").cast(pl.String), pl.col("tid").cast(pl.String), pl.col("cat").cast(pl.String)
    )
    runtime = frame.filter(pl.col("cat").is_in(list(roles.kineto_runtime_cats)))
    nodes = _in_captures(runtime, roles)
    if nodes.is_empty():
        return pl.DataFrame(schema=_NODE_SCHEMA)
    nodes = trace.with_details(nodes).select(
        "graph", "event_idx", "tid", "ts_us", "ext_id", pl.col("launch_kernel").alias("launched")
    )
    nodes = nodes.sort("graph", "ts_us", "event_idx").with_columns(
        pl.int_range(pl.len()).over("graph").alias("node"),
        pl.int_range(pl.len()).over("graph", "launched").alias("occurrence"),
        pl.len().over("graph").alias("nodes"),
    )
    ops = frame.filter(pl.col("cat") == roles.kineto_cpu_op_cat)
    frames = frame.filter(pl.col("cat") == roles.kineto_python_cat).filter(
        pl.col("name").str.contains(roles.kineto_module_frame)
    )
    by_ext = ops.filter(pl.col("ext_id").is_not_null()).unique("ext_id", keep="first")
    nodes = nodes.join(by_ext.select("ext_id", pl.col("name").alias("_op")), on="ext_id", how="left")
    nodes = nodes.with_columns(
        pl.coalesce("_op", _innermost(nodes, ops)).alias("context"),
        _innermost(nodes, frames).str.extract(roles.kineto_module_frame, 1).alias("module"),
    )
    nodes = nodes.rename({"event_idx": "capture_event"})
    return nodes.select(pl.col(key).cast(value) for key, value in _NODE_SCHEMA.items())


def _in_captures(runtime: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """The runtime calls that add a node to a graph: node calls on the capturing thread between a capture's
    begin and its end, with ``graph`` = the capture's index in the file."""
    begin, end = roles.kineto_graph_capture
    name = pl.col("name")
    opens = runtime.filter(name.str.contains(begin)).sort("ts_us").with_row_index("graph")
    closes = runtime.filter(name.str.contains(end)).select("tid", pl.col("ts_us").alias("_end")).sort("_end")
    if opens.is_empty() or closes.is_empty():
        return runtime.clear().with_columns(pl.lit(None, pl.UInt32).alias("graph"))
    spans = opens.select("graph", "tid", pl.col("ts_us").alias("_begin")).join_asof(
        closes, left_on="_begin", right_on="_end", by="tid", strategy="forward", check_sortedness=False
    )
    calls = runtime.filter(name.str.contains(roles.kineto_graph_node_calls)).sort("ts_us")
    j = calls.join_asof(
        spans.drop_nulls("_end").sort("_begin"),
        left_on="ts_us",
        right_on="_begin",
        by="tid",
        strategy="backward",
        check_sortedness=False,
    )
    return j.filter(pl.col("_end").is_not_null() & (pl.col("ts_us") <= pl.col("_end"))).drop("_begin", "_end")


def _innermost(points: pl.DataFrame, spans: pl.DataFrame) -> pl.Series:
    """Name of the latest-starting span of the same thread that holds each point (``tid``, ``ts_us``): the
    innermost op or frame around a launch; null where none does."""
    p = points.select("tid", "ts_us").with_row_index("_i")
    frame = spans.select(
        pl.col("tid").alias("_tid"),
        pl.col("ts_us").alias("_s0"),
        (pl.col("ts_us") + pl.col("dur_us")).alias("_s1"),
        pl.col("name").alias("_name"),
    )
    # only the spans around the capture's launches (an inequality join: few pairs per launch)
    frame = frame.filter(
        (pl.col("_s1") >= p["ts_us"].min())
        & (pl.col("_s0") <= p["ts_us"].max())
        & pl.col("_tid").is_in(p["tid"].unique().implode())
    )
    j = p.join_where(
        frame, pl.col("tid") == pl.col("_tid"), pl.col("_s0") <= pl.col("ts_us"), pl.col("_s1") >= pl.col("ts_us")
    )
    best = j.sort("_s0").group_by("_i").agg(pl.col("_name").last())
    return p.join(best, on="_i", how="left").sort("_i")["_name"]


def _replayed(device: pl.DataFrame) -> pl.DataFrame:
    """The graph-replayed device events, numbered within their launch (position, and occurrence of their name)."""
    r = device.filter(pl.col("graph")).select("event_idx", "correlation", "name", "ts_us").sort("ts_us", "event_idx")
    return r.with_columns(
        pl.int_range(pl.len()).over("correlation").alias("node"),
        pl.int_range(pl.len()).over("correlation", "name").alias("occurrence"),
        pl.len().over("correlation").alias("nodes"),
    )


def pair(replayed: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """(event_idx, context, module, capture_event) of each replayed kernel a capture node pairs with.

    For each replay (correlation id), the captured graph of the same node count that shares the most (name,
    occurrence) pairs with it; where captures name no kernel, the one graph of that node count, by position."""
    named = nodes.filter(pl.col("launched").is_not_null())
    by_name = replayed.join(
        named, left_on=["nodes", "name", "occurrence"], right_on=["nodes", "launched", "occurrence"], suffix="_cap"
    )
    best = (
        by_name.group_by("correlation", "graph")
        .agg(pl.len().alias("_hits"))
        .sort(["_hits", "graph"], descending=[True, False])
        .unique("correlation", keep="first")
    )
    out = by_name.join(best.select("correlation", "graph"), on=["correlation", "graph"])
    unnamed = nodes.filter(pl.col("launched").is_null())
    single = unnamed.group_by("nodes").agg(pl.col("graph").n_unique().alias("_g")).filter(pl.col("_g") == 1)
    left = replayed.join(out.select("correlation"), on="correlation", how="anti")
    by_pos = left.join(unnamed.join(single.select("nodes"), on="nodes"), on=["nodes", "node"], suffix="_cap")
    cols = ["event_idx", "context", "module", "capture_event"]
    return pl.concat([out.select(cols), by_pos.select(cols)])


def apply(
    kt: KinetoTrace, captures: list[Path], roles: Roles, problems: list[tuple[int, str]] | None = None
) -> tuple[int, int]:
    """Fill ``context`` (and ``module``) of the trace's graph-replayed kernels from the capture traces; (replayed
    kernels, those paired with a capture node). A capture that cannot be read adds (its position, what is wrong) to
    ``problems`` (or raises, without that list) and pairs nothing: the replay is analysed all the same."""
    replayed = _replayed(kt.device)
    if replayed.is_empty():
        return 0, 0
    parts = [pl.DataFrame(schema=_NODE_SCHEMA).with_columns(pl.lit(-1).alias("_file"))]
    for index, path in enumerate(captures):
        try:
            parts.append(capture_nodes(path, roles).with_columns(pl.lit(index).alias("_file")))
        except ProfanInputError as exc:
            if problems is None:
                raise
            problems.append((index, exc.problem))
    nodes = pl.concat(parts).with_columns(pl.format("{}:{}", "_file", "graph").alias("graph")).drop("_file")
    paired = pair(replayed, nodes).rename({"context": "_ctx", "module": "_mod"}).drop("capture_event")
    dev = kt.device
    if "module" not in dev.columns:
        dev = dev.with_columns(pl.lit(None, pl.String).alias("module"))
    dev = dev.join(paired, on="event_idx", how="left")
    kt.device = dev.with_columns(
        pl.coalesce("_ctx", "context").alias("context"), pl.coalesce("_mod", "module").alias("module")
    ).drop("_ctx", "_mod")
    return replayed.height, paired.height


def fill(rd, kt: KinetoTrace, captures: list[Path], roles: Roles) -> None:
    """Map the rank's replayed kernels onto its capture traces (`apply`) and say so: ``rd.info["graph_replay"]``
    holds the counts, the trace notes say them, and replayed kernels left without an op are a warning."""
    shown = [value for key, value in rd.files.items() if key.startswith("graph_capture")]
    problems: list[tuple[int, str]] = []
    replayed, mapped = apply(kt, captures, roles, problems) if captures else (int(kt.device["graph"].sum()), 0)
    rd.warnings += [f"{shown[i]}: {problem}; this graph capture is not used" for i, problem in problems]
    if not replayed:
        if captures:
            kt.notes.append(
                f"graph-capture traces {', '.join(shown)} not used: no kernel of the trace is replayed from a graph"
            )
        return
    rd.info["graph_replay"] = {"replayed": replayed, "mapped": mapped, "captures": shown}
    if captures:
        kt.notes.append(
            f"{replayed:,} kernels replayed from CUDA/HIP graphs: {mapped:,} took their launching op and module "
            f"from the graph capture ({', '.join(shown)}), {replayed - mapped:,} did not"
        )
    if replayed > mapped:
        where = "no captured graph has their node count and kernel names" if captures else "no capture trace"
        rd.warnings.append(
            f"{rd.files['kineto_trace']}: {replayed - mapped:,} of {replayed:,} kernels replayed from CUDA/HIP "
            f"graphs have no launching op ({where}; roles graph_capture_folder names the folder of capture "
            "traces beside the trace); bucket rules that look at the op do not apply to them"
        )
