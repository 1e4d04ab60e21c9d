"""Per-rank map for cross-rank analyses: the rank's collective ops in order, and what ran before each of them.

Why here and not in an analysis: it needs the kernel rows with their timestamps, which only the per-rank pass has.
The result is small — one row per communication op, and per op the distinct kernels of its *pre-collective window*
(from the end of the rank's previous communication op to the start of this one) — so the straggler analysis can
ask "what did the late rank do instead?" without any file access.

Source-neutral tables (the Ascend adapter is here; a chrome-trace adapter feeds the same columns with event
indexes as locators):

``collectives``: cid (rank-local order), step, kind ("collective" | "p2p"), group, seq (k-th op of the group in the
step), name, start_us, dur_us, wait_us, win_start_us (start of the pre-collective window), file, loc_kind
("lines" | "events" | "pointers"), loc (CSV line / event index, else null), pointer (JSON pointer, else null),
kfile / kline (the op's own row in the kernel file, when both sources exist).

``windows``: cid, op, name, type, core, bucket, rule_id, count, time_us, locs (largest rows first), loc_file,
loc_kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from profan.ranks.kernel_pass import is_comm_row
from profan.rulepack.classify import classify, rule_fields
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text import kernels as ascend_kernels
from profan.sources.common.intervals import covered_time, union_runs
from profan.sources.common.rowframe import stack
from profan.sources.trace import kineto
from profan.sources.trace.kineto import KinetoTrace

WINDOW_LOCS = 5  # locators kept per (window, kernel)

COLL_SCHEMA = {
    "cid": pl.Int64,
    "step": pl.Int64,
    "kind": pl.Utf8,
    "group": pl.Utf8,
    "seq": pl.Int64,
    "name": pl.Utf8,
    "start_us": pl.Float64,
    "dur_us": pl.Float64,
    "wait_us": pl.Float64,
    "win_start_us": pl.Float64,
    "file": pl.Utf8,
    "loc_kind": pl.Utf8,
    "loc": pl.Int64,
    "pointer": pl.Utf8,
    "kfile": pl.Utf8,
    "kline": pl.Int64,
    # the longest stretch without device work in the window, and the kernel rows around it
    "gap_us": pl.Float64,
    "gap_prev_loc": pl.Int64,
    "gap_loc": pl.Int64,
    # of dur_us, the time no compute ran on the rank meanwhile (Kineto traces; null where not placed in time)
    "exposed_us": pl.Float64,
}
GAP_COLS = ("gap_us", "gap_prev_loc", "gap_loc")
LATER_COLS = (*GAP_COLS, "exposed_us")  # filled after `_finish`, where the source has them


def _finish(colls: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Order ops, number them, derive seq within (step, group) and each op's window start. ``by``: the key of
    each rank in a batch of ranks (`ascend_collectives`); everything is per rank."""
    colls = colls.sort([*by, "start_us"], maintain_order=True)
    cid = pl.int_range(pl.len(), dtype=pl.Int64).over(by) if by else pl.int_range(pl.len(), dtype=pl.Int64)
    end = (pl.col("start_us") + pl.col("dur_us")).cum_max().shift(1)
    colls = colls.with_columns(cid.alias("cid")).with_columns(
        pl.col("start_us").rank("ordinal").over(*by, "step", "group").sub(1).cast(pl.Int64).alias("seq"),
        (end.over(by) if by else end).alias("win_start_us"),
    )
    colls = colls.with_columns(*[pl.lit(None, COLL_SCHEMA[c]).alias(c) for c in LATER_COLS if c not in colls.columns])
    return colls.select(*by, *COLL_SCHEMA)


WINDOW_KERNELS = 16  # distinct kernels kept per window (largest by time); the rest fold into one row per bucket
BATCH_ROWS = 250_000  # kernel rows per streamed batch: memory is bounded by the batch, not the file


def _next_op(batch: pl.DataFrame, colls: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    """``batch`` with ``cid``: the first op starting at or after each kernel (a binary search over the op starts
    — no join of the big table). Over a batch of ranks (``by``; the rows grouped by rank, as
    `_from_ops` stacks them) each rank's kernels are searched in that rank's ops."""

    def search(rows: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
        cid = pl.lit(ops["start_us"]).search_sorted(pl.col("start_us"), side="left").cast(pl.Int64)
        return rows.with_columns(cid.alias("cid"))

    if not by or batch.is_empty():
        return search(batch, colls)
    ops = colls.partition_by(by, as_dict=True, maintain_order=True)
    empty = colls.clear()
    return pl.concat(
        [
            search(rows, ops.get(key, empty))
            for key, rows in batch.partition_by(by, as_dict=True, maintain_order=True).items()
        ]
    )


def _largest(loc: str, dur: str) -> list[pl.Expr]:
    """``locs`` and ``loc_durs``: the WINDOW_LOCS longest rows of a group and their durations, longest first,
    ties by the earlier row (the same input cites the same rows), the two lists in the same order — `_merge_parts`
    pairs them up again."""
    order = pl.col(loc).sort_by([dur, loc], descending=[True, False], nulls_last=True)
    return [
        order.head(WINDOW_LOCS).alias("locs"),
        pl.col(dur).sort_by([dur, loc], descending=[True, False], nulls_last=True).head(WINDOW_LOCS).alias("loc_durs"),
    ]


def _window_part(
    batch: pl.DataFrame, colls: pl.DataFrame, keys: list[str], seen: pl.DataFrame | None, by: tuple[str, ...] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (window, kernel) partial aggregate of one batch, and per window its longest idle gap and last kernel.

    Each kernel goes to the first op starting at or after it (`_next_op`), and only if it started after the
    previous op ended. A gap is a kernel's start minus the latest end before it in the window (the window start
    for its first kernel); windows already ``seen`` in an earlier batch (their keys) skip their first row here,
    whose predecessor is in that batch."""
    w = [*by, "cid"]
    frame = _next_op(batch, colls, by).join(
        colls.select(*w, pl.col("win_start_us").alias("_ws")), on=w, maintain_order="left"
    )
    frame = frame.filter(pl.col("_ws").is_null() | (pl.col("start_us") >= pl.col("_ws")))
    agg = frame.group_by([*w, *keys]).agg(
        pl.len().cast(pl.Int64).alias("count"), pl.col("dur_us").sum().alias("time_us"), *_largest("loc", "dur_us")
    )
    frame = frame.sort(*w, "start_us").with_columns((pl.col("start_us") + pl.col("dur_us")).alias("_end"))
    prev_end = pl.col("_end").cum_max().shift(1).over(w)
    first_here = (
        pl.struct(w).is_in(seen.select(pl.struct(w)).to_series().implode()) if seen is not None else pl.lit(False)
    )
    frame = frame.with_columns(
        pl.when(prev_end.is_not_null())
        .then(pl.col("start_us") - prev_end)
        .when(~first_here)
        .then(pl.col("start_us") - pl.col("_ws"))
        .alias("_gap"),
        pl.col("loc").shift(1).over(w).alias("_prev"),
    )
    gaps = frame.group_by(w).agg(
        pl.col("_gap").max().alias("gap_us"),
        pl.col("_prev").sort_by("_gap").last().alias("gap_prev_loc"),
        pl.col("loc").sort_by("_gap").last().alias("gap_loc"),
        pl.col("_end").max().alias("last_end"),
        pl.col("loc").sort_by("_end").last().alias("last_loc"),
    )
    return agg, gaps


def _merge_gaps(gaps: list[pl.DataFrame], by: tuple[str, ...] = ()) -> pl.DataFrame:
    frame = pl.concat(gaps)
    return frame.group_by(*by, "cid").agg(
        pl.col("gap_us").max(),
        pl.col("gap_prev_loc").sort_by("gap_us", nulls_last=False).last(),
        pl.col("gap_loc").sort_by("gap_us", nulls_last=False).last(),
        pl.col("last_end").max(),
        pl.col("last_loc").sort_by("last_end").last(),
    )


def _with_gaps(colls: pl.DataFrame, gaps: pl.DataFrame | None, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Longest idle stretch per window: between two kernels, or after the last kernel up to the op itself."""
    if gaps is None or gaps.is_empty():
        return colls
    frame = colls.drop(*GAP_COLS).join(gaps, on=[*by, "cid"], how="left")
    trailing = pl.col("start_us") - pl.col("last_end")
    use_trailing = trailing > pl.col("gap_us").fill_null(float("-inf"))
    frame = frame.with_columns(
        pl.when(use_trailing).then(trailing).otherwise(pl.col("gap_us")).alias("gap_us"),
        pl.when(use_trailing).then(pl.col("last_loc")).otherwise(pl.col("gap_prev_loc")).alias("gap_prev_loc"),
        pl.when(use_trailing).then(pl.col("kline")).otherwise(pl.col("gap_loc")).alias("gap_loc"),
    )
    return frame.select(*by, *COLL_SCHEMA)


def _merge_parts(parts: list[pl.DataFrame], keys: list[str], by: tuple[str, ...] = ()) -> pl.DataFrame:
    if len(parts) == 1:
        return parts[0]
    allp = pl.concat(parts)
    g = [*by, "cid", *keys]
    sums = allp.group_by(g).agg(pl.col("count").sum(), pl.col("time_us").sum())
    tops = (
        allp.select(*g, "locs", "loc_durs")
        .explode(["locs", "loc_durs"])
        .drop_nulls(["locs"])
        .group_by(g)
        .agg(*_largest("locs", "loc_durs"))
    )
    return sums.join(tops, on=g, how="left", nulls_equal=True)


def _cap(win: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Keep the WINDOW_KERNELS largest kernels of each window; fold the rest into '(other)' per bucket, so long
    profiles (thousands of windows) stay small while window and bucket totals stay exact."""
    # rank by time, ties by name: which kernels stay named must not depend on the grouping's row order
    win = win.sort(
        [*by, "cid", "time_us", "name"], descending=[*[False] * len(by), False, True, False], nulls_last=True
    ).with_columns(pl.int_range(1, pl.len() + 1).over(*by, "cid").alias("_r"))
    keep = win.filter(pl.col("_r") <= WINDOW_KERNELS).drop("_r")
    rest = win.filter(pl.col("_r") > WINDOW_KERNELS)
    if rest.is_empty():
        return keep
    folded = rest.group_by(*by, "cid", "bucket").agg(
        pl.col("count").sum(),
        pl.col("time_us").sum(),
        pl.col("locs").list.explode(keep_nulls=False, empty_as_null=False).head(WINDOW_LOCS),
    )
    folded = folded.with_columns(
        pl.lit("(other)").alias("op"),
        pl.lit("(other kernels)").alias("name"),
        pl.lit(None, pl.Utf8).alias("type"),
        pl.lit(None, pl.Utf8).alias("core"),
        pl.lit(None, pl.Utf8).alias("rule_id"),
    )
    return pl.concat([keep, folded], how="diagonal_relaxed")


def _stream_windows(
    src: pl.LazyFrame | list[pl.DataFrame],
    colls: pl.DataFrame,
    keys: list[str],
    by: tuple[str, ...] = (),
    also: pl.Expr | None = None,
) -> tuple[pl.DataFrame, float | pl.DataFrame | None, pl.DataFrame | None, pl.DataFrame | None]:
    """One pass over the kernel rows, a batch at a time: (window parts merged, first kernel start — per rank
    (``by``) over a batch of ranks —, rows matching ``also`` — e.g. the HCCL rows —, longest gap per window).
    ``src``: batches already in memory (no streaming engine run, whose set-up a cluster of small ranks would pay
    once per rank), or a LazyFrame streamed in batches of `BATCH_ROWS`."""
    parts: list[pl.DataFrame] = []
    gaps: list[pl.DataFrame] = []
    extra: list[pl.DataFrame] = []
    firsts: list[pl.DataFrame] = []
    seen: list[pl.DataFrame] = []

    def take(batch: pl.DataFrame) -> None:
        batch = batch.with_columns(pl.col(pl.Categorical).cast(pl.String))  # rows a kernel pass kept (`timed_rows`)
        comp = batch.filter(~also) if also is not None else batch
        if also is not None:
            extra.append(batch.filter(also))
        if comp.height:
            start = pl.col("start_us").min()
            firsts.append(comp.group_by(by).agg(start) if by else comp.select(start))
            part, gap = _window_part(comp, colls, keys, pl.concat(seen) if seen else None, by)
            parts.append(part)
            gaps.append(gap)
            seen.append(gap.select(*by, "cid"))
        if len(parts) > 8:
            parts[:] = [_merge_parts(parts, keys, by)]
            gaps[:] = [_merge_gaps(gaps, by)]

    if isinstance(src, pl.LazyFrame):
        src.sink_batches(take, chunk_size=BATCH_ROWS, maintain_order=True, engine="streaming")
    else:
        for batch in src:
            take(batch)
    win = _merge_parts(parts, keys, by) if parts else pl.DataFrame()
    return (win, _first_start(firsts, by), pl.concat(extra) if extra else None, _merge_gaps(gaps, by) if gaps else None)


def _first_start(firsts: list[pl.DataFrame], by: tuple[str, ...]) -> float | pl.DataFrame | None:
    """The earliest kernel start of the batches' minima: one value, or per rank (``by``) as a table ``first``."""
    if not firsts:
        return None
    frame = pl.concat(firsts)
    return frame.group_by(by).agg(pl.col("start_us").min().alias("first")) if by else frame["start_us"].min()


def _classify(win: pl.DataFrame, rules: list, groups: pl.DataFrame | None) -> pl.DataFrame:
    """Bucket and rule of each window kernel: taken from the rank's classified kernel groups when the rules read
    only the columns a window keeps (the same kernel gets the same verdict, without running the rule chain
    again), classified afresh for any kernel the groups lack."""
    fields = rule_fields(rules)
    if (
        groups is None
        or "bucket" not in groups.columns
        or not fields
        or not set(fields) <= {"op", "name", "type", "core"}
    ):
        return classify(win, rules)
    known = groups.select(*fields, "bucket", "rule_id").unique(fields, keep="first", maintain_order=True)
    win = win.join(known, on=fields, how="left", nulls_equal=True, maintain_order="left")
    missing = win["bucket"].is_null()
    if not missing.any():
        return win
    return pl.concat(
        [win.filter(~missing), classify(win.filter(missing).drop("bucket", "rule_id"), rules)], how="diagonal_relaxed"
    )


@dataclass(frozen=True)
class WindowSource:
    """How a rank's windows are classified and where their rows point: the rule pack and which of its rule sets
    (`RulePack.rules_for`: "ascend", "gpu", "cpu"), the file the locators index — one file, or over a batch of
    ranks an expression giving each rank's — and the locators' kind ("lines" | "events"), and the rank's
    classified kernel groups when it has them (their verdicts reused, `_classify`)."""

    pack: RulePack
    rules_for: str
    loc_file: str | pl.Expr
    loc_kind: str
    groups: pl.DataFrame | None = None


def _finish_windows(
    win: pl.DataFrame,
    colls: pl.DataFrame,
    first: float | pl.DataFrame | None,
    source: WindowSource,
    by: tuple[str, ...] = (),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Classify and cap the windows; the first op's window starts at the rank's first kernel. Over a batch of
    ranks (``by``): ``first`` holds each rank's first start (ranks with windows only), ``source.loc_file`` each
    rank's file as an expression."""
    if isinstance(first, pl.DataFrame):
        colls = (
            colls.join(first.rename({"first": "_first"}), on=list(by), how="left", maintain_order="left")
            .with_columns(pl.col("win_start_us").fill_null(pl.col("_first")))
            .drop("_first")
        )
    elif first is not None:
        colls = colls.with_columns(pl.col("win_start_us").fill_null(first))
    if "bucket" not in win.columns:  # not yet classified by the source
        win = _classify(win, source.pack.rules_for(source.rules_for), source.groups)
    file = source.loc_file if isinstance(source.loc_file, pl.Expr) else pl.lit(source.loc_file)
    win = _cap(win.drop("loc_durs", strict=False), by).with_columns(
        pl.col("count").cast(pl.Int64), file.alias("loc_file"), pl.lit(source.loc_kind).alias("loc_kind")
    )
    return win.sort(*by, "cid", "time_us", descending=[*[False] * len(by), False, True]), colls


def build_windows(
    kernels: pl.DataFrame | pl.LazyFrame, colls: pl.DataFrame, source: WindowSource
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Assign compute kernels to the next communication op's window; aggregate per (window, kernel).

    ``kernels``: start_us, dur_us, op, name, type, core, loc (and bucket, rule_id when already classified).
    Returns (windows, collectives with the first window's start filled from the first kernel).
    """
    if colls.is_empty():
        return pl.DataFrame(), colls
    names = kernels.collect_schema().names()
    keys = ["op", "name", "type", "core", *(["bucket", "rule_id"] if "bucket" in names else [])]
    src = kernels if isinstance(kernels, pl.LazyFrame) else list(kernels.iter_slices(BATCH_ROWS))
    win, first, _, gaps = _stream_windows(src, colls, keys)
    if win.is_empty():
        return pl.DataFrame(), colls
    windows, colls = _finish_windows(win, colls, first, source)
    return windows, _with_gaps(colls, gaps)


def _hccl_rows_from_groups(groups: pl.DataFrame | None, roles: Roles | None = None) -> pl.DataFrame | None:
    """The HCCL rows, taken from the rank's kernel groups when every op name occurs once per step (HCCL names
    carry a sequence number, so they do): saves a pass over the kernel file."""
    if groups is None or groups.is_empty() or "first_start_us" not in groups.columns:
        return None
    frame = groups.filter((roles or default_roles()).is_comm())
    if frame.is_empty() or (frame["count"] > 1).any():
        return None
    return frame.select(
        "step",
        "name",
        pl.col("first_start_us").alias("start_us"),
        pl.col("time_us").alias("dur_us"),
        pl.col("lines").list.first().alias("loc"),
    )


def _colls_from_ops(ops: pl.DataFrame, file: pl.Expr, kfile: pl.Expr, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """The collectives of communication.json's ops (`ascend_comm.tables`) with a start, numbered (`_finish`);
    ``file``/``kfile``: the communication and kernel file each op is cited in."""
    return _finish(
        ops.filter(pl.col("start_us").is_not_null()).select(
            *by,
            "step",
            "kind",
            pl.coalesce("group_hash", pl.lit("?")).alias("group"),
            pl.col("op_name").alias("name"),
            "start_us",
            (pl.col("elapse_ms") * 1000).alias("dur_us"),
            (pl.col("wait_ms") * 1000).alias("wait_us"),
            file.alias("file"),
            pl.lit("pointers").alias("loc_kind"),
            pl.lit(None, pl.Int64).alias("loc"),
            "pointer",
            kfile.alias("kfile"),
            pl.lit(None, pl.Int64).alias("kline"),
        ),
        by,
    )


@dataclass
class AscendRank:
    """What the collectives of one Ascend rank are read from: communication.json's ops (`ascend_comm.tables`),
    the kernel file — its timed rows when the kernel pass kept them (`KernelPass.timed`), else read again —,
    both files as the report cites them, and the classified kernel groups (their verdicts are reused for the
    windows, their HCCL rows can stand for a pass over the file)."""

    comm_ops: pl.DataFrame | None
    comm_file: str | None
    kernel_path: Path | None
    kernel_file: str | None
    n_records: int | None  # the kernel file's records, to map them to physical lines when read again
    groups: pl.DataFrame | None
    timed: pl.DataFrame | None


def ascend_collectives(
    ranks: list[AscendRank], pack: RulePack
) -> list[tuple[pl.DataFrame | None, pl.DataFrame | None]]:
    """(collectives, windows) of each Ascend rank, from communication.json and/or kernel_details.csv.

    Ranks whose ops come from communication.json are computed as one table keyed by rank (`_from_ops`): each
    step is one query for them all instead of one per rank, since a polars query's fixed cost is most of the
    work on a small rank. Ranks without it take their ops from the kernel file's HCCL rows (`_from_hccl_rows`)."""
    out: list[tuple[pl.DataFrame | None, pl.DataFrame | None]] = [(None, None)] * len(ranks)
    for part in _parts(ranks):
        for index, got in zip(part, _from_ops([ranks[index] for index in part], pack), strict=True):
            out[index] = got
    for index, rank in enumerate(ranks):
        if not _has_ops(rank):
            out[index] = _from_hccl_rows(rank, pack)
    return out


def _has_ops(r: AscendRank) -> bool:
    return r.comm_ops is not None and not r.comm_ops.is_empty()


def _parts(ranks: list[AscendRank]) -> list[list[int]]:
    """The ranks with communication.json's ops, in the parts computed as one table each: the ranks whose kernel
    rows are in memory and few enough to be one batch of rows (or that have no kernel file), by column types —
    one table would need casts that a rank alone does not —, and each other rank on its own, its rows in
    batches of `BATCH_ROWS`. So a rank's rows are cut the same way whatever other ranks are read with it."""
    same: dict[object, list[int]] = {}
    for index, rank in enumerate(ranks):
        if not _has_ops(rank):
            continue
        small = rank.kernel_path is None or (rank.timed is not None and rank.timed.height <= BATCH_ROWS)
        types = (tuple(rank.comm_ops.schema.items()), rank.timed is not None and tuple(rank.timed.schema.items()))
        same.setdefault(types if small else index, []).append(index)
    return list(same.values())


def _from_ops(ranks: list[AscendRank], pack: RulePack) -> list[tuple[pl.DataFrame, pl.DataFrame | None]]:
    """Collectives and windows of ranks whose ops come from communication.json, as one table keyed by rank
    (``_f``). One pass over the kernel rows gives both the HCCL rows (each op's own line, ``kline``) and the
    windows; a rank without kernel rows has its ops alone."""
    by, f = ("_f",), pl.col("_f")
    ops = stack([r.comm_ops for r in ranks], {"_f": list(range(len(ranks)))}, how="vertical")
    kfile = f.replace_strict({index: r.kernel_file for index, r in enumerate(ranks)}, return_dtype=pl.Utf8)
    colls = _colls_from_ops(
        ops, f.replace_strict({index: r.comm_file for index, r in enumerate(ranks)}, return_dtype=pl.Utf8), kfile, by
    )
    rows = _rows_of(ranks)
    windows = None
    if rows is not None:
        comm = is_comm_row(rows, pack.roles)
        win, first, krows, gaps = _stream_windows(rows, colls, ["op", "name", "type", "core"], by, comm)
        if krows is not None:  # ranks without HCCL rows keep kline null
            lines = krows.group_by(*by, "step", "name").agg(pl.col("loc").min().alias("kline"))
            colls = (
                colls.drop("kline")
                .join(lines, on=[*by, "step", "name"], how="left", nulls_equal=True, maintain_order="left")
                .select(*by, *COLL_SCHEMA)
            )
        if not win.is_empty():  # the first window starts at the rank's first kernel: ranks with windows only
            first = first.join(win.select(by).unique(), on=list(by))
            groups = [rank.groups for rank in ranks if rank.groups is not None]  # a verdict depends on the kernel alone
            source = WindowSource(
                pack, "ascend", kfile, "lines", pl.concat(groups, how="diagonal_relaxed") if groups else None
            )
            windows, colls = _finish_windows(win, colls, first, source, by)
            colls = _with_gaps(colls, gaps, by)
    out_c = colls.partition_by("_f", as_dict=True, include_key=False, maintain_order=True)
    out_w = (
        windows.partition_by("_f", as_dict=True, include_key=False, maintain_order=True) if windows is not None else {}
    )
    empty = colls.clear().drop("_f")
    return [(out_c.get((index,), empty), out_w.get((index,))) for index in range(len(ranks))]


def _rows_of(ranks: list[AscendRank]) -> pl.LazyFrame | list[pl.DataFrame] | None:
    """The kernel rows of a part (`_parts`) keyed by rank: the ranks' rows in memory as one batch; one rank's in
    batches of `BATCH_ROWS`, read again (streamed when big) if the kernel pass did not keep them."""
    held = [(index, rank.timed) for index, rank in enumerate(ranks) if rank.timed is not None]
    if held:
        rows = stack([t for _, t in held], {"_f": [index for index, _ in held]}, how="vertical")
        return [rows] if len(held) > 1 else list(rows.iter_slices(BATCH_ROWS))
    if len(ranks) > 1 or ranks[0].kernel_path is None:
        return None
    rows = _read_kernel_rows(ranks[0]).with_columns(pl.lit(0, pl.Int64).alias("_f"))
    return rows if isinstance(rows, pl.LazyFrame) else list(rows.iter_slices(BATCH_ROWS))


def _read_kernel_rows(r: AscendRank) -> pl.LazyFrame | pl.DataFrame:
    """The kernel file's usable rows with their place in time, read again: in memory when small, else lazily
    (to be streamed)."""
    kernel_file = ascend_kernels.inspect(r.kernel_path)
    frame = ascend_kernels.scan(kernel_file).filter(~pl.col("bad") & pl.col("dur_us").is_not_null())
    if r.n_records is not None:
        frame = ascend_kernels.with_exact_lines(kernel_file, frame, r.n_records)
    frame = frame.select("step", "op", "name", "type", "core", "start_us", "dur_us", pl.col("src_line").alias("loc"))
    return frame.collect() if r.kernel_path.stat().st_size <= ascend_kernels.IN_MEMORY_BYTES else frame


def _from_hccl_rows(rank: AscendRank, pack: RulePack) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """Without communication.json, the ops are the kernel file's HCCL rows — from the kernel groups when they
    hold them (`_hccl_rows_from_groups`), else a pass of their own —, then the windows a second pass."""
    if rank.kernel_path is None:
        return None, None
    lazy = rank.timed if rank.timed is not None else _read_kernel_rows(rank)
    is_comm = is_comm_row(lazy, pack.roles)
    krows = _hccl_rows_from_groups(rank.groups, pack.roles)
    if krows is None:
        krows = (
            lazy.lazy()
            .filter(is_comm)
            .select("step", pl.col("name").cast(pl.String), "start_us", "dur_us", "loc")
            .collect(engine="streaming")
        )
    if krows.is_empty():
        return None, None
    colls = krows.select(
        "step",
        pl.when(pl.col("name").str.contains(pack.roles.p2p_ops))
        .then(pl.lit("p2p"))
        .otherwise(pl.lit("collective"))
        .alias("kind"),
        ("tag:" + pl.col("name").str.extract(pack.roles.hccl_group_tag, 1).fill_null("?")).alias("group"),
        "name",
        "start_us",
        "dur_us",
        pl.lit(None, pl.Float64).alias("wait_us"),
        pl.lit(rank.kernel_file).alias("file"),
        pl.lit("lines").alias("loc_kind"),
        "loc",
        pl.lit(None, pl.Utf8).alias("pointer"),
        pl.lit(rank.kernel_file).alias("kfile"),
        pl.col("loc").alias("kline"),
    )
    colls = _finish(colls.select([c for c in COLL_SCHEMA if c not in ("cid", "seq", "win_start_us", *LATER_COLS)]))
    source = WindowSource(pack, "ascend", rank.kernel_file or "", "lines", rank.groups)
    windows, colls = build_windows(lazy.filter(~is_comm), colls, source)
    return colls, (windows if not windows.is_empty() else None)


def _exposed(colls: pl.DataFrame, dev: pl.DataFrame) -> pl.DataFrame:
    """``colls`` with ``exposed_us``: of each collective's span, the time no compute event of the rank covered —
    what the step waited on it alone. Compute is every event outside the communication bucket, as the EP split
    and the step's compute/exposed split count it (`kineto_ep`, `intervals.step_blocks`)."""
    compute = dev.filter(pl.col("bucket") != "communication").with_columns(pl.lit(0).alias("_lane"))
    runs = union_runs(compute, ["_lane"])
    spans = colls.with_columns(
        pl.col("start_us").alias("ts_us"), (pl.col("start_us") + pl.col("dur_us")).alias("end_us")
    )
    spans = covered_time(spans, runs, "_hidden")
    return spans.with_columns((pl.col("dur_us") - pl.col("_hidden")).clip(0.0).alias("exposed_us")).select(
        list(COLL_SCHEMA)
    )


def kineto_collectives(
    kt: KinetoTrace, dev: pl.DataFrame, trace_file: str, pack: RulePack
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(collectives, windows) of one Kineto rank: NCCL/RCCL kernels in order, per process group when the trace
    names it (``Process Group Name``), else as one group; the GPU kernels before each as its window.

    A CPU-only trace has no collective kernel; there the collectives are the CPU-side spans that include waiting
    for peers (roles ``kineto_peer_wait_ops``: gloo's worker-thread annotations), which end together on every
    rank as kernels do. They carry no process group, so the k-th op of the same name in a step is the same
    collective on every rank; the main thread's top-level ops before each are its window."""
    if kt.collectives.is_empty():
        return None, None
    source = pl.col("includes_peer_wait") if kt.cpu_only else pl.col("source") == kineto.SOURCE_KERNEL
    frame = kt.collectives.filter(source)
    if frame.is_empty():
        return None, None
    colls = frame.select(
        "step",
        pl.lit("collective").alias("kind"),
        pl.coalesce("pg_name", pl.col("name") if kt.cpu_only else pl.lit("nccl")).alias("group"),
        "name",
        pl.col("ts_us").alias("start_us"),
        "dur_us",
        pl.lit(None, pl.Float64).alias("wait_us"),
        pl.lit(trace_file).alias("file"),
        pl.lit("events").alias("loc_kind"),
        pl.col("event_idx").alias("loc"),
        pl.lit(None, pl.Utf8).alias("pointer"),
        pl.lit(trace_file).alias("kfile"),
        pl.col("event_idx").alias("kline"),
    )
    colls = _exposed(_finish(colls), dev)
    kind = "cpu" if kt.cpu_only else "gpu"
    work = ~pl.col("event_idx").is_in(frame["event_idx"].implode())
    if kt.cpu_only:  # the main thread's own collective ops only enqueue the collectives: no work before them
        work = work & (pl.col("bucket") != "communication")
    kernels = dev.filter(work).select(
        "step",
        "op",
        "name",
        "type",
        "core",
        "bucket",
        "rule_id",
        pl.col("ts_us").alias("start_us"),
        "dur_us",
        pl.col("event_idx").alias("loc"),
    )
    windows, colls = build_windows(kernels, colls, WindowSource(pack, kind, trace_file, "events"))
    return colls, windows
