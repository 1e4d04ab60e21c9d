"""The tokens of a serving capture's iterations: the input shape of the op that takes the batch's token ids
(rules/serving.toml ``token_op``, ``token_input``: ``aten::embedding``'s index tensor, [batch, query length]).

The main parse keeps no ``Input Dims`` (they would widen every CPU row); the token op is a handful of events, so
this reader picks them out of the raw text by name before decoding them, as `profan.sources.trace.kineto_moe`
does for an MoE layer's token counts, and only for traces up to ``token_read_max_mb`` on disk. Every row keeps
its ``event_idx`` (the element's place in ``traceEvents``), so a token count cites its event.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import polars as pl

from profan.rulepack.serving import ServingRules
from profan.sources.trace.chunks import event_chunks, split_events, trace_text

TOKEN_SCHEMA = {"event_idx": pl.Int64, "ts_us": pl.Float64, "dims": pl.List(pl.Int64)}


class _Event(msgspec.Struct):
    name: str = ""
    ph: str = ""
    ts: float | None = None
    args: dict | None = None


def _dims(evidence: _Event, k: int) -> list[int] | None:
    dims = (evidence.args or {}).get("Input Dims") if isinstance(evidence.args, dict) else None
    d = dims[k] if isinstance(dims, list) and len(dims) > k else None
    return d if isinstance(d, list) and d and all(type(v) is int for v in d) else None


def token_events(path: Path, rules: ServingRules) -> pl.DataFrame:
    """The token op's events with the dims of its token input (`TOKEN_SCHEMA`); events that do not decode as
    chrome-trace objects are passed over (the main parse counts them), and so are those without that input."""
    return input_dims(path, rules.token_op, rules.token_input)


def input_dims(path: Path, op_pattern: str, input_index: int) -> pl.DataFrame:
    """The complete events whose name matches ``op_pattern``, with the dims of their ``input_index``-th input
    (`TOKEN_SCHEMA`): a serving iteration's tokens, an RL generation's sequences per forward."""
    op = re.compile(op_pattern)
    literal = op_pattern.strip("^$")  # a cheap byte test first where the op's pattern is a plain name
    hint = literal.encode() if re.escape(literal) == literal else b""
    buf = trace_text(path)
    arr, _, _ = split_events(path, buf)
    rows, offset, decoder = [], 0, msgspec.json.Decoder(_Event)
    for raws in event_chunks(path, arr):
        for index, raw in enumerate(raws):
            if hint not in bytes(raw):
                continue
            try:
                evidence = decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            dims = _dims(evidence, input_index) if evidence.ph == "X" and op.search(evidence.name) else None
            if dims is not None and evidence.ts is not None:
                rows.append({"event_idx": offset + index, "ts_us": float(evidence.ts), "dims": dims})
        offset += len(raws)
    return pl.DataFrame(rows, schema=TOKEN_SCHEMA) if rows else pl.DataFrame(schema=TOKEN_SCHEMA)


def rank_tokens(path: Path, rules: ServingRules) -> pl.DataFrame | None:
    """The rank's token events, or None for a trace larger than ``token_read_max_mb`` on disk (a second read of a
    GB trace for shapes the main parse lacks would double its cost: the iterations' tokens are then unknown)."""
    if path.stat().st_size > rules.token_read_max_mb * 1e6:
        return None
    return token_events(path, rules)
