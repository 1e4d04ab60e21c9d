"""The forwards of an RL trace with the shape of the batch each ran: the op that opens a model forward (rules/rl.toml
``forward_op``, ``aten::embedding``) and the dims of its token input ([sequences, tokens]: a prefill forward
carries the prompt's tokens, a decode forward one per sequence). The main parse keeps no ``Input Dims``; they are
read a second time from the trace (`kineto_tokens.input_dims`), only where the profiler recorded shapes (verl's
torch tool ``contents: [shapes]``, ``record_shapes``) and the trace is at most ``forward_read_max_mb`` on disk."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from profan.rulepack.rl import RlRules
from profan.sources.trace.kineto_tokens import input_dims


def with_dims(path: Path, forwards: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """``forwards`` (event_idx, ts_us) with ``sequences`` and ``tokens`` of each (null where the trace recorded
    no shapes, or is too large to read again)."""
    out = forwards.with_columns(pl.lit(None, pl.Int64).alias("sequences"), pl.lit(None, pl.Int64).alias("tokens"))
    if forwards.is_empty() or path.stat().st_size > rules.forward_read_max_mb * 1e6:
        return out
    dims = input_dims(path, f"^{rules.forward_op}$", rules.forward_input).filter(pl.col("dims").list.len() == 2)
    if dims.is_empty():
        return out
    shaped = dims.select(
        "event_idx",
        pl.col("dims").list.get(0).alias("sequences"),
        pl.col("dims").list.get(1).alias("tokens"),
    )
    return forwards.join(shaped, on="event_idx", how="left")
