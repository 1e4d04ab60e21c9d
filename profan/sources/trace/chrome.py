"""One reader for chrome-trace JSON: PyTorch/Kineto ``{"traceEvents": [...]}`` and Ascend ``trace_view.json``.

Why this shape: the stdlib ``json`` + one Python dict per event costs ~1 KB and several µs per event, which does
not scale to GB traces. Here `profan.sources.trace.chunks` gets the file's text (bounded, flattened or mapped) and
cuts its event array into chunks of raw byte spans, without a Python object per event; each chunk becomes
newline-delimited JSON that pyarrow (or polars) parses, keeping only the fields profan uses. Only a few chunks are
alive at a time, so a big trace's peak memory is its event table plus those chunks, not the file
(``bench/bench_trace.py``). Every event keeps ``event_idx``, its position in the event array — the evidence
locator.

Tolerated variants (format reference kineto-traces.md §3, ascend-formats.md §3): compact or pretty-printed JSON,
``.json.gz``, ``ts`` as string/int/float, ``pid``/``tid`` as int or string, unsorted events, integers beyond int64
in fields profan does not read (they are skipped unparsed), missing ``distributedInfo``/``deviceProperties``,
event text that is not UTF-8 (read as U+FFFD, counted), an event whose ``args`` is a string or a list (read as
having none, counted). A ``.gz`` inflates only within ``max_inflated_bytes`` and ``max_inflate_ratio``
(`profan.rulepack.limits`), whatever its trailer claims.
"""

from __future__ import annotations

import json
import mmap
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa
import pyarrow.json as pa_json

from profan.model.errors import TOO_DEEP, ProfanInputError
from profan.rulepack import limits
from profan.rulepack.roles import defaults as default_roles
from profan.sources.trace.chunks import event_chunks, split_events, trace_text

WORKERS = 3  # chunks in flight (each reader call is single-threaded; the main thread splits the next chunk)

# event args profan reads: JSON key -> column name. Everything else in args is skipped unparsed.
ARGS: dict[str, str] = {
    "name": "arg_name",  # M events: process_name / thread_name value
    "External id": "ext_id",
    "correlation": "correlation",
    "stream": "stream",
    "device": "device",
    "Collective name": "coll_name",
    "In msg nelems": "in_nelems",
    "Out msg nelems": "out_nelems",
    "Group size": "group_size",
    "dtype": "dtype",
    "Process Group Name": "pg_name",
    "Process Group Description": "pg_desc",
    "Process Group Ranks": "pg_ranks",
    "bytes": "bytes",
    "kernel": "launch_kernel",  # ROCm launch calls: the kernel they launch (names a graph node under capture)
    # Ascend trace_view.json (HCCL lanes, hardware tasks)
    "Task Type": "task_type",
    "transport type": "transport_type",
    "link type": "link_type",
    "size(Byte)": "size_bytes",
    "bandwidth(GB/s)": "bandwidth_gbps",
    "src rank": "src_rank",
    "dst rank": "dst_rank",
    "data_type": "data_type",
    "alg_type": "alg_type",
    "count": "count",
    "task type": "hccl_task_type",
}
INT_ARGS = (
    "ext_id",
    "correlation",
    "stream",
    "device",
    "in_nelems",
    "out_nelems",
    "group_size",
    "bytes",
    "src_rank",
    "dst_rank",
)
FLOAT_ARGS = ("size_bytes", "bandwidth_gbps")

# Pass 1 reads every event's core fields; pass 2 reads the full ``ARGS`` only for the few events that carry them
# (device activity, metadata, communication ops, Ascend device lanes) — declared fields cost parse time.
_CORE_ARGS = {
    "name": "arg_name",
    "External id": "ext_id",
    "correlation": "correlation",
    # cpu_ops of autograd: a backward op's Sequence number is its forward op's, Fwd thread id > 0 marks it backward
    "Sequence number": "seq",
    "Fwd thread id": "fwd_tid",
}
# the 2020-21 PyTorch profiler spelled the External id of device and runtime events so: read into ext_id too
_OLD_EXT = "external id"
_CORE_SCHEMA = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.String,
    "dur": pl.String,
    "args": pl.Struct({k: pl.String for k in (*_CORE_ARGS, _OLD_EXT)}),
}
_ASCEND_ARGS = (
    "Task Type",
    "transport type",
    "link type",
    "size(Byte)",
    "bandwidth(GB/s)",
    "src rank",
    "dst rank",
    "data_type",
    "alg_type",
    "count",
    "task type",
)
# a Kineto document never carries the Ascend lane args and a bare Ascend array never the Kineto ones: each layout
# declares only its own (every declared field costs parse time)
_DETAIL_SCHEMA = {
    layout: {
        "args": pl.Struct(
            {k: pl.String for k in ARGS if k not in _CORE_ARGS and (k in _ASCEND_ARGS) == (layout == "array")}
        )
    }
    for layout in ("object", "array")
}
# An Ascend trace_view.json (a bare array read without device categories) needs of the args only the metadata
# events' names, and metadata events are detail rows anyway: its core pass reads no args at all (its "Call stack"
# strings are a quarter of the text) and takes ``arg_name`` from the detail pass (`_lean_names`).
_DETAIL_SCHEMA["lean"] = {"args": pl.Struct({**_DETAIL_SCHEMA["array"]["args"].to_schema(), "name": pl.String})}
_LEAN_CORE_SCHEMA = {k: v for k, v in _CORE_SCHEMA.items() if k != "args"}

NOT_UTF8 = "profan:not_utf8"  # `Trace.meta` key of the invalid UTF-8 count (meta holds no field of that name)
BAD_ARGS = "profan:bad_args"  # `Trace.meta` key: events whose ``args`` is no JSON object, read as having none
DROPPED = "profan:dropped_cats"  # `Trace.meta` key: complete events the row filter left out, per category
CORE_COLUMNS = ["event_idx", "ph", "cat", "name", "pid", "tid", "ts_us", "dur_us", *_CORE_ARGS.values()]


def needs_detail(cats: tuple[str, ...] | None = None) -> pl.Expr:
    """Events whose full args profan reads: device activity (``cats``: the caller's categories of it, by default
    roles ``kineto_device_cats`` and ``kineto_gpu_annotation_cat``), metadata, communication (roles
    ``kineto_comm_ops``, ``kineto_comm_kernels``), and uncategorised device-lane events (Ascend trace_view: hardware
    tasks, HCCL ops and planes)."""
    roles = default_roles()
    cats = (*roles.kineto_device_cats, roles.kineto_gpu_annotation_cat) if cats is None else cats
    name = pl.col("name").cast(pl.String)
    return (
        pl.col("cat").is_in(list(cats))
        | (pl.col("ph") == "M")
        | name.str.contains(roles.kineto_comm_ops)
        | name.str.contains(roles.kineto_comm_kernels)
        | (pl.col("cat").is_null() & (pl.col("ph") == "X"))
    )


def default_keep() -> pl.Expr:
    """Rows kept by default: complete and metadata events (flows, instants and counters are not used)."""
    return pl.col("ph").is_in(["X", "M"])


@dataclass
class Trace:
    """A parsed trace: the event table, the full args of the events that carry them, and the top-level fields
    next to ``traceEvents`` (Kineto only).

    ``events`` has one row per kept event (``CORE_COLUMNS``); ``details`` has ``event_idx`` plus the remaining
    ``ARGS`` columns for the events ``needs_detail`` selects. Keeping them apart avoids widening millions of CPU
    rows with columns only device and communication events use; ``with_details`` joins them for a subset.
    """

    path: Path
    events: pl.DataFrame
    details: pl.DataFrame
    layout: str  # "object" ({"traceEvents": …}) | "array" (bare array, Ascend trace_view.json)
    meta: dict[str, Any] = field(default_factory=dict)  # distributedInfo, deviceProperties, schemaVersion, …
    no_phase: int = 0  # elements of the event array without a "ph" field: no chrome-trace event, left out

    @property
    def not_utf8(self) -> int:
        """Invalid UTF-8 sequences in the event text, read as U+FFFD (`_utf8_text`). Kept in ``meta``, under a
        key no trace has, so a cached parse (`profan.sources.common.cache`, which stores ``meta``) still says it."""
        return int(self.meta.get(NOT_UTF8, 0))

    @property
    def bad_args(self) -> int:
        """Events whose ``args`` is a string, a number or a list, not an object: read as having no args
        (`_args_as_text`), counted in ``meta`` like `not_utf8`. Only args that are read count: a lean parse (an
        Ascend trace_view.json) never parses the host events' args, so an odd one there is neither read nor
        counted."""
        return int(self.meta.get(BAD_ARGS, 0))

    def with_details(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.join(self.details, on="event_idx", how="left")


def _chunk_tables(
    raws: list[msgspec.Raw], offset: int, keep: pl.Expr, layout: str, detail: tuple[str, ...] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame | None, int, int, dict[str, int], int]:
    """(kept core rows, details of the rows that need them, events without a phase, invalid UTF-8 sequences read
    as U+FFFD, complete events left out by ``keep`` per category, events whose args is no object) of one chunk;
    polars releases the GIL here. A ``null`` element is read as one without a phase (counted and said, as any
    element that is no event), not as an error."""
    text, raws, not_utf8 = _utf8_text(raws)
    if text.startswith(b"null") or b"\nnull" in text:  # rare: the loop over elements runs only then
        raws = [_EMPTY if bytes(raw) == b"null" else raw for raw in raws]
        text = b"\n".join(raws)
    lean = layout == "array" and detail is None
    core, bad_args = _read_core(text, "lean" if lean else layout)
    core = _core(core, offset)
    no_phase = core["ph"].null_count()
    left = core.filter((pl.col("ph") == "X") & ~keep).group_by(pl.col("cat").cast(pl.String).fill_null("")).len()
    dropped = dict(left.iter_rows())
    core = core.filter(keep)
    want = core.filter(needs_detail(detail))["event_idx"]
    if not want.len():
        return core, None, no_phase, not_utf8, dropped, bad_args
    sub = b"\n".join([raws[i] for i in (want - offset).to_list()])
    # a caller naming its device categories reads Kineto events, also from a bare array (2020-21 profiler)
    det, det_bad = _read_detail(sub, "lean" if lean else "object" if detail is not None else layout)
    if lean:  # a lean core reads no args: the detail pass is the only one that sees them
        core, bad_args = _lean_names(core, det, want), det_bad
    return core, _details(det, want), no_phase, not_utf8, dropped, bad_args


def _lean_names(core: pl.DataFrame, det: pl.DataFrame, want: pl.Series) -> pl.DataFrame:
    """``arg_name`` of a lean core (`_LEAN_CORE_SCHEMA`) from its detail rows: the metadata events' process and
    thread names, and the name argument of any other detail event."""
    names = det.get_column("args").struct.field("name")
    return core.with_columns(
        pl.col("event_idx").replace_strict(want, names, default=None, return_dtype=pl.String).alias("arg_name")
    )


_EMPTY = msgspec.Raw(b"{}")
_FFFD = "\ufffd".encode()


def _utf8_text(raws: list[msgspec.Raw]) -> tuple[bytes, list, int]:
    """(the chunk as NDJSON text, its elements, how many invalid UTF-8 sequences were read as U+FFFD).

    msgspec skips the strings of the elements it only splits, and pyarrow's JSON reader does not check UTF-8
    either: an invalid byte in an event name ends up in a polars string column, and polars panics when it reads
    it back (an internal error, never a line about the file). So a chunk that is not ASCII is checked by Arrow's
    UTF-8 validation (no copy, about 6 GB/s); only an invalid one is decoded with replacement characters and
    split again into its elements (the text holds no raw line break, so each line is one element)."""
    text = b"\n".join(raws)
    if text.isascii() or _is_utf8(text):
        return text, raws, 0
    fixed = text.decode("utf-8", "replace")
    replaced = fixed.count("\ufffd") - text.count(_FFFD)
    text = fixed.encode("utf-8")
    return text, text.split(b"\n"), replaced


def _is_utf8(text: bytes) -> bool:
    offsets = pa.array([0, len(text)], pa.int64()).buffers()[1]
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(text)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def not_utf8_warning(file: str, count: int) -> str:
    """The warning for `Trace.not_utf8`, one wording for every trace kind."""
    return f"{file}: read {count} byte sequence(s) of event text that are not UTF-8 as the replacement character U+FFFD"


def bad_steps_warning(file: str, count: int) -> str:
    """The warning for ProfilerStep annotations whose number `step_number` cannot take."""
    return (
        f"{file}: ignored {count} ProfilerStep annotation(s) whose step number does not fit a 64-bit integer; "
        "their events count as outside any ProfilerStep"
    )


def bad_args_warning(file: str, count: int) -> str:
    """The warning for `Trace.bad_args`, one wording for every trace kind."""
    return (
        f"{file}: read {count} event(s) whose args is not a JSON object (a string, a number or a list) as "
        "having no args"
    )


def no_phase_warning(file: str, count: int) -> str:
    """The warning for `Trace.no_phase`, one wording for every trace kind."""
    return (
        f'{file}: ignored {count} elements of the event array that have no "ph" (phase) field, so are no '
        "chrome-trace events"
    )


# The usual, strictly typed shape of each layout, for pyarrow's JSON reader (about twice as fast as polars' on
# these events). pyarrow refuses a chunk whose values do not fit (a string pid, a string ts in a Kineto trace, an
# int beyond int64); that chunk is then read by polars with every field as text, which tolerates all of them.
_ARROW_CORE = {
    layout: pa.schema(
        [
            ("ph", pa.string()),
            ("cat", pa.string()),
            ("name", pa.string()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("ts", pa.string() if layout == "array" else pa.float64()),
            ("dur", pa.float64()),
            (
                "args",
                pa.struct(
                    [
                        ("name", pa.string()),
                        ("External id", pa.int64()),
                        ("correlation", pa.int64()),
                        ("Sequence number", pa.int64()),
                        ("Fwd thread id", pa.int64()),
                        (_OLD_EXT, pa.int64()),
                    ]
                ),
            ),
        ]
    )
    for layout in ("object", "array")
}
_ARROW_CORE["lean"] = pa.schema([f for f in _ARROW_CORE["array"] if f.name != "args"])


_ARROW_TYPES = {
    "name": pa.string(),
    "stream": pa.int64(),
    "device": pa.int64(),
    "In msg nelems": pa.int64(),
    "Out msg nelems": pa.int64(),
    "Group size": pa.int64(),
    "bytes": pa.int64(),
    "size(Byte)": pa.float64(),
    "bandwidth(GB/s)": pa.float64(),
    "src rank": pa.int64(),
    "dst rank": pa.int64(),
    "count": pa.int64(),
}
_ARROW_DETAIL = {
    layout: pa.schema(
        [
            (
                "args",
                pa.struct([(k, _ARROW_TYPES.get(k, pa.string())) for k in _DETAIL_SCHEMA[layout]["args"].to_schema()]),
            )
        ]
    )
    for layout in ("object", "array", "lean")
}


def _arrow(text: bytes, schema: pa.Schema) -> pl.DataFrame | None:
    """pyarrow's reader with a strict schema; None when a value does not fit it (the caller uses polars).

    Never given a ``null`` element (`_chunk_tables` replaces them): pyarrow (26.0) crashes the process on one in
    the first line."""
    try:
        table = pa_json.read_json(
            pa.py_buffer(text),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(text) + 1)),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pl.from_arrow(table) if table.num_rows == text.count(b"\n") + 1 else None


def _read_core(text: bytes, layout: str) -> tuple[pl.DataFrame, int]:
    """The chunk's core fields, and how many events had args that are no object (read as none)."""
    frame = _arrow(text, _ARROW_CORE[layout])
    bad = 0
    if frame is None:
        frame, bad = _ndjson_text(text, _LEAN_CORE_SCHEMA if layout == "lean" else _CORE_SCHEMA)
    return (frame if layout != "lean" else frame.with_columns(pl.lit(None, _CORE_SCHEMA["args"]).alias("args"))), bad


def _read_detail(text: bytes, layout: str) -> tuple[pl.DataFrame, int]:
    frame = _arrow(text, _ARROW_DETAIL[layout])
    return (frame, 0) if frame is not None else _ndjson_text(text, _DETAIL_SCHEMA[layout])


def _ndjson_text(text: bytes, schema: dict) -> tuple[pl.DataFrame, int]:
    """Parse NDJSON whose lines are whole events, and count the events whose args is no object; a line that is
    not an object is refused, never skipped. polars refuses a whole chunk for one ``"args": "x"`` (or a list):
    such a chunk is read again with args as text (`_args_as_text`)."""
    try:
        frame, bad = pl.read_ndjson(text, schema=schema), 0
    except pl.exceptions.PolarsError:
        if "args" not in schema:
            raise
        frame, bad = _args_as_text(text, schema)
    lines = text.count(b"\n") + 1
    if frame.height != lines:
        raise ValueError(f"parsed {frame.height} of {lines} events")
    return frame, bad


def _args_as_text(text: bytes, schema: dict) -> tuple[pl.DataFrame, int]:
    """The chunk with ``args`` read as JSON text, then each field profan reads taken from the events whose args
    is a valid object; the others (a string, a number, a list, text that is no JSON) are read as having no args
    and counted, so one odd event costs its own args, not the whole trace. Runs only for a chunk the strict
    readers refused."""
    frame = pl.read_ndjson(text, schema={**schema, "args": pl.String})
    args = pl.col("args")
    is_object = (args.str.starts_with("{") & args.str.json_path_match("$").is_not_null()).fill_null(False)
    bad = int(frame.select((args.is_not_null() & ~is_object).sum()).item())
    obj = pl.when(is_object).then(args)
    fields = [obj.str.json_path_match(f"$[{json.dumps(k)}]").alias(k) for k in schema["args"].to_schema()]
    return frame.with_columns(pl.struct(fields).alias("args")), bad


def usable_duration(col: str = "dur_us") -> pl.Expr:
    """True where an event's duration can be summed: a finite number from 0 to ``max_duration_us``. The rest —
    missing, not a number, ``nan``/``inf``, negative, or absurdly long (1e300 µs is no measurement, and summed it
    drowns every real event) — the readers skip and count, never sum."""
    d = pl.col(col)
    return (d.is_not_null() & d.is_finite() & (d >= 0) & (d <= limits.active().max_duration_us)).fill_null(False)


MAX_TS_US = (2**63 - 1) / 1000  # the latest start int64 nanoseconds can hold, in µs (year 2262 as epoch time)


def placeable_start(events: pl.DataFrame, col: str = "ts_us") -> pl.Expr:
    """True where an event's start can be placed in the capture: a finite number that int64 nanoseconds can hold,
    within ``max_duration_us`` of the median start of ``events``' complete events (the capture's robust centre: a
    few absurd starts cannot move it). The rest — ``ts: 1e30``, a negated epoch time, a start a year off — is no
    measurement of this capture: placed, one such event stretches its step window to 10^27 ms and makes the
    device look idle all of it. The readers skip and count them, as a start that is not a number."""
    ts = pl.col(col)
    sane = (ts.is_finite() & (ts.abs() <= MAX_TS_US)).fill_null(False)
    centre = events.filter((pl.col("ph") == "X") & sane).get_column(col).median()
    if centre is None:
        return sane
    return sane & ((ts - centre).abs() <= limits.active().max_duration_us).fill_null(False)


def name_matches(events: pl.DataFrame, pattern: str) -> pl.Expr:
    """True for the rows of ``events`` whose name matches ``pattern``: the pattern is run over the distinct names (a
    few thousand), not over every event of a GB trace (5 ms against 69 ms for 540 k events)."""
    names = events.select(pl.col("name").unique()).filter(pl.col("name").cast(pl.String).str.contains(pattern))
    return pl.col("name").is_in(names["name"].implode())


def step_number(name: pl.Expr, pattern: str) -> pl.Expr:
    """The step number a ``ProfilerStep#N`` name carries, as Int64; null where ``N`` does not fit one (a step
    beyond int64 used to stop the analysis with an internal error). Callers count and say those."""
    return name.str.extract(pattern, 1).cast(pl.Int64, strict=False)


def _number(col: str) -> pl.Expr:
    """A JSON number or numeric string -> Float64 (``ts`` is a string of epoch µs in Ascend traces)."""
    return pl.col(col).cast(pl.Float64, strict=False)


def _int(col: str) -> pl.Expr:
    return _number(col).cast(pl.Int64, strict=False)


def _core(frame: pl.DataFrame, offset: int) -> pl.DataFrame:
    return frame.with_row_index("event_idx", offset=offset).select(
        pl.col("event_idx").cast(pl.Int64),
        *[pl.col(c).cast(pl.String).cast(pl.Categorical) for c in ("ph", "cat", "pid", "tid")],
        pl.col("name").cast(pl.Categorical),
        _number("ts").alias("ts_us"),
        _number("dur").alias("dur_us"),
        pl.col("args").struct.field("name").alias("arg_name"),
        pl.coalesce(
            pl.col("args").struct.field(k).cast(pl.Int64, strict=False) for k in ("External id", _OLD_EXT)
        ).alias("ext_id"),
        pl.col("args").struct.field("correlation").cast(pl.Int64, strict=False).alias("correlation"),
        pl.col("args").struct.field("Sequence number").cast(pl.Int64, strict=False).alias("seq"),
        pl.col("args").struct.field("Fwd thread id").cast(pl.Int64, strict=False).alias("fwd_tid"),
    )


def _detail_dtype(c: str) -> pl.DataType:
    return pl.Int64() if c in INT_ARGS else pl.Float64() if c in FLOAT_ARGS else pl.String()


def _details(frame: pl.DataFrame, idx: pl.Series) -> pl.DataFrame:
    args = frame.get_column("args").struct.unnest()
    args = args.rename({key: value for key, value in ARGS.items() if key in args.columns})
    detail = [c for c in ARGS.values() if c not in _CORE_ARGS.values()]
    return args.select(
        *[
            (_int(c) if c in INT_ARGS else _number(c) if c in FLOAT_ARGS else pl.col(c).cast(pl.String))
            if c in args.columns
            else pl.lit(None, _detail_dtype(c)).alias(c)
            for c in detail
        ]
    ).with_columns(idx.alias("event_idx"))


def _empty_details() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"event_idx": pl.Int64, **{c: _detail_dtype(c) for c in ARGS.values() if c not in _CORE_ARGS.values()}}
    )


def parse(path: Path, keep: pl.Expr | None = None, detail: tuple[str, ...] | None = None) -> Trace:
    """Parse one trace file: one ``events`` row per kept element of the event array, with its ``event_idx``.

    ``keep`` filters rows (default: ``X`` and ``M`` events); the filter runs per chunk, so dropped events never
    accumulate in memory. ``detail``: the categories whose full args are read (`needs_detail`).
    """
    path = Path(path)
    try:
        return _parse(path, keep, detail)
    except RecursionError:
        raise ProfanInputError(path, TOO_DEEP) from None


def _parse(path: Path, keep: pl.Expr | None, detail: tuple[str, ...] | None = None) -> Trace:
    buf = trace_text(path)
    arr, layout, meta = split_events(path, buf)
    keep = default_keep() if keep is None else keep
    parts, details = [], []
    offset = 0
    no_phase = not_utf8 = bad_args = 0
    dropped: dict[str, int] = {}  # complete events the row filter left out, per category ("": none)
    pending: deque[Future] = deque()

    def collect(fut: Future) -> None:
        nonlocal no_phase, not_utf8, bad_args
        core, det, n, bad, left, odd = fut.result()
        bad_args += odd
        for cat, value in left.items():
            dropped[cat] = dropped.get(cat, 0) + value
        parts.append(core)
        no_phase += n
        not_utf8 += bad
        if det is not None:
            details.append(det)

    try:
        # msgspec splits the next chunk (holding the GIL) while polars parses earlier ones on the pool (without
        # it); at most WORKERS chunks are in flight, which bounds memory
        with ThreadPoolExecutor(WORKERS) as pool:
            for raws in event_chunks(path, arr, buf if isinstance(buf, mmap.mmap) else None):
                pending.append(pool.submit(_chunk_tables, raws, offset, keep, layout, detail))
                offset += len(raws)
                while len(pending) >= WORKERS:
                    collect(pending.popleft())
            while pending:
                collect(pending.popleft())
    except (ValueError, pl.exceptions.PolarsError) as exc:
        raise ProfanInputError(
            path, f"events are not JSON objects of the chrome-trace shape: {str(exc).splitlines()[0]}"
        ) from None
    del arr, buf
    if offset == 0:
        raise ProfanInputError(path, "trace has no events (empty event array)")
    events = pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]
    detail = pl.concat(details) if details else _empty_details()
    if not_utf8:
        meta[NOT_UTF8] = not_utf8
    if dropped:
        meta[DROPPED] = dropped
    if bad_args:
        meta[BAD_ARGS] = bad_args
    return Trace(path=path, events=events, details=detail, layout=layout, meta=meta, no_phase=no_phase)
