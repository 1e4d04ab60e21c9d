"""HCCL plane tasks of an Ascend ``trace_view.json`` (format reference §3.2), one row per task event.

Each ``Plane k`` thread of the HCCL (or ``Communication``) process carries the tasks of one link of a collective:
``Memcpy`` / ``Reduce_Inline`` (args: src/dst rank, transport and link type, size, bandwidth) and ``Notify_Wait``
(waiting for the peer's signal). The per-plane totals kept by the trace_view reader mix the two; the waits per
peer need the tasks themselves. ``src_rank``/``dst_rank`` are group-local, as HCCL writes them.
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.roles import defaults as default_roles
from profan.sources.trace import ascend_view as trace_view
from profan.sources.trace.chrome import Trace

COLUMNS = [
    "event_idx",
    "process",
    "plane",
    "name",
    "task_type",
    "src_rank",
    "dst_rank",
    "transport_type",
    "link_type",
    "size_bytes",
    "ts_us",
    "dur_us",
]


def plane_tasks(trace: Trace) -> pl.DataFrame:
    """Task events on Plane threads of a parsed trace_view.json (the trace the trace_view reader parsed: a GB
    trace is parsed once)."""
    x = trace_view.lanes(trace.events)
    planes = x.filter(
        pl.col("process_name").is_in(default_roles().ascend_comm_processes)
        & pl.col("thread_name").fill_null("").str.contains(r"^Plane \d+")
    )
    if planes.is_empty():
        return pl.DataFrame()
    return trace.with_details(planes).select(
        "event_idx",
        pl.col("process_name").alias("process"),
        pl.col("thread_name").alias("plane"),
        "name",
        pl.col("hccl_task_type").alias("task_type"),
        "src_rank",
        "dst_rank",
        "transport_type",
        "link_type",
        "size_bytes",
        "ts_us",
        "dur_us",
    )
