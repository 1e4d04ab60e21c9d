"""Memory events of a Kineto (PyTorch profiler) trace, and the ops and steps around them.

With ``profile_memory=True`` the profiler writes one instant event (``ph`` "i") per allocation and free, named as
the rule pack's ``memory-peak`` check says (``event_name``), with args ``Addr``, ``Bytes`` (negative for a free),
``Total Allocated``, ``Total Reserved`` (bytes, running totals of the device's allocator after the event),
``Device Type`` (c10 device type: 0 CPU, 1 CUDA, …) and ``Device Id`` (format reference kineto-traces.md §3).

Why a pass of its own over the trace's chunks (`trace_json.event_chunks`, the same bounded chunking): the main
parse keeps complete and metadata events only, and every field it declares costs every event parse time. Here each
chunk's elements are split on their line breaks into one Arrow binary column, a byte search keeps the memory
events and the CPU op / annotation spans (what names the op around an allocation and the step and phase of the
peak), and only those are parsed. Every row keeps ``event_idx``, its position in the event array: the evidence
locator. A trace without the event name anywhere is left after one byte search.
"""

from __future__ import annotations

import functools
import mmap
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.json as pa_json

from profan.model.errors import TOO_DEEP, ProfanInputError
from profan.sources.trace.chrome import _utf8_text
from profan.sources.trace.chunks import event_chunks, split_events, trace_text

MEMORY_ARGS = {
    "Addr": "addr",
    "Bytes": "bytes",
    "Total Allocated": "total_allocated",
    "Total Reserved": "total_reserved",
    "Device Type": "device_type",
    "Device Id": "device_id",
}
_ARROW = pa.schema(
    [
        ("ph", pa.string()),
        ("cat", pa.string()),
        ("name", pa.string()),
        ("tid", pa.int64()),
        ("ts", pa.float64()),
        ("dur", pa.float64()),
        ("args", pa.struct([(k, pa.int64()) for k in MEMORY_ARGS])),
    ]
)
_TEXT_SCHEMA = {
    **{k: pl.String for k in ("ph", "cat", "name", "tid", "ts", "dur")},
    "args": pl.Struct({k: pl.String for k in MEMORY_ARGS}),
}


@dataclass
class TraceMemory:
    """``events``: the memory events (event_idx, tid, ts_us, addr, bytes, total_allocated, total_reserved,
    device_type, device_id); ``spans``: CPU op and annotation spans (event_idx, cat, name, tid, start_us, end_us);
    ``meta``: the trace's top-level fields (deviceProperties …); ``skipped``: memory events without a time or a
    running total, left out."""

    events: pl.DataFrame
    spans: pl.DataFrame
    meta: dict
    skipped: int


def read(path: Path, event_name: str, span_cats: tuple[str, ...]) -> TraceMemory | None:
    """The memory events and spans of one trace; None when it holds no memory event at all."""
    try:
        buf = trace_text(path)  # a big file mapped, not copied: most traces hold no memory event
        marker = f'"{event_name}"'.encode()
        if buf.find(marker) < 0:
            return None
        arr, _layout, meta = split_events(path, buf)
        keys = [marker, *(f'"{span_cat}"'.encode() for span_cat in span_cats)]
        parts = []
        offset = 0
        for raws in event_chunks(path, arr, buf if isinstance(buf, mmap.mmap) else None):
            parts.append(_chunk(raws, offset, keys))
            offset += len(raws)
    except RecursionError:
        raise ProfanInputError(path, TOO_DEEP) from None
    except (ValueError, pl.exceptions.PolarsError) as exc:
        raise ProfanInputError(path, f"events are not JSON objects of the chrome-trace shape: {exc}") from None
    del arr, buf
    rows = pl.concat(parts, how="vertical_relaxed")
    is_mem = (pl.col("ph") == "i") & (pl.col("name") == event_name)
    mem = rows.filter(is_mem)
    usable = pl.col("ts_us").is_finite().fill_null(False) & pl.col("total_allocated").is_not_null()
    events = mem.filter(usable).select("event_idx", "tid", "ts_us", *[span_cat for span_cat in MEMORY_ARGS.values()])
    spans = rows.filter(~is_mem & (pl.col("ph") == "X") & pl.col("cat").is_in(list(span_cats))).select(
        "event_idx",
        "cat",
        "name",
        "tid",
        pl.col("ts_us").alias("start_us"),
        (pl.col("ts_us") + pl.col("dur_us")).alias("end_us"),
    )
    return TraceMemory(events, spans.filter(pl.col("end_us").is_finite()), meta, mem.height - events.height)


def _chunk(raws: list, offset: int, keys: list[bytes]) -> pl.DataFrame:
    """The chunk's elements that hold one of ``keys`` (byte search over the elements as one Arrow binary column),
    parsed, with their ``event_idx``."""
    text, raws, _bad = _utf8_text(raws)
    text += b"\n"
    block = pl.from_arrow(pa.Array.from_buffers(pa.uint8(), len(text), [None, pa.py_buffer(text)]))
    ends = (block == 10).arg_true().cast(pl.Int64) + 1
    offsets = pl.concat([pl.Series([0], dtype=pl.Int64), ends]).rechunk().to_arrow()
    lines = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, offsets.buffers()[1], pa.py_buffer(text)]
    )
    elements = pl.Series(lines)  # zero-copy; polars' byte search is several times pyarrow's here
    mask = functools.reduce(lambda a, b: a | b, [elements.bin.contains(key) for key in keys])
    picked = lines.filter(mask.to_arrow())
    idx = pl.int_range(len(lines), eager=True, dtype=pl.Int64).filter(mask) + offset
    if len(picked) == 0:
        return _typed(pl.DataFrame(schema=_TEXT_SCHEMA), pl.Series(dtype=pl.Int64))
    _, offs, data = picked.buffers()
    bounds = pa.Array.from_buffers(pa.int64(), len(picked) + 1, [None, offs], offset=picked.offset)
    body = data.to_pybytes()[bounds[0].as_py() : bounds[-1].as_py()]
    return _typed(_parse(body.rstrip(b"\n")), idx.cast(pl.Int64))


def _parse(text: bytes) -> pl.DataFrame:
    """pyarrow's reader with the usual types; polars with every field as text where a value does not fit."""
    try:
        table = pa_json.read_json(
            pa.py_buffer(text),
            parse_options=pa_json.ParseOptions(explicit_schema=_ARROW, unexpected_field_behavior="ignore"),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(text) + 1)),
        )
        if table.num_rows == text.count(b"\n") + 1:
            return pl.from_arrow(table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return pl.read_ndjson(text, schema=_TEXT_SCHEMA)


def _typed(frame: pl.DataFrame, idx: pl.Series) -> pl.DataFrame:
    args = (
        frame.get_column("args").struct.unnest()
        if frame.height
        else pl.DataFrame(schema=dict.fromkeys(MEMORY_ARGS, pl.String))
    )
    return (
        pl.DataFrame({"event_idx": idx})
        .hstack(
            frame.select(
                *(pl.col(c).cast(pl.String) for c in ("ph", "cat", "name")),
                pl.col("tid").cast(pl.String),
                pl.col("ts").cast(pl.Float64, strict=False).alias("ts_us"),
                pl.col("dur").cast(pl.Float64, strict=False).alias("dur_us"),
            )
        )
        .hstack(
            args.select(pl.col(key).cast(pl.Int64, strict=False).alias(value) for key, value in MEMORY_ARGS.items())
        )
    )


MB = float(1 << 20)


def device_events(tm: TraceMemory, names: dict[str, str]) -> tuple[pl.DataFrame, str]:
    """The memory events of the device profan analyses, and its label: an accelerator's when the trace has any
    (the one with the highest allocated total), else the CPU's. ``names``: c10 device type number -> name (rules)."""
    evidence = tm.events
    totals = (
        evidence.group_by("device_type", "device_id")
        .agg(pl.col("total_allocated").max().alias("top"))
        .sort([pl.col("device_type") == 0, "top"], descending=[False, True])
    )
    kind, dev_id, _top = totals.row(0)
    label = names.get(str(kind), f"device type {kind}")
    label = label if kind == 0 or dev_id is None or dev_id < 0 else f"{label}:{dev_id}"
    return evidence.filter((pl.col("device_type") == kind) & (pl.col("device_id") == dev_id)), label


def points(frame: pl.DataFrame) -> pl.DataFrame:
    """The running totals as a curve. Reserved is null when the allocator never reports any (the CPU's)."""
    reserved = pl.col("total_reserved") / MB
    has_reserved = bool((frame["total_reserved"].fill_null(0) > 0).any())
    return frame.select(
        pl.col("ts_us"),
        (pl.col("total_allocated") / MB).alias("allocated_mb"),
        (reserved if has_reserved else pl.lit(None, pl.Float64)).alias("reserved_mb"),
        pl.col("event_idx").alias("loc"),
    )


def allocations(frame: pl.DataFrame, spans: pl.DataFrame, op_cat: str) -> pl.DataFrame:
    """One row per allocation (``Bytes`` > 0): freed when the next event at the same ``Addr`` is a free; named by
    the innermost op of its thread around it (`enclosing`)."""
    paired = frame.sort("addr", "ts_us", "event_idx").with_columns(
        pl.col("bytes").shift(-1).over("addr").alias("_next_bytes"),
        pl.col("ts_us").shift(-1).over("addr").alias("_next_ts"),
    )
    allocs = paired.filter(pl.col("bytes") > 0).select(
        "tid",
        (pl.col("bytes") / MB).alias("size_mb"),
        pl.col("ts_us").alias("alloc_us"),
        pl.when(pl.col("_next_bytes") < 0).then(pl.col("_next_ts")).alias("release_us"),
        pl.col("event_idx").alias("loc"),
    )
    ops = spans.filter(pl.col("cat") == op_cat)
    named = enclosing(allocs.select("tid", pl.col("alloc_us").alias("ts_us"), "loc"), ops)
    return allocs.join(named.select("loc", "name"), on="loc", how="left").select(
        pl.col("name").fill_null(""), "size_mb", "alloc_us", "release_us", "loc"
    )


def enclosing(points_: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Per point (tid, ts_us): the op of its thread around it — the latest to start before it if it still runs
    (the innermost), else the top-level op around it — with that op's event index (``op_loc``)."""
    o = ops.select("tid", "start_us", "end_us", "name", pl.col("event_idx").alias("op_loc")).sort("start_us")
    top = o.sort(["tid", "start_us", "end_us"], descending=[False, False, True]).with_columns(
        pl.col("end_us").cum_max().shift(1).over("tid").alias("_prev")
    )
    top = top.filter(pl.col("_prev").is_null() | (pl.col("start_us") >= pl.col("_prev"))).drop("_prev")
    p = points_.sort("ts_us")
    out = p
    for label, table in (("_in", o), ("_top", top.sort("start_us"))):
        j = p.join_asof(
            table, left_on="ts_us", right_on="start_us", by="tid", strategy="backward", check_sortedness=False
        )
        inside = pl.col("end_us") >= pl.col("ts_us")
        out = out.join(
            j.select(
                "loc", pl.when(inside).then("name").alias(label), pl.when(inside).then("op_loc").alias(label + "_loc")
            ),
            on="loc",
            how="left",
        )
    return out.select(
        "loc",
        pl.coalesce("_in", "_top").alias("name"),
        pl.when(pl.col("_in").is_not_null()).then("_in_loc").otherwise("_top_loc").alias("op_loc"),
    )


def step_at(spans: pl.DataFrame, t: float, step_pattern: str, annotation_cat: str) -> tuple[int | None, int | None]:
    """(step number, its annotation's event index) of the ProfilerStep span around ``t``."""
    steps = spans.filter(
        (pl.col("cat") == annotation_cat)
        & pl.col("name").str.contains(step_pattern)
        & (pl.col("start_us") <= t)
        & (pl.col("end_us") >= t)
    )
    if steps.is_empty():
        return None, None
    row = steps.sort("start_us").row(-1, named=True)
    n = pl.Series([row["name"]]).str.extract(step_pattern, 1).cast(pl.Int64, strict=False)[0]
    return n, row["event_idx"]


def phase_at(spans: pl.DataFrame, tid: str | None, t: float, phases: dict[str, str]) -> tuple[str | None, int | None]:
    """(phase, the event index of the span that says it) at ``t`` on thread ``tid``: the first phase of
    ``phases`` (name -> pattern, rule pack order) whose pattern an op or annotation around that moment matches."""
    around = spans.filter((pl.col("tid") == tid) & (pl.col("start_us") <= t) & (pl.col("end_us") >= t))
    for phase, pattern in phases.items():
        hit = around.filter(pl.col("name").str.contains(pattern)).sort("start_us")
        if not hit.is_empty():
            return phase, hit["event_idx"][-1]
    return None, None


def capacity_mb(meta: dict, device_id: int | None) -> float | None:
    """The device's memory from the trace's ``deviceProperties`` (``totalGlobalMem``, bytes), where recorded."""
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return None
    for prop in props:
        if isinstance(prop, dict) and prop.get("id") == device_id:
            total = prop.get("totalGlobalMem")
            if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
                return total / MB
    return None
