"""What an MoE layer's expert-parallel exchange costs on one rank: per step and part (dispatch, combine, or an
all-to-all whose direction the capture does not say), its device time, how much of it ran while compute ran
(hidden: another stream, or another thread of a CPU trace, computed meanwhile) and how much the step waited on it
alone (exposed).

Why here, beside the classified events: the split needs every event placed in time, which the kernel groups no
longer are. It is interval arithmetic on `intervals.union_runs`: a part's busy time is the length of the union of
its events; the time it is hidden is its overlap with the union of the compute events, |A ∩ C| = |A| + |C| − |A ∪ C|,
so no pair of events is ever compared; exposed is the rest. Which events are which part is the bucket rules'
``part`` (rules/buckets/*.toml), looked up by the rule that decided each event.
"""

from __future__ import annotations

import polars as pl

from profan.sources.common.intervals import union_length, union_runs

EP_SCHEMA = {
    "step": pl.Int64,
    "part": pl.Utf8,
    "events": pl.UInt32,
    "time_us": pl.Float64,  # summed event durations (overlapping events count each)
    "busy_us": pl.Float64,  # length of the union of the part's events
    "hidden_us": pl.Float64,  # of busy_us, the time some compute event ran too
    "exposed_us": pl.Float64,  # busy_us - hidden_us: the part alone on the device
    "window_us": pl.Float64,  # the step's window: first start to last end of its device events
    "first_event": pl.Int64,  # the part's longest event in the step, to cite
}


def ep_time(
    dev: pl.DataFrame, parts: dict[str, str], ep_parts: tuple[str, ...], comm_bucket: str, total: str
) -> pl.DataFrame:
    """Per step and EP part of the classified device events ``dev`` (``step, event_idx, ts_us, end_us, dur_us,
    bucket, rule_id``): events, time, busy, hidden, exposed, the step's window. ``parts``: rule id -> part;
    ``ep_parts``: the parts that are the EP exchange, of the events in ``comm_bucket``; compute is every event
    outside it (the token gather inside a dispatch range, a shared expert run meanwhile, included). A row of part
    ``total`` per step holds the union of every EP part: the parts may overlap (gloo's worker-thread all-to-all
    runs inside the main thread's dispatch op), so their rows do not add up. Empty when no event is one of them."""
    if dev.is_empty() or not parts:
        return pl.DataFrame(schema=EP_SCHEMA)
    lookup = pl.DataFrame({"rule_id": list(parts), "part": list(parts.values())})
    d = (
        dev.filter(pl.col("step").is_not_null())
        .select("step", "event_idx", "ts_us", "end_us", "dur_us", "bucket", "rule_id")
        .join(lookup, on="rule_id", how="left")
    )
    is_comm = pl.col("bucket") == comm_bucket
    frame = d.filter(is_comm & pl.col("part").is_in(list(ep_parts)))
    if frame.is_empty():
        return pl.DataFrame(schema=EP_SCHEMA)
    frame = pl.concat([frame, frame.with_columns(pl.lit(total).alias("part"))])
    compute = d.filter(~is_comm).drop("part")
    per_part = frame.select("step", "part").unique()
    # the compute of each step, once per part it is compared with, so one union per (step, part) does both
    both = pl.concat(
        [
            frame.select("step", "part", "ts_us", "end_us"),
            compute.join(per_part, on="step").select("step", "part", "ts_us", "end_us"),
        ]
    )
    by = ["step", "part"]
    busy = union_length(union_runs(frame, by), by, "busy_us")
    comp = union_length(union_runs(compute.join(per_part, on="step"), by), by, "_compute_us")
    joint = union_length(union_runs(both, by), by, "_joint_us")
    window = d.group_by("step").agg((pl.col("end_us").max() - pl.col("ts_us").min()).alias("window_us"))
    stats = frame.group_by(by).agg(
        pl.len().alias("events"),
        pl.col("dur_us").sum().alias("time_us"),
        pl.col("event_idx").sort_by("dur_us", descending=True).first().alias("first_event"),
    )
    out = (
        stats.join(busy, on=by)
        .join(comp, on=by, how="left")
        .join(joint, on=by)
        .join(window, on="step")
        .with_columns(
            (pl.col("busy_us") + pl.col("_compute_us").fill_null(0.0) - pl.col("_joint_us"))
            .clip(0.0)
            .alias("hidden_us")
        )
        .with_columns((pl.col("busy_us") - pl.col("hidden_us")).alias("exposed_us"))
    )
    return out.select(list(EP_SCHEMA)).cast({key: value for key, value in EP_SCHEMA.items()}).sort(by)
