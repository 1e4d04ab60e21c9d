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
from pathlib import Path

import polars as pl

from profan.classify import classify
from profan.rulepack import RulePack
from profan.sources import ascend_kernels

WINDOW_LOCS = 5  # locators kept per (window, kernel)
COMM_CORES = ("HCCL", "COMMUNICATION", "HCCL_AI_CPU")
P2P = re.compile(r"(?i)^hcom_(send|receive|batchsendrecv)")
_TAG = r"^hcom_[A-Za-z]+__(\d+)_\d+"

COLL_SCHEMA = {"cid": pl.Int64, "step": pl.Int64, "kind": pl.Utf8, "group": pl.Utf8, "seq": pl.Int64,
               "name": pl.Utf8, "start_us": pl.Float64, "dur_us": pl.Float64, "wait_us": pl.Float64,
               "win_start_us": pl.Float64, "file": pl.Utf8, "loc_kind": pl.Utf8, "loc": pl.Int64,
               "pointer": pl.Utf8, "kfile": pl.Utf8, "kline": pl.Int64}


def _finish(colls: pl.DataFrame) -> pl.DataFrame:
    """Order ops, number them, derive seq within (step, group) and each op's window start."""
    colls = colls.sort("start_us").with_row_index("cid").with_columns(pl.col("cid").cast(pl.Int64))
    colls = colls.with_columns(
        pl.col("start_us").rank("ordinal").over("step", "group").sub(1).cast(pl.Int64).alias("seq"),
        (pl.col("start_us") + pl.col("dur_us")).cum_max().shift(1).alias("win_start_us"),
    )
    return colls.select(list(COLL_SCHEMA))


def build_windows(kernels: pl.DataFrame, colls: pl.DataFrame, pack: RulePack, rules_for: str, loc_file: str,
                  loc_kind: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Assign compute kernels to the next communication op's window; aggregate per (window, kernel).

    ``kernels``: start_us, dur_us, op, name, type, core, loc. Returns (windows, collectives with the first
    window's start filled from the first kernel).
    """
    if colls.is_empty() or kernels.is_empty():
        return pl.DataFrame(), colls
    first = float(kernels["start_us"].min())
    colls = colls.with_columns(pl.col("win_start_us").fill_null(first))
    bounds = colls.select("cid", pl.col("start_us").alias("c_start"), "win_start_us").sort("c_start")
    k = kernels.sort("start_us").join_asof(bounds, left_on="start_us", right_on="c_start", strategy="forward")
    k = k.filter(pl.col("cid").is_not_null() & (pl.col("start_us") >= pl.col("win_start_us")))
    pre = "bucket" in k.columns  # already classified by the source (e.g. with launch context)
    keys = ["cid", "op", "name", "type", "core", *(["bucket", "rule_id"] if pre else [])]
    win = (k.group_by(keys)
           .agg(pl.len().alias("count"), pl.col("dur_us").sum().alias("time_us"),
                pl.col("loc").top_k_by("dur_us", WINDOW_LOCS).alias("locs")))
    if not pre:
        win = classify(win, pack.rules_for(rules_for))
    win = win.with_columns(pl.lit(loc_file).alias("loc_file"), pl.lit(loc_kind).alias("loc_kind"))
    return win.sort("cid", "time_us", descending=[False, True]), colls


def ascend_collectives(kernel_path: Path | None, kernel_file: str | None, n_records: int | None,
                       comm_ops: pl.DataFrame | None, comm_file: str | None,
                       pack: RulePack) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(collectives, windows) of one Ascend rank from kernel_details.csv and/or communication.json."""
    kernels = None
    if kernel_path is not None:
        kf = ascend_kernels.inspect(kernel_path)
        lf = ascend_kernels.scan(kf).filter(~pl.col("bad") & pl.col("dur_us").is_not_null())
        if n_records is not None:
            lf = ascend_kernels.with_exact_lines(kf, lf, n_records)
        kernels = lf.select("step", "op", "name", "type", "core", "start_us", "dur_us",
                            pl.col("src_line").alias("loc")).collect()
    is_comm = pl.col("core").is_in(list(COMM_CORES)) | pl.col("name").str.starts_with("hcom_")
    krows = kernels.filter(is_comm) if kernels is not None else None
    if comm_ops is not None and not comm_ops.is_empty():
        colls = comm_ops.filter(pl.col("start_us").is_not_null()).select(
            "step", "kind", pl.coalesce("group_hash", pl.lit("?")).alias("group"), pl.col("op_name").alias("name"),
            "start_us", (pl.col("elapse_ms") * 1000).alias("dur_us"), (pl.col("wait_ms") * 1000).alias("wait_us"),
            pl.lit(comm_file).alias("file"), pl.lit("pointers").alias("loc_kind"), pl.lit(None, pl.Int64).alias("loc"),
            "pointer")
        if krows is not None and not krows.is_empty():
            lines = krows.group_by("step", "name").agg(pl.col("loc").min().alias("kline"))
            colls = colls.join(lines, on=["step", "name"], how="left", nulls_equal=True)
            colls = colls.with_columns(pl.lit(kernel_file).alias("kfile"))
        else:
            colls = colls.with_columns(pl.lit(None, pl.Utf8).alias("kfile"), pl.lit(None, pl.Int64).alias("kline"))
    elif krows is not None and not krows.is_empty():
        colls = krows.select(
            "step", pl.when(pl.col("name").str.contains(P2P.pattern)).then(pl.lit("p2p"))
            .otherwise(pl.lit("collective")).alias("kind"),
            ("tag:" + pl.col("name").str.extract(_TAG, 1).fill_null("?")).alias("group"), "name", "start_us",
            "dur_us", pl.lit(None, pl.Float64).alias("wait_us"), pl.lit(kernel_file).alias("file"),
            pl.lit("lines").alias("loc_kind"), "loc", pl.lit(None, pl.Utf8).alias("pointer"),
            pl.lit(kernel_file).alias("kfile"), pl.col("loc").alias("kline"))
    else:
        return None, None
    colls = _finish(colls.select([c for c in COLL_SCHEMA if c not in ("cid", "seq", "win_start_us")]))
    if kernels is None:
        return colls, None
    windows, colls = build_windows(kernels.filter(~is_comm), colls, pack, "ascend", kernel_file or "", "lines")
    return colls, windows


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
