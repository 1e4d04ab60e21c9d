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

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from profan.classify import classify, rule_fields
from profan.rulepack import RulePack
from profan.sources import ascend_kernels
from profan.sources.rowframe import stack

WINDOW_LOCS = 5  # locators kept per (window, kernel)
COMM_CORES = ("HCCL", "COMMUNICATION", "HCCL_AI_CPU")
P2P = re.compile(r"(?i)^hcom_(send|receive|batchsendrecv)")
_TAG = r"^hcom_[A-Za-z]+__(\d+)_\d+"

COLL_SCHEMA = {"cid": pl.Int64, "step": pl.Int64, "kind": pl.Utf8, "group": pl.Utf8, "seq": pl.Int64,
               "name": pl.Utf8, "start_us": pl.Float64, "dur_us": pl.Float64, "wait_us": pl.Float64,
               "win_start_us": pl.Float64, "file": pl.Utf8, "loc_kind": pl.Utf8, "loc": pl.Int64,
               "pointer": pl.Utf8, "kfile": pl.Utf8, "kline": pl.Int64,
               # the longest stretch without device work in the window, and the kernel rows around it
               "gap_us": pl.Float64, "gap_prev_loc": pl.Int64, "gap_loc": pl.Int64}
GAP_COLS = ("gap_us", "gap_prev_loc", "gap_loc")


def _finish(colls: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Order ops, number them, derive seq within (step, group) and each op's window start. ``by``: the key of
    each rank in a batch of ranks (`ascend_collectives_batch`); everything is per rank."""
    colls = colls.sort([*by, "start_us"], maintain_order=True)
    cid = pl.int_range(pl.len(), dtype=pl.Int64).over(by) if by else pl.int_range(pl.len(), dtype=pl.Int64)
    end = (pl.col("start_us") + pl.col("dur_us")).cum_max().shift(1)
    colls = colls.with_columns(cid.alias("cid")).with_columns(
        pl.col("start_us").rank("ordinal").over(*by, "step", "group").sub(1).cast(pl.Int64).alias("seq"),
        (end.over(by) if by else end).alias("win_start_us"),
    )
    colls = colls.with_columns(*[pl.lit(None, COLL_SCHEMA[c]).alias(c) for c in GAP_COLS if c not in colls.columns])
    return colls.select(*by, *COLL_SCHEMA)


WINDOW_KERNELS = 16  # distinct kernels kept per window (largest by time); the rest fold into one row per bucket
BATCH_ROWS = 250_000  # kernel rows per streamed batch: memory is bounded by the batch, not the file


def _next_op(batch: pl.DataFrame, colls: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    """``batch`` with ``cid``: the first op starting at or after each kernel (a binary search over the op starts
    — no join of the big table). Over a batch of ranks (``by``; the rows grouped by rank, as
    `ascend_collectives_batch` stacks them) each rank's kernels are searched in that rank's ops."""
    def search(rows: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
        cid = pl.lit(ops["start_us"]).search_sorted(pl.col("start_us"), side="left").cast(pl.Int64)
        return rows.with_columns(cid.alias("cid"))

    if not by or batch.is_empty():
        return search(batch, colls)
    ops = colls.partition_by(by, as_dict=True, maintain_order=True)
    empty = colls.clear()
    return pl.concat([search(rows, ops.get(key, empty))
                      for key, rows in batch.partition_by(by, as_dict=True, maintain_order=True).items()])


def _largest(loc: str, dur: str) -> list[pl.Expr]:
    """``locs`` and ``loc_durs``: the WINDOW_LOCS longest rows of a group and their durations, longest first,
    ties by the earlier row (the same input cites the same rows), the two lists in the same order — `_merge_parts`
    pairs them up again."""
    order = pl.col(loc).sort_by([dur, loc], descending=[True, False], nulls_last=True)
    return [order.head(WINDOW_LOCS).alias("locs"),
            pl.col(dur).sort_by([dur, loc], descending=[True, False], nulls_last=True).head(WINDOW_LOCS)
            .alias("loc_durs")]


def _window_part(batch: pl.DataFrame, colls: pl.DataFrame, keys: list[str],
                 seen: set[int], by: tuple[str, ...] = ()) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (window, kernel) partial aggregate of one batch, and per window its longest idle gap and last kernel.

    Each kernel goes to the first op starting at or after it (`_next_op`), and only if it started after the
    previous op ended. A gap is a kernel's start minus the latest end before it in the window (the window start
    for its first kernel); windows already seen in an earlier batch skip their first row here, whose predecessor
    is in that batch."""
    w = [*by, "cid"]
    k = _next_op(batch, colls, by).join(colls.select(*w, pl.col("win_start_us").alias("_ws")), on=w,
                                         maintain_order="left")
    k = k.filter(pl.col("_ws").is_null() | (pl.col("start_us") >= pl.col("_ws")))
    agg = (k.group_by([*w, *keys])
           .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("dur_us").sum().alias("time_us"),
                *_largest("loc", "dur_us")))
    k = k.sort(*w, "start_us").with_columns((pl.col("start_us") + pl.col("dur_us")).alias("_end"))
    prev_end = pl.col("_end").cum_max().shift(1).over(w)
    first_here = pl.col("cid").is_in(list(seen)) if seen else pl.lit(False)
    k = k.with_columns(
        pl.when(prev_end.is_not_null()).then(pl.col("start_us") - prev_end)
        .when(~first_here).then(pl.col("start_us") - pl.col("_ws")).alias("_gap"),
        pl.col("loc").shift(1).over(w).alias("_prev"))
    gaps = k.group_by(w).agg(
        pl.col("_gap").max().alias("gap_us"), pl.col("_prev").sort_by("_gap").last().alias("gap_prev_loc"),
        pl.col("loc").sort_by("_gap").last().alias("gap_loc"), pl.col("_end").max().alias("last_end"),
        pl.col("loc").sort_by("_end").last().alias("last_loc"))
    return agg, gaps


def _merge_gaps(gaps: list[pl.DataFrame]) -> pl.DataFrame:
    g = pl.concat(gaps)
    return g.group_by("cid").agg(
        pl.col("gap_us").max(), pl.col("gap_prev_loc").sort_by("gap_us", nulls_last=False).last(),
        pl.col("gap_loc").sort_by("gap_us", nulls_last=False).last(), pl.col("last_end").max(),
        pl.col("last_loc").sort_by("last_end").last())


def _with_gaps(colls: pl.DataFrame, gaps: pl.DataFrame | None, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Longest idle stretch per window: between two kernels, or after the last kernel up to the op itself."""
    if gaps is None or gaps.is_empty():
        return colls
    c = colls.drop(*GAP_COLS).join(gaps, on=[*by, "cid"], how="left")
    trailing = pl.col("start_us") - pl.col("last_end")
    use_trailing = trailing > pl.col("gap_us").fill_null(float("-inf"))
    c = c.with_columns(
        pl.when(use_trailing).then(trailing).otherwise(pl.col("gap_us")).alias("gap_us"),
        pl.when(use_trailing).then(pl.col("last_loc")).otherwise(pl.col("gap_prev_loc")).alias("gap_prev_loc"),
        pl.when(use_trailing).then(pl.col("kline")).otherwise(pl.col("gap_loc")).alias("gap_loc"))
    return c.select(*by, *COLL_SCHEMA)


def _merge_parts(parts: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame:
    if len(parts) == 1:
        return parts[0]
    allp = pl.concat(parts)
    g = ["cid", *keys]
    sums = allp.group_by(g).agg(pl.col("count").sum(), pl.col("time_us").sum())
    tops = (allp.select(*g, "locs", "loc_durs").explode(["locs", "loc_durs"]).drop_nulls(["locs"])
            .group_by(g).agg(*_largest("locs", "loc_durs")))
    return sums.join(tops, on=g, how="left", nulls_equal=True)


def _cap(win: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Keep the WINDOW_KERNELS largest kernels of each window; fold the rest into '(other)' per bucket, so long
    profiles (thousands of windows) stay small while window and bucket totals stay exact."""
    # rank by time, ties by name: which kernels stay named must not depend on the grouping's row order
    win = (win.sort([*by, "cid", "time_us", "name"], descending=[*[False] * len(by), False, True, False],
                    nulls_last=True)
           .with_columns(pl.int_range(1, pl.len() + 1).over(*by, "cid").alias("_r")))
    keep = win.filter(pl.col("_r") <= WINDOW_KERNELS).drop("_r")
    rest = win.filter(pl.col("_r") > WINDOW_KERNELS)
    if rest.is_empty():
        return keep
    folded = rest.group_by(*by, "cid", "bucket").agg(
        pl.col("count").sum(), pl.col("time_us").sum(),
        pl.col("locs").list.explode(keep_nulls=False, empty_as_null=False).head(WINDOW_LOCS))
    folded = folded.with_columns(pl.lit("(other)").alias("op"), pl.lit("(other kernels)").alias("name"),
                                 pl.lit(None, pl.Utf8).alias("type"), pl.lit(None, pl.Utf8).alias("core"),
                                 pl.lit(None, pl.Utf8).alias("rule_id"))
    return pl.concat([keep, folded], how="diagonal_relaxed")


def _stream_windows(src: pl.LazyFrame | pl.DataFrame, colls: pl.DataFrame, keys: list[str],
                    also: pl.Expr | None = None
                    ) -> tuple[pl.DataFrame, float | None, pl.DataFrame | None, pl.DataFrame | None]:
    """One streamed pass: (window parts merged, first kernel start, rows matching `also` — e.g. the HCCL rows —,
    longest gap per window). A table already in memory is cut into batches directly (a streaming engine run
    costs milliseconds of set-up, which a cluster of small ranks pays once per rank)."""
    parts: list[pl.DataFrame] = []
    gaps: list[pl.DataFrame] = []
    extra: list[pl.DataFrame] = []
    state: dict = {"first": None}
    seen: set[int] = set()

    def take(batch: pl.DataFrame) -> None:
        comp = batch.filter(~also) if also is not None else batch
        if also is not None:
            extra.append(batch.filter(also))
        if comp.height:
            m = comp["start_us"].min()
            state["first"] = m if state["first"] is None else min(state["first"], m)
            part, gap = _window_part(comp, colls, keys, seen)
            parts.append(part)
            gaps.append(gap)
            seen.update(gap["cid"].to_list())
        if len(parts) > 8:
            parts[:] = [_merge_parts(parts, keys)]
            gaps[:] = [_merge_gaps(gaps)]

    if isinstance(src, pl.DataFrame):
        for batch in src.iter_slices(BATCH_ROWS):
            take(batch)
    else:
        src.sink_batches(take, chunk_size=BATCH_ROWS, maintain_order=True, engine="streaming")
    win = _merge_parts(parts, keys) if parts else pl.DataFrame()
    state["gaps"] = _merge_gaps(gaps) if gaps else None
    return win, state["first"], (pl.concat(extra) if extra else None), state["gaps"]


def _classify(win: pl.DataFrame, rules: list, groups: pl.DataFrame | None) -> pl.DataFrame:
    """Bucket and rule of each window kernel: taken from the rank's classified kernel groups when the rules read
    only the columns a window keeps (the same kernel gets the same verdict, without running the rule chain
    again), classified afresh for any kernel the groups lack."""
    fields = rule_fields(rules)
    if (groups is None or "bucket" not in groups.columns or not fields
            or not set(fields) <= {"op", "name", "type", "core"}):
        return classify(win, rules)
    known = groups.select(*fields, "bucket", "rule_id").unique(fields, keep="first", maintain_order=True)
    win = win.join(known, on=fields, how="left", nulls_equal=True, maintain_order="left")
    missing = win["bucket"].is_null()
    if not missing.any():
        return win
    return pl.concat([win.filter(~missing), classify(win.filter(missing).drop("bucket", "rule_id"), rules)],
                     how="diagonal_relaxed")


def _finish_windows(win: pl.DataFrame, colls: pl.DataFrame, first: float | pl.DataFrame | None, pack: RulePack,
                    rules_for: str, loc_file: str | pl.Expr, loc_kind: str, groups: pl.DataFrame | None = None,
                    by: tuple[str, ...] = ()) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Classify and cap the windows; the first op's window starts at the rank's first kernel. Over a batch of
    ranks (``by``): ``first`` holds each rank's first start (ranks with windows only), ``loc_file`` each rank's
    file as an expression."""
    if isinstance(first, pl.DataFrame):
        colls = (colls.join(first.rename({"first": "_first"}), on=list(by), how="left", maintain_order="left")
                 .with_columns(pl.col("win_start_us").fill_null(pl.col("_first"))).drop("_first"))
    elif first is not None:
        colls = colls.with_columns(pl.col("win_start_us").fill_null(first))
    if "bucket" not in win.columns:  # not yet classified by the source
        win = _classify(win, pack.rules_for(rules_for), groups)
    file = loc_file if isinstance(loc_file, pl.Expr) else pl.lit(loc_file)
    win = _cap(win.drop("loc_durs", strict=False), by).with_columns(
        pl.col("count").cast(pl.Int64), file.alias("loc_file"), pl.lit(loc_kind).alias("loc_kind"))
    return win.sort(*by, "cid", "time_us", descending=[*[False] * len(by), False, True]), colls


def build_windows(kernels: pl.DataFrame | pl.LazyFrame, colls: pl.DataFrame, pack: RulePack, rules_for: str,
                  loc_file: str, loc_kind: str, groups: pl.DataFrame | None = None
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Assign compute kernels to the next communication op's window; aggregate per (window, kernel).

    ``kernels``: start_us, dur_us, op, name, type, core, loc (and bucket, rule_id when already classified).
    Returns (windows, collectives with the first window's start filled from the first kernel).
    """
    if colls.is_empty():
        return pl.DataFrame(), colls
    names = kernels.collect_schema().names()
    keys = ["op", "name", "type", "core", *(["bucket", "rule_id"] if "bucket" in names else [])]
    win, first, _, gaps = _stream_windows(kernels, colls, keys)
    if win.is_empty():
        return pl.DataFrame(), colls
    windows, colls = _finish_windows(win, colls, first, pack, rules_for, loc_file, loc_kind, groups)
    return windows, _with_gaps(colls, gaps)


def _hccl_rows_from_groups(groups: pl.DataFrame | None) -> pl.DataFrame | None:
    """The HCCL rows, taken from the rank's kernel groups when every op name occurs once per step (HCCL names
    carry a sequence number, so they do): saves a pass over the kernel file."""
    if groups is None or groups.is_empty() or "first_start_us" not in groups.columns:
        return None
    g = groups.filter(_is_comm())
    if g.is_empty() or (g["count"] > 1).any():
        return None
    return g.select("step", "name", pl.col("first_start_us").alias("start_us"), pl.col("time_us").alias("dur_us"),
                    pl.col("lines").list.first().alias("loc"))


def _is_comm() -> pl.Expr:
    """A kernel row of a communication op (its HCCL task), not compute."""
    return pl.col("core").is_in(list(COMM_CORES)) | pl.col("name").str.starts_with("hcom_")


def _colls_from_ops(ops: pl.DataFrame, file: pl.Expr, kfile: pl.Expr, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """The collectives of communication.json's ops (`ascend_comm.tables`) with a start, numbered (`_finish`);
    ``file``/``kfile``: the communication and kernel file each op is cited in."""
    return _finish(ops.filter(pl.col("start_us").is_not_null()).select(
        *by, "step", "kind", pl.coalesce("group_hash", pl.lit("?")).alias("group"), pl.col("op_name").alias("name"),
        "start_us", (pl.col("elapse_ms") * 1000).alias("dur_us"), (pl.col("wait_ms") * 1000).alias("wait_us"),
        file.alias("file"), pl.lit("pointers").alias("loc_kind"), pl.lit(None, pl.Int64).alias("loc"),
        "pointer", kfile.alias("kfile"), pl.lit(None, pl.Int64).alias("kline")), by)


def ascend_collectives(kernel_path: Path | None, kernel_file: str | None, n_records: int | None,
                       comm_ops: pl.DataFrame | None, comm_file: str | None,
                       pack: RulePack, groups: pl.DataFrame | None = None, timed: pl.DataFrame | None = None,
                       ) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(collectives, windows) of one Ascend rank from kernel_details.csv and/or communication.json.

    Streamed in batches. One pass over the kernel file when communication.json gives the ops (the HCCL rows'
    line numbers and the windows come from the same pass), two otherwise (the HCCL rows first, to know the
    windows). ``timed``: the file's timed rows, already read by the kernel pass (`ascend_kernels.timed_rows`):
    then no pass at all.
    """
    lf = timed
    if kernel_path is not None and lf is None:
        kf = ascend_kernels.inspect(kernel_path)
        lf = ascend_kernels.scan(kf).filter(~pl.col("bad") & pl.col("dur_us").is_not_null())
        if n_records is not None:
            lf = ascend_kernels.with_exact_lines(kf, lf, n_records)
        lf = lf.select("step", "op", "name", "type", "core", "start_us", "dur_us", pl.col("src_line").alias("loc"))
        if kernel_path.stat().st_size <= ascend_kernels.IN_MEMORY_BYTES:
            lf = lf.collect()  # small: in memory, no streaming set-up (see `_stream_windows`)
    is_comm = _is_comm()
    keys = ["op", "name", "type", "core"]
    if comm_ops is not None and not comm_ops.is_empty():
        colls = _colls_from_ops(comm_ops, pl.lit(comm_file, pl.Utf8),
                                pl.lit(kernel_file if lf is not None else None, pl.Utf8))
        if lf is None:
            return colls, None
        win, first, krows, gaps = _stream_windows(lf, colls, keys, also=is_comm)
        if krows is not None and krows.height:
            lines = krows.group_by("step", "name").agg(pl.col("loc").min().alias("kline"))
            colls = colls.drop("kline").join(lines, on=["step", "name"], how="left", nulls_equal=True).select(
                list(COLL_SCHEMA))
        if win.is_empty():
            return colls, None
        windows, colls = _finish_windows(win, colls, first, pack, "ascend", kernel_file or "", "lines", groups)
        return _with_gaps(colls, gaps), windows
    if lf is None:
        return None, None
    krows = _hccl_rows_from_groups(groups)
    if krows is None:
        krows = (lf.lazy().filter(is_comm).select("step", "name", "start_us", "dur_us", "loc")
                 .collect(engine="streaming"))
    if krows.is_empty():
        return None, None
    colls = krows.select(
        "step", pl.when(pl.col("name").str.contains(P2P.pattern)).then(pl.lit("p2p"))
        .otherwise(pl.lit("collective")).alias("kind"),
        ("tag:" + pl.col("name").str.extract(_TAG, 1).fill_null("?")).alias("group"), "name", "start_us",
        "dur_us", pl.lit(None, pl.Float64).alias("wait_us"), pl.lit(kernel_file).alias("file"),
        pl.lit("lines").alias("loc_kind"), "loc", pl.lit(None, pl.Utf8).alias("pointer"),
        pl.lit(kernel_file).alias("kfile"), pl.col("loc").alias("kline"))
    colls = _finish(colls.select([c for c in COLL_SCHEMA if c not in ("cid", "seq", "win_start_us", *GAP_COLS)]))
    windows, colls = build_windows(lf.filter(~is_comm), colls, pack, "ascend", kernel_file or "", "lines", groups)
    return colls, (windows if not windows.is_empty() else None)


@dataclass
class AscendRank:
    """What `ascend_collectives_batch` needs of one rank: the kernel file's timed rows (`KernelPass.timed`), the
    communication ops of communication.json, both files' paths as the report cites them, and the classified
    kernel groups (their verdicts are reused for the windows)."""

    timed: pl.DataFrame
    comm_ops: pl.DataFrame
    comm_file: str
    kernel_file: str
    groups: pl.DataFrame | None


def ascend_collectives_batch(ranks: list[AscendRank], pack: RulePack
                             ) -> list[tuple[pl.DataFrame, pl.DataFrame | None]]:
    """`ascend_collectives` of several ranks whose kernel rows are in memory and whose ops come from
    communication.json — a cluster's usual case — computed as one table keyed by rank: each step is one query
    for the batch instead of one per rank. Every rank's result equals `ascend_collectives` on it alone."""
    if len({(tuple(r.comm_ops.schema.items()), tuple(r.timed.schema.items())) for r in ranks}) > 1:
        return [ascend_collectives(None, r.kernel_file, None, r.comm_ops, r.comm_file, pack, r.groups, r.timed)
                for r in ranks]  # columns typed differently: one table would need casts that alone does not do
    by = ("_f",)
    f = pl.col("_f")
    index = {"_f": list(range(len(ranks)))}
    ops = stack([r.comm_ops for r in ranks], index, how="vertical")
    file_of = {i: r.comm_file for i, r in enumerate(ranks)}
    kfile_of = {i: r.kernel_file for i, r in enumerate(ranks)}
    colls = _colls_from_ops(ops, f.replace_strict(file_of, return_dtype=pl.Utf8),
                            f.replace_strict(kfile_of, return_dtype=pl.Utf8), by)
    rows = stack([r.timed for r in ranks], index, how="vertical")
    is_comm = _is_comm()
    comp, krows = rows.filter(~is_comm), rows.filter(is_comm)
    keys = ["op", "name", "type", "core"]
    lines = krows.group_by(*by, "step", "name").agg(pl.col("loc").min().alias("kline"))
    # ranks without HCCL rows keep kline null, as alone
    colls = colls.drop("kline").join(lines, on=[*by, "step", "name"], how="left", nulls_equal=True,
                                     maintain_order="left").select(*by, *COLL_SCHEMA)
    windows = None
    # no compute row in the whole batch (only HCCL rows, or none usable): no windows, as each rank alone
    win, gaps = _window_part(comp, colls, keys, set(), by) if comp.height else (pl.DataFrame(), None)
    if not win.is_empty():
        with_win = win.select(by).unique()
        first = comp.group_by(by).agg(pl.col("start_us").min().alias("first")).join(with_win, on=list(by))
        groups = [r.groups for r in ranks if r.groups is not None]  # verdicts depend on the kernel, not the rank
        windows, colls = _finish_windows(win, colls, first, pack, "ascend",
                                         f.replace_strict(kfile_of, return_dtype=pl.Utf8), "lines",
                                         pl.concat(groups, how="diagonal_relaxed") if groups else None, by)
        colls = _with_gaps(colls, gaps, by)
    out_c = colls.partition_by("_f", as_dict=True, include_key=False, maintain_order=True)
    out_w = windows.partition_by("_f", as_dict=True, include_key=False, maintain_order=True) \
        if windows is not None else {}
    empty = colls.clear().drop("_f")
    return [(out_c.get((i,), empty), out_w.get((i,))) for i in range(len(ranks))]


def kineto_collectives(path: Path, trace_file: str, pack: RulePack) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(collectives, windows) of one Kineto rank: NCCL/RCCL kernels in order, per process group when the trace
    names it (``Process Group Name``), else as one group; the GPU kernels before each as its window."""
    from profan.sources import kineto

    kt, _ = kineto.load_cached(path)
    if kt.cpu_only or kt.collectives.is_empty():
        return None, None
    k = kt.collectives.filter(pl.col("source") == "kernel")
    if k.is_empty():
        return None, None
    colls = k.select(
        "step", pl.lit("collective").alias("kind"), pl.coalesce("pg_name", pl.lit("nccl")).alias("group"), "name",
        pl.col("ts_us").alias("start_us"), "dur_us", pl.lit(None, pl.Float64).alias("wait_us"),
        pl.lit(trace_file).alias("file"), pl.lit("events").alias("loc_kind"), pl.col("event_idx").alias("loc"),
        pl.lit(None, pl.Utf8).alias("pointer"), pl.lit(trace_file).alias("kfile"), pl.col("event_idx").alias("kline"))
    colls = _finish(colls)
    dev = kineto.classify_events(kt.device, pack.rules_for("gpu"))
    kernels = dev.filter(~pl.col("event_idx").is_in(k["event_idx"].implode())).select(
        "step", "op", "name", "type", "core", "bucket", "rule_id", pl.col("ts_us").alias("start_us"), "dur_us",
        pl.col("event_idx").alias("loc"))
    windows, colls = build_windows(kernels, colls, pack, "gpu", trace_file, "events")
    return colls, windows
