"""What bounds the hottest kernels: Cube (mac), Vector (vec), memory movement (mte1/2/3), scalar or fixpipe.

Pipe ratios come from the PMU columns of kernel_details.csv (PipeUtilization metrics). A kernel group's ratio is
the duration-weighted mean over its rows, so one long call weighs more than many short ones.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, ms, pct
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack
from profan.sources.ascend_kernels import PIPES

VERDICTS = {
    "mac": ("cube-bound", "info", "the Cube unit is the busiest pipe — the kernel is doing matrix work"),
    "vec": ("vector-bound", "info", "the Vector unit is the busiest pipe"),
    "mte1": ("memory-bound (mte1: L1→L0)", "warning", "on-chip L1→L0 moves dominate"),
    "mte2": ("memory-bound (mte2: HBM→on-chip)", "warning",
             "loads from global memory dominate; check layout (ND vs NZ), shapes and tiling"),
    "mte3": ("memory-bound (mte3: on-chip→HBM)", "warning", "write-back to global memory dominates"),
    "scalar": ("scalar-bound", "warning", "scalar (control/address) work dominates — often small or "
               "non-aligned shapes"),
    "fixpipe": ("fixpipe-bound", "warning", "the Cube output path (fixpipe) dominates"),
}


def boundness(ranks: list[RankData], pack: RulePack) -> pl.DataFrame:
    """Per rank, the hottest kernel groups (op + input shapes, over all steps) with their pipe ratios."""
    chk = pack.check("kernel-boundness")
    parts = []
    for r in ranks:
        if r.groups is None or r.groups.is_empty() or not r.has_pipe_ratios:
            continue
        pipes = [p for p in PIPES if f"{p}_wsum" in r.groups.columns]
        g = r.groups.filter(pl.col("bucket") != "communication")
        total = float(r.groups["time_us"].sum())
        agg = (g.group_by("op", "input_shapes")
               .agg(pl.col("time_us").sum(), pl.col("count").sum(),
                    # example core/bucket/name: the group with the most time, so every run names the same one
                    *[pl.col(c).sort_by(["time_us", "name"], descending=[True, False]).first()
                      for c in ("core", "bucket", "name")],
                    *[pl.col(f"{p}_wsum").sum() for p in pipes], *[pl.col(f"{p}_wden").sum() for p in pipes]))
        agg = agg.with_columns(
            *[(pl.col(f"{p}_wsum") / pl.col(f"{p}_wden")).alias(p) for p in pipes],
            (pl.col("time_us") / total).alias("share"),
            (pl.col("time_us") / pl.col("count")).alias("avg_us"))
        agg = (agg.filter((pl.col("share") >= chk["min_share"]) & (pl.col("avg_us") >= chk["min_duration_us"]))
               .sort(["time_us", "op", "input_shapes"], descending=[True, False, False], nulls_last=True)
               .head(chk["top_n"]))
        if agg.is_empty():
            continue
        dom = pl.concat_list([pl.struct(pipe=pl.lit(p), ratio=pl.col(p)) for p in pipes]).list.eval(
            pl.element().sort_by(pl.element().struct.field("ratio"), descending=True, nulls_last=True).first())
        agg = agg.with_columns(dom.list.first().alias("_dom")).with_columns(
            pl.col("_dom").struct.field("pipe").alias("dominant_pipe"),
            pl.col("_dom").struct.field("ratio").alias("dominant_ratio")).drop("_dom")
        parts.append(agg.with_columns(pl.lit(r.rank, pl.Int64).alias("rank"))
                     .select("rank", "op", "input_shapes", "name", "core", "bucket", "count", "time_us", "share",
                             "avg_us", *pipes, "dominant_pipe", "dominant_ratio"))
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts, how="diagonal_relaxed")


def verdict(dominant_pipe: str | None, ratio: float | None, chk) -> tuple[str, str, str] | None:
    if dominant_pipe is None or ratio is None:
        return None
    if ratio >= chk["bound_ratio"]:
        return VERDICTS[dominant_pipe]
    if ratio < chk["idle_ratio"]:
        return ("under-utilised", "warning",
                f"no pipe is busy more than {pct(chk['idle_ratio'])} of the time — latency, synchronisation "
                "or too few blocks")
    return None


def boundness_findings(ranks: list[RankData], table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("kernel-boundness")
    out: list[Finding] = []
    if table.is_empty():
        return out
    by_rank = {r.rank: r for r in ranks}
    for row in table.iter_rows(named=True):
        v = verdict(row["dominant_pipe"], row["dominant_ratio"], chk)
        if v is None:
            continue
        label, sev, why = v
        r = by_rank[row["rank"]]
        rows = r.groups.filter((pl.col("op") == row["op"]) & (pl.col("bucket") != "communication")
                               & (pl.col("input_shapes").eq_missing(row["input_shapes"])))
        shapes = f" ({row['input_shapes']})" if row["input_shapes"] else ""
        ratios = ", ".join(f"{p} {row[p]:.2f}" for p in PIPES if p in row and row[p] is not None)
        out.append(Finding(
            check=chk.id, severity=sev, rank=row["rank"],
            title=f"Rank {row['rank']}: {row['op']}{shapes} is {label}",
            message=(f"Rank {row['rank']}: {row['op']}{shapes} — {row['count']} calls, {ms(row['time_us'])} "
                     f"({pct(row['share'])} of kernel time) — is {label}: {why}. Duration-weighted pipe ratios: "
                     f"{ratios}."),
            metrics={"dominant_pipe": row["dominant_pipe"], "dominant_ratio": round(row["dominant_ratio"], 4),
                     "time_us": round(row["time_us"], 3), "calls": row["count"],
                     **{p: round(row[p], 4) for p in PIPES if p in row and row[p] is not None}},
            evidence=(cite_kernels(r, rows, int(row["count"]),
                                   {"source": "kernel_details", "op": row["op"],
                                    "input_shapes": row["input_shapes"], "bucket_not": "communication"},
                                   values={"time_us": round(row["time_us"], 3)}),)))
    return out
