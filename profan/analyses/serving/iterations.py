"""Every rank's model iterations in one table, each row citing the event that marked it (``file``,
``event_idx``) and the one that decided its phase (``phase_event``): what the per-phase view, the serving causes
and the report read.

The rows are made in the per-rank map (`profan.sources.trace.kineto_iterations`), where the trace's events are;
here they are only stacked, with the rank and the file their event indexes point into.
"""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData
from profan.sources.common.rowframe import stack

FIRST = ["rank", "iteration", "phase", "period_us", "busy_us", "idle_us", "between_kernels_us", "gap_after_us"]


def serving_ranks(ranks: list[RankData]) -> list[RankData]:
    """The ranks read as serving captures (an iteration table of at least one row)."""
    return [rank for rank in ranks if rank.iterations is not None and not rank.iterations.is_empty()]


def iteration_table(ranks: list[RankData]) -> pl.DataFrame:
    """One row per rank and iteration, in time order; empty where no rank is a serving capture."""
    have = serving_ranks(ranks)
    if not have:
        return pl.DataFrame()
    files = [r.files.get("kineto_trace", "") for r in have]
    frame = stack([r.iterations for r in have], {"rank": [r.rank for r in have], "file": files})
    return frame.select(*FIRST, pl.exclude(*FIRST)).sort("rank", "iteration")


def bucket_table(ranks: list[RankData]) -> pl.DataFrame:
    """Every serving rank's device time per iteration and bucket (``rank, iteration, bucket, time_us``)."""
    have = [r for r in serving_ranks(ranks) if r.iteration_buckets is not None]
    if not have:
        return pl.DataFrame()
    return stack([r.iteration_buckets for r in have], {"rank": [r.rank for r in have]})
