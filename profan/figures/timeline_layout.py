"""The timeline of one step laid out before it is drawn (`profan.figures.step_timeline` draws it).

What a lane shows comes from the report's tables: a rank's upper lane is its device time in time (table
``step_blocks``), else its step's totals end to end (``step_cost``, else the step table); its lower lane is its
collectives aligned across ranks. This module picks the step and the ranks that get lanes (all of them up to
``TIMELINE_RANKS``, else the cause's ranks and representatives), sets the common clock (x = 0 at the earliest
step start) and turns every block into ms on that clock with its source row and the cause or finding citing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from profan.figures.style import COMPUTE, IDLE, TRANSFER, WAITING, _citers, _esc_col, _num, _table, step_table
from profan.model.causes import Cause
from profan.model.report import Report
from profan.sources.common.intervals import SOURCE_FILES
from profan.sources.trace.kineto import SOURCE_ANNOTATION, SOURCE_KERNEL

TIMELINE_RANKS = 16  # up to this many ranks, every rank has lanes; beyond, the cause's ranks and representatives
CAUSE_LANES = 8  # lanes kept for the cause's ranks when the ranks are aggregated
LANE_BLOCKS = 300  # collective blocks drawn per lane (the longest); the rest are counted in the note
TIMELINE_LINKS = 200  # collectives joined across lanes (widest arrival spread first)
TIMELINE_WINDOWS = 20  # cause windows outlined (widest first)

# The step's split per rank, one lane segment per part, in this order: step_cost's columns where the report has
# the table (exposed communication split into transfer and waiting), else the step table's.
COST_PARTS = (
    ("compute_us", "Compute", COMPUTE),
    ("exposed_transfer_us", "Exposed transfer", TRANSFER),
    ("exposed_wait_us", "Exposed waiting", WAITING),
    ("exposed_unsplit_us", "Exposed communication", TRANSFER),
    ("idle_us", "Idle", IDLE),
)
TABLE_PARTS = (
    ("computing_us", "Compute", COMPUTE),
    ("comm_not_overlapped_us", "Exposed communication", TRANSFER),
    ("free_us", "Idle", IDLE),
)
# The blocks in time (table step_blocks): its parts, their names on the lane, colours and order.
BLOCK_PARTS = (
    ("compute", "Compute", COMPUTE),
    ("comm", "Exposed communication", TRANSFER),
    ("idle", "Idle", IDLE),
)
SPLIT_SCHEMA = {"rank": pl.Int64, "part": pl.Utf8, "order": pl.Int64, "dur_us": pl.Float64, "file": pl.Utf8}
BLOCK_SCHEMA = {
    "rank": pl.Int64,
    "part": pl.Utf8,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "compute_us": pl.Float64,
    "comm_us": pl.Float64,
    "idle_us": pl.Float64,
    "pieces": pl.Int64,
    "file": pl.Utf8,
}
COMM_SCHEMA = {
    "rank": pl.Int64,
    "name": pl.Utf8,
    "group": pl.Utf8,
    "start_us": pl.Float64,
    "dur_us": pl.Float64,
    "file": pl.Utf8,
    "loc": pl.Utf8,
    "at": pl.Utf8,
}


@dataclass
class Timeline:
    """The laid-out content of the timeline of one step, before it is drawn."""

    step: Any
    why: str  # why this step: "the step of C1", "the slowest step", "step 3"
    cause: Cause | None
    t0: float  # the common clock's µs at x = 0
    clock: str  # what x = 0 is
    ranks: list[int]  # ranks with lanes, in lane order
    tags: dict[int, list[str]]  # why an aggregated rank has lanes (C1, slowest step, …)
    total: int  # ranks in the step
    split: pl.DataFrame  # the lanes' ranks: rank, part, start_ms, dur_ms, when, detail, evidence, owner, pieces
    every: pl.DataFrame  # every rank's collectives of the step, aligned: group, seq, first_us, last_us, wait_us, …
    cited: pl.DataFrame  # (file, loc) of the rows the cause cites
    blocks: pl.DataFrame = field(default_factory=pl.DataFrame)  # the collectives drawn on the lanes, in ms
    windows: list[tuple[float, float]] = field(default_factory=list)  # ms
    dropped: int = 0  # blocks not drawn (LANE_BLOCKS)
    placed: list[int] = field(default_factory=list)  # lane ranks whose upper lane is in time (step_blocks)

    @property
    def aggregated(self) -> bool:
        return self.total > len(self.ranks)

    @property
    def hot(self) -> list[int]:
        return [r for r in (self.cause.ranks if self.cause else ()) if r in self.ranks]


def _split_rows(report: Report, step: Any) -> pl.DataFrame:
    """Per rank of ``step``: its compute, exposed communication and idle time (µs) in lane order, each with the
    row that holds it (a step_trace_time.csv line, or the trace events that bound the step)."""
    frame, parts = _table(report, "step_cost"), COST_PARTS
    if frame.is_empty() or "rank" not in frame.columns:
        frame, parts = step_table(report)[1], TABLE_PARTS
    cols = [col for col, _, _ in parts if col in frame.columns]
    if frame.is_empty() or "rank" not in frame.columns or not cols:
        return pl.DataFrame(schema={**SPLIT_SCHEMA, "loc": pl.Utf8, "at": pl.Utf8})
    if "step" in frame.columns:
        frame = frame.filter(pl.col("step").eq_missing(step))
    line = next((col for col in ("line", "src_line") if col in frame.columns), None)
    first, last = (pl.col(col) if col in frame.columns else pl.lit(None) for col in ("first_event", "last_event"))
    at_line = pl.col(line) if line else pl.lit(None)
    frame = frame.with_columns(
        pl.col("file").cast(pl.Utf8).fill_null("") if "file" in frame.columns else pl.lit("").alias("file"),
        pl.coalesce(at_line, first).cast(pl.Utf8).alias("loc"),
        pl.when(at_line.is_not_null())
        .then(pl.format(":{}", at_line))
        .when(first.is_not_null())
        .then(pl.format(" events {}–{}", first, last))
        .otherwise(pl.lit(""))
        .alias("at"),
    )
    order = pl.DataFrame(
        [(col, name, index) for index, (col, name, _) in enumerate(parts)],
        schema=["col", "part", "order"],
        orient="row",
    )
    frame = frame.with_columns(_num("rank", pl.Int64), *[_num(col, pl.Float64) for col in cols]).filter(
        pl.col("rank").is_not_null()
    )
    long = frame.select("rank", "file", "loc", "at", *cols).unpivot(
        index=["rank", "file", "loc", "at"], on=cols, variable_name="col", value_name="dur_us"
    )
    long = long.join(order, on="col").filter(pl.col("dur_us") > 0)
    return long.select("rank", "part", pl.col("order").cast(pl.Int64), "dur_us", "file", "loc", "at").sort(
        "rank", "order"
    )


def _block_rows(report: Report, step: Any) -> pl.DataFrame:
    """The blocks in time of ``step`` (table step_blocks): per rank, compute, exposed communication and idle where
    they happened, each with the exact time of each part it holds (a block may merge short stretches)."""
    frame = _table(report, "step_blocks")
    if frame.is_empty() or not {"rank", "step", "part", "start_us", "end_us"} <= set(frame.columns):
        return pl.DataFrame(schema=BLOCK_SCHEMA)
    frame = frame.filter(pl.col("step").eq_missing(step))
    cols = [
        _num(c, pl.Float64) if c in frame.columns else pl.lit(None, pl.Float64).alias(c)
        for c in ("start_us", "end_us", "compute_us", "comm_us", "idle_us")
    ]
    out = frame.select(
        _num("rank", pl.Int64),
        pl.col("part").cast(pl.Utf8),
        *cols,
        (_num("pieces", pl.Int64) if "pieces" in frame.columns else pl.lit(1, pl.Int64)).fill_null(1).alias("pieces"),
        (pl.col("source").cast(pl.Utf8) if "source" in frame.columns else pl.lit(None, pl.Utf8)).alias("source"),
    )
    out = out.join(_block_files(report), on=["rank", "source"], how="left").with_columns(pl.col("file").fill_null(""))
    known = pl.col("part").is_in([p for p, _, _ in BLOCK_PARTS])
    return out.filter(known & pl.col("rank").is_not_null() & (pl.col("end_us") >= pl.col("start_us"))).drop("source")


def _block_files(report: Report) -> pl.DataFrame:
    """(rank, source, file): the file each rank's blocks were read from, by their source (`SOURCE_FILES`)."""
    found = []
    for r in report.source.get("ranks") or []:
        files = r.get("files") if isinstance(r, dict) else None
        if isinstance(files, dict) and isinstance(r.get("rank"), int):
            found += [(r["rank"], src, str(files[value])) for src, value in SOURCE_FILES.items() if value in files]
    return pl.DataFrame(found, schema={"rank": pl.Int64, "source": pl.Utf8, "file": pl.Utf8}, orient="row")


def _step_windows(report: Report, step: Any, blocks: pl.DataFrame | None = None) -> pl.DataFrame:
    """Each rank's start and end of ``step`` on the trace's clock: its blocks' span where it has blocks in time,
    else the trace's step window (table trace_steps)."""
    schema = {"rank": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64}
    blocks = _block_rows(report, step) if blocks is None else blocks
    spans = blocks.group_by("rank").agg(pl.col("start_us").min(), pl.col("end_us").max()).select(*schema)
    frame = _table(report, "trace_steps")
    if frame.is_empty() or not {"rank", "step", "start_us", "end_us"} <= set(frame.columns):
        return spans.sort("rank")
    if "scope" in frame.columns:
        frame = frame.filter(pl.col("scope") == "step")
    frame = frame.filter(pl.col("step").eq_missing(step) & pl.col("start_us").is_not_null())
    traced = frame.unique("rank", keep="first", maintain_order=True).select(
        _num("rank", pl.Int64), _num("start_us", pl.Float64), _num("end_us", pl.Float64)
    )
    return pl.concat([spans, traced.filter(~pl.col("rank").is_in(spans.get_column("rank").implode()))]).sort("rank")


def _ops_rows(frame: pl.DataFrame, step: Any) -> pl.DataFrame:
    """communication.json ops (Ascend): start and elapsed time per op, cited by JSON pointer."""
    if "step" in frame.columns:
        frame = frame.filter(pl.col("step").eq_missing(step))
    name = [pl.col(n).cast(pl.Utf8) for n in ("op_name", "op") if n in frame.columns]
    return frame.select(
        _num("rank", pl.Int64),
        pl.coalesce([*name, pl.lit("")]).alias("name"),
        (pl.col("group_hash").cast(pl.Utf8) if "group_hash" in frame.columns else pl.lit(""))
        .fill_null("")
        .alias("group"),
        _num("start_us", pl.Float64),
        (_num("elapse_ms", pl.Float64) * 1000.0).alias("dur_us"),
        pl.col("file").cast(pl.Utf8) if "file" in frame.columns else pl.lit("").alias("file"),
        (pl.col("pointer").cast(pl.Utf8) if "pointer" in frame.columns else pl.lit(None, pl.Utf8)).alias("loc"),
        pl.format(" {}", pl.col("pointer")).alias("at") if "pointer" in frame.columns else pl.lit("").alias("at"),
    )


def _trace_rows(frame: pl.DataFrame, step: Any, windows: pl.DataFrame) -> pl.DataFrame:
    """Collective events of a trace: the device kernels where the trace has them (a host op spans its launch,
    not the transfer), else the annotations; cited by event index."""
    if "source" in frame.columns:
        for src in (SOURCE_KERNEL, SOURCE_ANNOTATION):
            if (frame.get_column("source") == src).any():
                frame = frame.filter(pl.col("source") == src)
                break
    if "step" in frame.columns:
        frame = frame.filter(pl.col("step").eq_missing(step))
    elif not windows.is_empty():
        frame = frame.join(windows, on="rank").filter(pl.col("ts_us").is_between(pl.col("start_us"), pl.col("end_us")))
    else:
        return pl.DataFrame(schema=COMM_SCHEMA)
    group = [pl.col(g).cast(pl.Utf8) for g in ("pg_name", "group") if g in frame.columns]
    idx = pl.col("event_idx").cast(pl.Utf8) if "event_idx" in frame.columns else pl.lit(None, pl.Utf8)
    return frame.select(
        _num("rank", pl.Int64),
        pl.col("name").cast(pl.Utf8).fill_null("") if "name" in frame.columns else pl.lit("").alias("name"),
        pl.coalesce([*group, pl.lit("")]).alias("group"),
        _num("ts_us", pl.Float64).alias("start_us"),
        _num("dur_us", pl.Float64),
        pl.col("file").cast(pl.Utf8) if "file" in frame.columns else pl.lit("").alias("file"),
        idx.alias("loc"),
        pl.format(" event {}", idx).fill_null("").alias("at"),
    )


def _comm_rows(report: Report, step: Any, windows: pl.DataFrame) -> pl.DataFrame:
    """Every rank's collectives of ``step`` on the common clock, aligned across ranks: the k-th op of a group in
    the step (``seq``) is the same collective on every rank (as the straggler analysis aligns them) when its name
    agrees. ``wait_us``: from the rank's arrival to the last rank's — the time it waits for the others."""
    c, t = _table(report, "communication"), _table(report, "trace_communication")
    if not c.is_empty() and {"rank", "start_us", "elapse_ms"} <= set(c.columns):
        rows = _ops_rows(c, step)
    elif not t.is_empty() and {"rank", "ts_us", "dur_us"} <= set(t.columns):
        rows = _trace_rows(t, step, windows)
    else:
        rows = pl.DataFrame(schema=COMM_SCHEMA)
    rows = rows.filter(pl.all_horizontal(pl.col("rank", "start_us", "dur_us").is_not_null()) & (pl.col("dur_us") >= 0))
    rows = rows.with_columns(
        pl.col("start_us").rank("ordinal").over("rank", "group").sub(1).cast(pl.Int64).alias("seq")
    )
    by_start = pl.col("rank").sort_by("start_us")
    keys = (
        rows.group_by("group", "seq")
        .agg(
            pl.len().alias("n"),
            pl.col("name").n_unique().alias("names"),
            pl.col("start_us").min().alias("first_us"),
            pl.col("start_us").max().alias("last_us"),
            by_start.first().alias("first_rank"),
            by_start.last().alias("last_rank"),
        )
        .filter((pl.col("n") > 1) & (pl.col("names") == 1))
        .drop("n", "names")
    )
    rows = rows.join(keys, on=["group", "seq"], how="left")
    wait = (pl.col("last_us") - pl.col("start_us")).clip(0.0, None)
    return rows.with_columns(
        pl.min_horizontal(wait, pl.col("dur_us")).fill_null(0.0).alias("wait_us"),
        pl.col("first_us").is_not_null().alias("aligned"),
    )


def focus(report: Report) -> Cause | None:
    """The cause the timeline shows: the first that names a place — some ranks, not every one (shading every lane
    says nothing, and a cause of every rank, exposed transfer say, has no rank to point at) — else the first."""
    every = {r.get("rank") for r in report.source.get("ranks", [])} if isinstance(report.source, dict) else set()
    for cause in report.causes:
        if cause.ranks and set(cause.ranks) < every:
            return cause
    return report.causes[0] if report.causes else None


def _step_choices(report: Report, step: Any) -> list[tuple[Any, str]]:
    """The steps to draw, best first: the one asked for; else the step of the cause shown (`focus`), then the
    slowest step (the cause's step may be one the step tables lack)."""
    if step is not None:
        return [(step, f"step {step}")]
    out = []
    cause = focus(report)
    if cause is not None and cause.steps:
        out.append((cause.steps[0], f"the step of {cause.id}"))
    frame = _split_source(report)
    cols = [c for c in ("step_us", *(c for c, _, _ in (*COST_PARTS, *TABLE_PARTS))) if c in frame.columns]
    if "step" in frame.columns and cols:
        slowest = frame.filter(pl.col("step").is_not_null()).sort(cols[0], descending=True, nulls_last=True)
        if slowest.height:
            out.append((slowest.get_column("step")[0], "the slowest step"))
    return [*out, (None, "the only step")]


def _split_source(report: Report) -> pl.DataFrame:
    frame = _table(report, "step_cost")
    return frame if not frame.is_empty() and "rank" in frame.columns else step_table(report)[1]


def _lane_ranks(
    ranks: list[int], totals: pl.DataFrame, cause: Cause | None, max_ranks: int
) -> tuple[list[int], dict[int, list[str]]]:
    """Every rank up to ``max_ranks``; beyond, the cause's ranks (at most CAUSE_LANES), the rank it compares them
    with, and the ranks with the shortest, median and longest step — each tagged with why it is shown."""
    tags: dict[int, list[str]] = {}
    hot = [r for r in (cause.ranks if cause else ()) if r in ranks]
    for r in hot:
        tags.setdefault(r, []).append(cause.id)  # type: ignore[union-attr]
    if len(ranks) <= max_ranks:
        return ranks, tags
    chosen = hot[:CAUSE_LANES]
    typical = cause.metrics.get("typical_rank") if cause else None
    if isinstance(typical, int) and typical in ranks:
        chosen.append(typical)
        tags.setdefault(typical, []).append("typical")
    order = totals.sort("total", "rank").get_column("rank").to_list()
    if order:
        for r, why in (
            (order[0], "shortest step"),
            (order[len(order) // 2], "median step"),
            (order[-1], "longest step"),
        ):
            chosen.append(r)
            tags.setdefault(r, []).append(why)
    return sorted(dict.fromkeys(chosen)), tags


def _first_with_rows(report: Report, step: Any) -> tuple[Any, str, pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """(step, why, split rows, blocks in time, collectives) of the first step choice the report has rows for."""
    for choice, why in _step_choices(report, step):
        split = _split_rows(report, choice)
        placed = _block_rows(report, choice)
        comm = _comm_rows(report, choice, _step_windows(report, choice, placed))
        if not (split.is_empty() and placed.is_empty() and comm.is_empty()):
            return choice, why, split, placed, comm
    if step is not None:
        raise ValueError(f"step {step} has no step or communication rows in this report")
    return None


def lay_out(report: Report, step: Any, max_ranks: int) -> Timeline | None:
    """The step's content laid out before it is drawn: which ranks get lanes, the common clock (x = 0 at the
    earliest step start, so blocks in time and collectives line up), the upper lanes and the collectives."""
    cause = focus(report)
    found = _first_with_rows(report, step)
    if found is None:
        return None
    step, why, split, placed, comm = found
    windows = _step_windows(report, step, placed)
    all_ranks = sorted(
        set(split.get_column("rank").to_list())
        | set(placed.get_column("rank").to_list())
        | set(comm.get_column("rank").to_list())
    )
    totals = pl.concat(
        [
            split.group_by("rank").agg(pl.col("dur_us").sum().alias("total")),
            windows.select("rank", (pl.col("end_us") - pl.col("start_us")).alias("total")),
        ]
    ).unique("rank", keep="first", maintain_order=True)
    ranks, tags = _lane_ranks(all_ranks, totals, cause, max_ranks)
    starts = [s for s in (windows.get_column("start_us").min(), comm.get_column("start_us").min()) if s is not None]
    t0 = float(starts[0]) if starts else 0.0
    # a row cited by the cause shown opens that cause; other rows the first cause or finding citing them
    owners = _citers([*([cause] if cause else []), *report.causes, *report.findings])
    cited = pl.DataFrame(
        sorted(_citers([cause]) if cause else []), schema={"file": pl.Utf8, "loc": pl.Utf8}, orient="row"
    )
    lanes = _lane_split(split, placed.filter(pl.col("rank").is_in(ranks)), ranks, windows, t0, owners)
    tl = Timeline(step, why, cause, t0, _clock(step, windows, comm), ranks, tags, len(all_ranks), lanes, comm, cited)
    tl.placed = sorted(set(placed.get_column("rank").to_list()) & set(ranks))
    tl.windows = _cause_windows(tl)
    tl.blocks, tl.dropped = _lane_blocks(tl, owners)
    return tl


def _clock(step: Any, windows: pl.DataFrame, comm: pl.DataFrame) -> str:
    """What x = 0 is: the step's start on its earliest rank, else the step's first collective."""
    which = f"step {step}" if step is not None else "the capture"
    if not windows.is_empty():
        return f"ms from the start of {which} on its earliest rank"
    if not comm.is_empty():
        return f"ms from the first collective of {which} (the data has no step start)"
    return f"ms into {which}"


def _owner_col(frame: pl.DataFrame, owners: dict[tuple[str, str], str]) -> pl.DataFrame:
    """``owner``: the cause or finding citing each row's (file, loc), '' when none does."""
    keys = frame.select("file", "loc").unique().drop_nulls()
    found = [(f, loc, owners[(f, loc)]) for f, loc in keys.iter_rows() if (f, loc) in owners]
    table = pl.DataFrame(found, schema={"file": pl.Utf8, "loc": pl.Utf8, "owner": pl.Utf8}, orient="row")
    return frame.join(table, on=["file", "loc"], how="left").with_columns(pl.col("owner").fill_null(""))


def _lane_split(
    split: pl.DataFrame, placed: pl.DataFrame, ranks: list[int], windows: pl.DataFrame, t0: float, owners: dict
) -> pl.DataFrame:
    """The upper lanes: each rank's blocks in time where the report has them, else its step totals laid end to
    end. Either way a block leads to the rank's step row (step_trace_time.csv line, or the trace events that
    bound the step) and to the cause or finding citing it."""
    rows = _owner_col(split.filter(pl.col("rank").is_in(ranks)), owners)
    rows = rows.with_columns(pl.concat_str(_esc_col(rows, "file"), pl.col("at")).alias("evidence"))
    step_row = rows.unique("rank", keep="first", maintain_order=True).select("rank", "evidence", "owner")
    totals = _place_totals(rows.filter(~pl.col("rank").is_in(placed.get_column("rank").implode())), windows, t0)
    return pl.concat([_place_blocks(placed, step_row, t0), totals], how="vertical_relaxed").sort("rank", "start_ms")


def _place_blocks(placed: pl.DataFrame, step_row: pl.DataFrame, t0: float) -> pl.DataFrame:
    """Blocks in time, in ms on the common clock. A block that merges short stretches is drawn as its exact
    compute, exposed communication and idle time side by side within its span (paler: their order inside it is
    not kept), so each part's bars on a lane add up to exactly the rank's time in that part."""
    names = {p: name for p, name, _ in BLOCK_PARTS}
    amounts = [f"{p}_us" for p, _, _ in BLOCK_PARTS]
    frame = placed.with_row_index("_b").join(step_row, on="rank", how="left")
    frame = frame.with_columns(
        pl.col("evidence", "owner").fill_null(""),
        pl.format("{} ms from {} ms", _ms3(pl.col("end_us") - pl.col("start_us")), _ms3(pl.col("start_us") - t0)).alias(
            "_span"
        ),
        pl.concat_str(pl.lit("in time from "), _esc_col(frame, "file")).alias("_from"),
    )
    long = frame.drop("part").unpivot(
        index=["_b", "rank", "start_us", "pieces", "evidence", "owner", "_from", "_span"],
        on=amounts,
        variable_name="part",
        value_name="us",
    )
    order = {f"{p}_us": index for index, p in enumerate(names)}
    long = long.with_columns(pl.col("part").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
    long = long.with_columns(pl.col("part").str.strip_suffix("_us").replace_strict(names, return_dtype=pl.Utf8))
    long = (
        long.filter(pl.col("us") > 0)
        .sort("_b", "_o")
        .with_columns((pl.col("us").cum_sum().over("_b") - pl.col("us")).alias("_before"))
    )
    merged = pl.format("{} ms of a block of {} that merges {} short stretches", _ms3(pl.col("us")), "_span", "pieces")
    return long.select(
        "rank",
        "part",
        ((pl.col("start_us") + pl.col("_before") - t0) / 1000.0).alias("start_ms"),
        (pl.col("us") / 1000.0).alias("dur_ms"),
        pl.when(pl.col("pieces") > 1).then(merged).otherwise(pl.col("_span")).alias("when"),
        pl.col("_from").alias("detail"),
        "evidence",
        "owner",
        "pieces",
        pl.col("_b").cast(pl.Int64).alias("block_id"),
    )


def _ms3(expr: pl.Expr) -> pl.Expr:
    return (expr / 1000.0).round(3)


def _place_totals(rows: pl.DataFrame, windows: pl.DataFrame, t0: float) -> pl.DataFrame:
    """Step totals laid end to end from the rank's step start (or from x = 0 where nothing gives it): for a rank
    whose data places nothing in time (no trace, no timed kernel rows)."""
    rows = rows.join(windows.select("rank", "start_us"), on="rank", how="left")
    origin = ((pl.col("start_us") - t0) / 1000.0).fill_null(0.0)
    ends = pl.col("dur_us").cum_sum().over("rank", order_by="order") / 1000.0
    rows = rows.with_columns(
        (origin + ends - pl.col("dur_us") / 1000.0).alias("start_ms"), (pl.col("dur_us") / 1000.0).alias("dur_ms")
    )
    return rows.select(
        "rank",
        "part",
        "start_ms",
        "dur_ms",
        pl.format("{} ms in the step", pl.col("dur_ms").round(3)).alias("when"),
        pl.lit("a total, not placed in time: this rank has no trace or timed kernel rows").alias("detail"),
        "evidence",
        "owner",
        pl.lit(1, pl.Int64).alias("pieces"),
        pl.lit(None, pl.Int64).alias("block_id"),
    )


def _cause_windows(tl: Timeline) -> list[tuple[float, float]]:
    """The time the cause's cited collectives cost: from the first rank's arrival to the last rank's at each one
    the cause cites a row of (the others wait there), or the cited op itself when it has no peer in the data."""
    if tl.cited.is_empty() or tl.every.is_empty():
        return []
    hit = tl.every.join(tl.cited, on=["file", "loc"])
    x0 = pl.when(pl.col("aligned") & (pl.col("last_us") > pl.col("first_us"))).then("first_us").otherwise("start_us")
    x1 = (
        pl.when(pl.col("aligned") & (pl.col("last_us") > pl.col("first_us")))
        .then("last_us")
        .otherwise(pl.col("start_us") + pl.col("dur_us"))
    )
    spans = hit.select(((x0 - tl.t0) / 1000.0).alias("x0"), ((x1 - tl.t0) / 1000.0).alias("x1")).sort("x0")
    # overlapping windows (two p2p pairs of one stage, say) are one window
    fresh = pl.col("x0") > pl.col("x1").cum_max().shift(1).fill_null(float("-inf"))
    spans = spans.with_columns(fresh.cum_sum().alias("w")).group_by("w").agg(pl.col("x0").min(), pl.col("x1").max())
    spans = spans.sort(pl.col("x1") - pl.col("x0"), descending=True).head(TIMELINE_WINDOWS).sort("x0")
    return [(round(a, 6), round(b, 6)) for a, b in spans.select("x0", "x1").iter_rows()]


def _lane_blocks(tl: Timeline, owners: dict) -> tuple[pl.DataFrame, int]:
    """The collectives drawn on the lanes (the LANE_BLOCKS longest per rank), in ms, with their hover text."""
    frame = tl.every.filter(pl.col("rank").is_in(tl.ranks))
    kept = frame.sort("dur_us", descending=True).filter(pl.int_range(pl.len()).over("rank") < LANE_BLOCKS)
    kept = _owner_col(kept, owners).with_columns(
        ((pl.col("start_us") - tl.t0) / 1000.0).alias("start_ms"),
        (pl.col("dur_us") / 1000.0).alias("dur_ms"),
        (pl.col("wait_us") / 1000.0).alias("wait_ms"),
    )
    kept = kept.join(
        tl.cited.with_columns(pl.lit(True).alias("by_cause")), on=["file", "loc"], how="left"
    ).with_columns(pl.col("by_cause").fill_null(False))
    kept = kept.with_columns(
        _esc_col(kept, "name").alias("label"),
        pl.concat_str(_esc_col(kept, "file"), _esc_col(kept, "at")).alias("evidence"),
    )
    return kept.sort("rank", "start_us"), frame.height - kept.height
