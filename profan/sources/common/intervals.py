"""A device's busy and idle time placed in time: per step, the blocks of compute, exposed communication and idle
that the report's timeline draws, and the interval union the step totals are summed from.

Every source of device time ends here the same way: its events (Kineto device lanes, the Overlap Analysis lanes of
``trace_view.json``, the timed rows of ``kernel_details.csv``) become the union of the compute events and the union
of the communication events of each step (`union_runs`; the step totals are the lengths of these same runs), and
`step_blocks` cuts the step's window into the stretches where the device computes, only communicates (exposed
communication), or does nothing. A point in time is compute when any compute event covers it, exposed
communication when only communication does, idle otherwise — the split step_trace_time.csv writes.

The result travels from the per-rank map to the report, so it is bounded: a step keeps at most `STEP_BLOCKS`
blocks (fewer when a rank has many steps, `RANK_BLOCKS` over all of them). When a step has more stretches than
that, the longest stand alone and each run of shorter ones between them becomes one block, labelled by the part
that fills most of it. A block keeps the exact compute, exposed communication and idle time it holds and how many
stretches it merged (``pieces``), so the totals stay exact: the blocks' ``compute_us`` add up to the step's
compute, their ``comm_us`` to its exposed communication, their ``idle_us`` to its idle time, and their lengths
to its window.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from profan.rulepack import limits

STEP_BLOCKS = 31  # blocks kept per (rank, step) at most: 15 long stretches and the merged runs between them
RANK_BLOCKS = 480  # blocks kept per rank over all its steps: a rank with many steps keeps fewer per step
MIN_STEP_BLOCKS = 5  # … but never fewer than this per step
PARTS = ("compute", "comm", "idle")
# where a rank's blocks come from (their ``source``) -> the logical file of the rank they were read from
SOURCE_FILES = {
    "device_lanes": "kineto_trace",
    "overlap_analysis": "trace_view",
    "kernel_details": "kernel_details",
    "ascend_db": "kernel_details",  # the DB's task rows, which the rank cites as its kernel file (<db>#TASK)
}
BLOCK_SCHEMA = {
    "step": pl.Int64,
    "part": pl.Utf8,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "compute_us": pl.Float64,
    "comm_us": pl.Float64,
    "idle_us": pl.Float64,
    "pieces": pl.UInt32,
}


def union_runs(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The union of the [ts_us, end_us) intervals of each group as disjoint runs (columns ``*by, ts_us,
    end_us``): overlapping or touching events become one run."""
    s = frame.select(*by, "ts_us", "end_us").sort(*by, "ts_us")
    s = s.with_columns(pl.col("end_us").cum_max().shift(1).over(by).alias("_prev"))
    s = s.with_columns(
        (pl.col("_prev").is_null() | (pl.col("ts_us") > pl.col("_prev")))
        .cast(pl.Int64)
        .cum_sum()
        .over(by)
        .alias("_run")
    )
    runs = s.group_by(*by, "_run").agg(pl.col("ts_us").min(), pl.col("end_us").max())
    return runs.drop("_run").sort(*by, "ts_us", nulls_last=True)


def union_length(runs: pl.DataFrame, by: list[str], name: str) -> pl.DataFrame:
    """Per group, the length of its runs (`union_runs`): the time at least one event covers."""
    return runs.group_by(by).agg((pl.col("end_us") - pl.col("ts_us")).sum().alias(name))


def covered_time(spans: pl.DataFrame, runs: pl.DataFrame, name: str) -> pl.DataFrame:
    """``spans`` (``ts_us, end_us``, any other columns) with ``name``: how much of each span the disjoint, sorted
    ``runs`` of one lane cover (`union_runs`), |span ∩ runs|. A binary search of each end in the runs' starts and
    the runs' cumulative length, so no span is compared with every run: covered(t), the runs' time before t, at the
    span's end less at its start."""
    if runs.is_empty():
        return spans.with_columns(pl.lit(0.0, pl.Float64).alias(name))
    lane = runs.select("ts_us", "end_us").sort("ts_us").with_row_index("_i", offset=0)
    length = pl.col("end_us") - pl.col("ts_us")
    lane = lane.select(
        pl.col("_i").cast(pl.Int64),
        pl.col("ts_us").alias("_ts"),
        length.alias("_len"),
        (length.cum_sum() - length).alias("_before"),
    )
    starts = lane["_ts"]

    def covered(at: str) -> pl.DataFrame:
        index = (pl.lit(starts).search_sorted(pl.col(at), side="right").cast(pl.Int64) - 1).alias("_i")
        found = spans.select(at).with_row_index("_row").with_columns(index).join(lane, on="_i", how="left")
        inside = (pl.col(at) - pl.col("_ts")).clip(0.0, pl.col("_len"))
        return found.sort("_row").select((pl.col("_before") + inside).fill_null(0.0).alias("_v"))

    return spans.with_columns((covered("end_us")["_v"] - covered("ts_us")["_v"]).clip(0.0).alias(name))


def per_step_blocks(steps: int) -> int:
    """Blocks one step may keep when its rank has ``steps`` steps (odd: the long stretches and the runs between)."""
    n = max(MIN_STEP_BLOCKS, min(STEP_BLOCKS, RANK_BLOCKS // max(steps, 1)))
    return n if n % 2 else n - 1


def step_blocks(windows: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The blocks of each window (columns ``*by, start_us, end_us``), from the compute and communication intervals
    of the same groups (``ts_us, end_us``: the runs of `union_runs` where the caller has them for its totals, or the
    events themselves — overlaps are counted, not summed; anything outside a window is clipped to it): ``*by, part,
    start_us, end_us, compute_us, comm_us, idle_us, pieces``, in time order, covering the window end to end. One
    rank's windows: the bound per step depends on how many steps the rank has (`per_step_blocks`)."""
    w = windows.select(*by, "start_us", "end_us").filter(pl.col("end_us") > pl.col("start_us")).with_row_index("_g")
    if w.is_empty():
        return pl.DataFrame(schema={**{b: windows.schema[b] for b in by}, **BLOCK_SCHEMA})
    return _window_blocks(w, _clipped(compute, w, by), _clipped(comm, w, by), by)


def _window_blocks(w: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`step_blocks` of windows ``w`` (``_g``, ``*by``, start_us, end_us) and intervals already keyed by their
    window (``_g``) and inside it."""
    keep = per_step_blocks(w.height)
    parts = _chunks(w, compute, comm)
    blocks = pl.concat([_merge_short(_stretches(*part), keep) for part in parts])
    keys = w.select("_g", *by)
    return keys.join(blocks, on="_g").drop("_g").sort(*by, "start_us", nulls_last=True)


SWEEP_ROWS = 1 << 18  # intervals swept at once: the sweep's frames are several times its input, so a kernel file's
# millions of rows go through it a few hundred thousand at a time (a 1 GB file's peak fell from 1.5 GB to 0.5 GB)


def _chunks(
    w: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame
) -> list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]:
    """The windows with their intervals, in chunks of consecutive windows holding about `SWEEP_ROWS` intervals
    (a window holding more is a chunk of its own). Each window's sweep is its own, so chunks change no block."""
    if compute.height + comm.height <= SWEEP_ROWS:
        return [(w, compute, comm)]
    counts = pl.concat([compute.select("_g"), comm.select("_g")]).group_by("_g").len()
    chunk = (
        w.select("_g")
        .join(counts, on="_g", how="left")
        .sort("_g")
        .select("_g", (pl.col("len").fill_null(0).cum_sum() // SWEEP_ROWS).alias("_chunk"))
    )

    def split(frame: pl.DataFrame) -> dict:
        return frame.join(chunk, on="_g").partition_by("_chunk", as_dict=True, include_key=False)

    windows, comps, comms = split(w), split(compute), split(comm)
    return [(windows[key], comps.get(key, compute.clear()), comms.get(key, comm.clear())) for key in sorted(windows)]


def _clipped(runs: pl.DataFrame, frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Intervals joined to their window (``_g``) and clipped to it."""
    win = frame.select("_g", *by, pl.col("start_us").alias("_w0"), pl.col("end_us").alias("_w1"))
    j = runs.join(win, on=by, nulls_equal=True)
    ts, end = pl.max_horizontal("ts_us", "_w0"), pl.min_horizontal("end_us", "_w1")
    return j.select("_g", ts.alias("ts_us"), end.alias("end_us")).filter(pl.col("end_us") > pl.col("ts_us"))


def _stretches(w: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """The exact stretches of each window (``_g, a, b, _p``, in window and time order; ``_p`` the index of the part
    in `PARTS`, named once the stretches are merged into a few blocks): a sweep over the interval boundaries — a compute
    interval opens (+1) at its start and closes (-1) at its end, a communication one alike — so the count of open
    intervals says what covers the stretch up to the next boundary; neighbours of one part are then joined.
    Intervals are clipped to their window, so every window's counts are back at 0 at its end, and one pass over
    all windows, sorted, does for them all: a rank with hundreds of steps costs one sort, no expression per
    window."""

    def edges(f: pl.DataFrame, start: str, end: str, dc: int, dm: int) -> list[pl.DataFrame]:
        return [
            f.select(
                "_g",
                pl.col(col).alias("a"),
                pl.lit(sign * dc, pl.Int32).alias("dc"),
                pl.lit(sign * dm, pl.Int32).alias("dm"),
            )
            for col, sign in ((start, 1), (end, -1))
        ]

    frame = pl.concat(
        [
            *edges(w, "start_us", "end_us", 0, 0),
            *edges(compute, "ts_us", "end_us", 1, 0),
            *edges(comm, "ts_us", "end_us", 0, 1),
        ]
    )
    # in boundary order, the running counts at the last of the boundaries at one time are those after all of
    # them: that row starts the stretch to the next time (the others, of length 0, are dropped)
    g, a, b, code = pl.col("_g"), pl.col("a"), pl.col("b"), pl.col("_p")
    # by window, then time: polars' stable sort on both keys is the fastest order here (bench/README.md)
    segs = frame.sort("_g", "a", maintain_order=True).with_columns(
        pl.col("dc").cum_sum().alias("_c"), pl.col("dm").cum_sum().alias("_m"), a.shift(-1).alias("b")
    )
    segs = segs.filter((g.shift(-1) == g) & (b > a))
    part = pl.when(pl.col("_c") > 0).then(0).when(pl.col("_m") > 0).then(1).otherwise(2).cast(pl.UInt8)
    segs = segs.select("_g", "a", "b", part.alias("_p"))
    # a window's stretches are contiguous (each ends where the next begins), so a run of one part starts at its
    # first stretch and ends where its last one does: no grouping over millions of stretches
    first = ((code != code.shift(1)) | (g != g.shift(1))).fill_null(True)
    last = ((code != code.shift(-1)) | (g != g.shift(-1))).fill_null(True)
    return segs.with_columns(pl.when(last).then(b).backward_fill().alias("b")).filter(first)


def _merge_short(segs: pl.DataFrame, keep: int) -> pl.DataFrame:
    """At most ``keep`` blocks per window: with more stretches, the ``keep // 2`` longest stand alone (the first of
    equal ones) and each run of shorter ones between them is one block, its part the one that fills most of it.
    ``segs`` comes in window and time order (`_stretches`), so a block is a run of consecutive rows: the longest
    are found from each window's threshold (its ``keep // 2``-th longest length) and ranked among the few rows
    that reach it, not by sorting every window's stretches, and blocks are numbered by one running sum."""
    g, length, top = pl.col("_g"), pl.col("_len"), keep // 2
    segs = segs.with_columns((pl.col("b") - pl.col("a")).alias("_len"))
    per = segs.group_by("_g").agg(pl.len().alias("_n"), length.top_k(top).min().alias("_thr"))
    segs = segs.join(per, on="_g", how="left", maintain_order="left").with_row_index("_i")
    reach = segs.filter((pl.col("_n") > keep) & (length >= pl.col("_thr"))).select("_i", "_g", "_len")
    longest = reach.filter(length.rank("ordinal", descending=True).over("_g") <= top)["_i"]
    alone = (pl.col("_n") <= keep) | pl.col("_i").is_in(longest.implode())
    fresh = pl.col("_alone") | pl.col("_alone").shift(1).fill_null(True) | (g != g.shift(1)).fill_null(True)
    segs = segs.with_columns(alone.alias("_alone")).with_columns(fresh.cast(pl.Int64).cum_sum().alias("_block"))
    blocks = segs.group_by("_block", maintain_order=True).agg(
        g.first(),
        pl.col("a").first().alias("start_us"),
        pl.col("b").last().alias("end_us"),
        *[length.filter(pl.col("_p") == index).sum().alias(f"{p}_us") for index, p in enumerate(PARTS)],
        pl.len().cast(pl.UInt32).alias("pieces"),
    )
    c, m, index = pl.col("compute_us"), pl.col("comm_us"), pl.col("idle_us")
    part = (
        pl.when((c >= m) & (c >= index))
        .then(pl.lit("compute"))
        .when(m >= index)
        .then(pl.lit("comm"))
        .otherwise(pl.lit("idle"))
    )
    return blocks.select("_g", part.alias("part"), "start_us", "end_us", "compute_us", "comm_us", "idle_us", "pieces")


def placed() -> pl.Expr:
    """Whether a timed kernel row has a place in time: a start that is a number."""
    return pl.col("start_us").is_not_null() & pl.col("start_us").is_finite() & pl.col("dur_us").is_not_null()


def unplaced(rows: pl.DataFrame) -> int:
    """Timed kernel rows without a place in time (`placed`), which `kernel_blocks` leaves out: said as a warning."""
    return int(rows.select((~placed()).sum()).item())


def kernel_blocks(rows: pl.DataFrame, is_comm: pl.Expr) -> pl.DataFrame:
    """Blocks of a kernel file's timed rows (``step, op, core, start_us, dur_us``; Ascend ``kernel_details.csv``
    read without ``trace_view.json``). The file gives no step start: a step's window runs from the start of its
    first kernel to the end of its last one, by ``Step Id`` — on the Qwen3 sample exactly step_trace_time.csv's
    Stage. A row without a start (not a number) has no place in time and is left out here, as the README says;
    its duration still counts in the step's totals elsewhere."""
    frame = rows.filter(placed())
    frame = frame.select(
        "step", "start_us", (pl.col("start_us") + pl.col("dur_us")).alias("end_us"), is_comm.alias("_comm")
    )
    frame = frame.rename({"start_us": "ts_us"})
    if frame.is_empty():
        return pl.DataFrame(schema=BLOCK_SCHEMA)
    # a window spans its rows, so no row needs clipping to it, and its step (no Step Id: none, as -1, which no
    # step number is) keys it: no join of the rows to their windows (`step_blocks`' general case)
    key = pl.col("step").fill_null(-1).alias("_g")
    windows = frame.group_by("step").agg(pl.col("ts_us").min().alias("start_us"), pl.col("end_us").max())
    w = windows.filter(pl.col("end_us") > pl.col("start_us")).select(key, "step", "start_us", "end_us")
    if w.is_empty():
        return pl.DataFrame(schema=BLOCK_SCHEMA)
    spans = frame.filter(pl.col("end_us") > pl.col("ts_us"))  # as clipping drops the rows of no length
    compute, comm = (spans.filter(is_comm).select(key, "ts_us", "end_us") for is_comm in (~pl.col("_comm"), "_comm"))
    return _window_blocks(w, compute, comm, ["step"])  # no totals: no runs needed


def kernel_file_blocks(path: Path, variant: str, rows: Callable[[], pl.DataFrame]) -> tuple[pl.DataFrame, int]:
    """`kernel_blocks` of a kernel file too big for the kernel pass to keep its rows (it streams them), and how
    many rows had no place in time (`unplaced`). ``rows``: the file's usable rows as ``step, start_us, dur_us,
    _comm``, read only when the cache (`cache.cached_table`) does not hold the blocks, so analysing the file
    again skips the pass; ``variant`` names what decides communication (the roles), which the blocks depend on."""
    from profan.sources.common.cache import cached_table

    def build() -> tuple[pl.DataFrame, dict]:
        timed = rows()
        return kernel_blocks(timed, pl.col("_comm")), {"unplaced": unplaced(timed)}

    blocks, facts, _ = cached_table(path, f"step_blocks/{variant}/dur<={limits.active().max_duration_us}", build)
    return blocks, int(facts.get("unplaced", 0))
