"""What a Kineto trace records of an MoE layer's tokens: the all-to-all calls' split sizes and row counts, and the
rows entering each expert's annotated range.

The main parse keeps no ``Input Dims`` / ``Concrete Inputs`` (they would widen every CPU row); token counts need
them for a handful of events only, so this reader picks those events out of the raw text by name before decoding
them: the all-to-all ops (``c10d::alltoall_base_``, ``c10d::all_to_all*``, …: check ``moe-expert-imbalance``'s
``all_to_all_op``), the annotated expert ranges (``expert_range``: ``record_function("expert_<id>")``) and the
matmul-like ops (``expert_input_op``) whose first input is what entered the expert. Which event is which is
decided by the check's patterns; this module only reads them.

Every row keeps its ``event_idx`` (the element's place in ``traceEvents``), so a token count cites its events.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import polars as pl

from profan.sources.trace.chunks import event_chunks, split_events, trace_text

EVENT_SCHEMA = {
    "event_idx": pl.Int64,
    "kind": pl.Utf8,  # a2a | range | input | run (the backend's event of an all-to-all) | module (experts)
    "name": pl.Utf8,
    "tid": pl.Utf8,
    "ts_us": pl.Float64,
    "end_us": pl.Float64,
    "rows_in": pl.Int64,  # first dim of the first input (an a2a's output tensor: rows received)
    "rows_out": pl.Int64,  # first dim of the second input (an a2a's input tensor: rows sent)
    "width": pl.Int64,  # second dim of the first input (the hidden size, for bytes)
    "recv_splits": pl.Utf8,  # an a2a's output split sizes (rows from each peer), as written
    "send_splits": pl.Utf8,
    "dtype": pl.Utf8,  # the first input's scalar type as Kineto writes it ("float", "c10::BFloat16"), for bytes
}


class _Event(msgspec.Struct):
    name: str = ""
    ph: str = ""
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    tid: int | str = ""
    args: dict | None = None


def _dims(args: dict, k: int) -> list:
    dims = args.get("Input Dims") or []
    d = dims[k] if isinstance(dims, list) and len(dims) > k else []
    return d if isinstance(d, list) else []


def _first_type(args: dict) -> str | None:
    types = args.get("Input type") or []
    return str(types[0]) if isinstance(types, list) and types and types[0] else None


def _row(idx: int, evidence: _Event, kind: str) -> dict:
    args = evidence.args if isinstance(evidence.args, dict) else {}
    first, second = _dims(args, 0), _dims(args, 1)
    concrete = args.get("Concrete Inputs") or []
    split = [str(c) for c in concrete[3:5]] if isinstance(concrete, list) and len(concrete) >= 5 else [None, None]
    two_d = len(first) == 2 and all(isinstance(v, int) for v in first)
    return {
        "event_idx": idx,
        "kind": kind,
        "name": evidence.name,
        "tid": str(evidence.tid),
        "ts_us": float(evidence.ts or 0.0),
        "end_us": float(evidence.ts or 0.0) + float(evidence.dur or 0.0),
        "rows_in": first[0] if two_d else None,
        "rows_out": second[0] if len(second) == 2 and isinstance(second[0], int) else None,
        "width": first[1] if two_d else None,
        "recv_splits": split[0],
        "send_splits": split[1],
        "dtype": _first_type(args),
    }


def token_events(path: Path, patterns: dict[str, str]) -> pl.DataFrame:
    """The trace's all-to-all ops, expert ranges and expert-input ops (``patterns``: ``all_to_all_op``,
    ``expert_range``, ``expert_input_op``, regexes on the name), one row each (`EVENT_SCHEMA`). Events that do
    not decode as chrome-trace objects are not MoE events and are passed over (the main parse counts them)."""
    kinds = {key: re.compile(patterns[p]) for key, p in (("a2a", "all_to_all_op"), ("range", "expert_range"))}
    kinds["input"] = re.compile(patterns["expert_input_op"])
    if patterns.get("exchange_op"):  # the backend's event of each all-to-all (check's token_events)
        kinds["run"] = re.compile(patterns["exchange_op"])
    if patterns.get("expert_module"):  # a module running one layer's experts (check's token_events)
        kinds["module"] = re.compile(patterns["expert_module"])
    # a cheap byte test first: only elements naming one of the three can be one
    hint = re.compile(rb"all_?to_?all|alltoall|expert|aten::|record_param_comms", re.I)  # "Experts" too
    buf = trace_text(path)
    arr, _, _ = split_events(path, buf)
    rows, offset, decoder = [], 0, msgspec.json.Decoder(_Event)
    for raws in event_chunks(path, arr):
        for index, raw in enumerate(raws):
            if not hint.search(bytes(raw)):
                continue
            try:
                evidence = decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if evidence.ph != "X":
                continue
            kind = next((key for key, value in kinds.items() if value.search(evidence.name)), None)
            if kind is not None:
                rows.append(_row(offset + index, evidence, kind))
        offset += len(raws)
    return pl.DataFrame(rows, schema=EVENT_SCHEMA, orient="row") if rows else pl.DataFrame(schema=EVENT_SCHEMA)


def with_steps(frame: pl.DataFrame, steps: pl.DataFrame | None) -> pl.DataFrame:
    """Each row's ProfilerStep (the step window its start falls in), null outside every step."""
    if steps is None or steps.is_empty():
        return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))
    # one window per step: a GPU trace writes ProfilerStep#N on the CPU and on the device
    win = (
        steps.group_by("step").agg(pl.col("start_us").min().alias("_s"), pl.col("end_us").max().alias("_e")).sort("_s")
    )
    out = frame.sort("ts_us").join_asof(win, left_on="ts_us", right_on="_s", strategy="backward")
    return out.with_columns(pl.when(pl.col("ts_us") < pl.col("_e")).then(pl.col("step")).alias("step")).drop("_s", "_e")


def rank_token_events(kt, patterns: dict[str, str], max_mb: float) -> pl.DataFrame | None:
    """The rank's token events with their step (`token_events`, `with_steps`), or None where the trace shows no
    sign of an MoE layer (no all-to-all, no expert range) or is larger than ``max_mb`` on disk (a second read of
    a GB trace for counts the main parse already lacks would double its cost)."""
    names = pl.concat(
        [
            kt.collectives.select("name"),
            kt.device.select(pl.col("annotation").alias("name")),
            kt.device.select(pl.col("module").alias("name")) if "module" in kt.device.columns else pl.DataFrame(),
        ],
        how="vertical_relaxed",
    )
    signs = [patterns[key] for key in ("all_to_all_op", "expert_hint", "expert_module_hint") if patterns.get(key)]
    hints = names["name"].drop_nulls().str.contains("|".join(signs)).any()
    if not hints or kt.path.stat().st_size > max_mb * 1e6:
        return None
    return with_steps(token_events(kt.path, patterns), kt.steps)


def split_list(text: pl.Expr) -> pl.Expr:
    """``"[512, 0, 3]"`` -> [512, 0, 3] (empty or unreadable: null)."""
    return (
        text.str.strip_chars("[] ")
        .str.split(",")
        .list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False))
    )


def splits(text: str | None) -> list[int]:
    """One split-size text as ints, for tests and messages."""
    try:
        v = json.loads(text) if text else []
    except ValueError:
        return []
    return [int(x) for x in v] if isinstance(v, list) else []
