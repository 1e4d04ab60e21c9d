"""What bounds the hottest kernels: Cube (mac), Vector (vec), memory movement (mte1/2/3), scalar or fixpipe.

Pipe ratios come from the PMU columns of kernel_details.csv (PipeUtilization metrics). A kernel group's ratio is
the duration-weighted mean over its rows, so one long call weighs more than many short ones.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, first_by_time, kernel_table, top_lines_frame
from profan.model.evidence import MAX_CITED
from profan.model.findings import Finding, Severity
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import Check, RulePack
from profan.sources.ascend_text.kernels import PIPES

# the verdict on a kernel bound by each pipe; its severity is the check's (pipe_severity, else severity)
VERDICTS = {
    "mac": ("cube-bound", "the Cube unit is the busiest pipe — the kernel is doing matrix work"),
    "vec": ("vector-bound", "the Vector unit is the busiest pipe"),
    "mte1": ("memory-bound (mte1: L1→L0)", "on-chip L1→L0 moves dominate"),
    "mte2": (
        "memory-bound (mte2: HBM→on-chip)",
        "loads from global memory dominate; check layout (ND vs NZ), shapes and tiling",
    ),
    "mte3": ("memory-bound (mte3: on-chip→HBM)", "write-back to global memory dominates"),
    "scalar": ("scalar-bound", "scalar (control/address) work dominates — often small or non-aligned shapes"),
    "fixpipe": ("fixpipe-bound", "the Cube output path (fixpipe) dominates"),
}


def boundness(ranks: list[RankData], pack: RulePack) -> pl.DataFrame:
    """Per rank, the hottest kernel groups (op + input shapes, over all steps) with their pipe ratios.

    One query over all ranks that have pipe ratios and write the same pipes (normally every rank: one job, one
    profiler level); the table is the per-rank tables one after the other."""
    chk = pack.check("kernel-boundness")
    by_pipes: dict[tuple[str, ...], list[RankData]] = {}
    for rank in ranks:
        if rank.groups is None or rank.groups.is_empty() or not rank.has_pipe_ratios:
            continue
        by_pipes.setdefault(tuple(part for part in PIPES if f"{part}_wsum" in rank.groups.columns), []).append(rank)
    parts = [_hottest(same, list(pipes), chk) for pipes, same in by_pipes.items()]
    parts = [part for part in parts if not part.is_empty()]
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts, how="diagonal_relaxed").sort("rank", maintain_order=True)


def _hottest(ranks: list[RankData], pipes: list[str], chk) -> pl.DataFrame:
    wcols = [f"{p}_{w}" for p in pipes for w in ("wsum", "wden")]
    k = kernel_table(ranks, ["op", "input_shapes", "name", "core", "bucket", "time_us", "count", *wcols])
    if k is None:
        return pl.DataFrame()
    k = k.with_columns(pl.col("time_us").sum().over("rank").alias("_total")).filter(pl.col("bucket") != "communication")
    agg = k.group_by("rank", "op", "input_shapes").agg(
        pl.col("time_us").sum(),
        pl.col("count").sum(),
        pl.col("_total").first(),
        *first_by_time(("core", "bucket", "name")),
        *[pl.col(c).sum() for c in wcols],
    )
    agg = agg.with_columns(
        *[(pl.col(f"{p}_wsum") / pl.col(f"{p}_wden")).alias(p) for p in pipes],
        (pl.col("time_us") / pl.col("_total")).alias("share"),
        (pl.col("time_us") / pl.col("count")).alias("avg_us"),
    )
    agg = (
        agg.filter((pl.col("share") >= chk["min_share"]) & (pl.col("avg_us") >= chk["min_duration_us"]))
        .sort(["rank", "time_us", "op", "input_shapes"], descending=[False, True, False, False], nulls_last=True)
        .group_by("rank", maintain_order=True)
        .head(chk["top_n"])
    )
    if agg.is_empty():
        return agg
    dom = pl.concat_list([pl.struct(pipe=pl.lit(p), ratio=pl.col(p)) for p in pipes]).list.eval(
        pl.element().sort_by(pl.element().struct.field("ratio"), descending=True, nulls_last=True).first()
    )
    agg = (
        agg.with_columns(dom.list.first().alias("_dom"))
        .with_columns(
            pl.col("_dom").struct.field("pipe").alias("dominant_pipe"),
            pl.col("_dom").struct.field("ratio").alias("dominant_ratio"),
        )
        .drop("_dom")
    )
    return agg.select(
        "rank",
        "op",
        "input_shapes",
        "name",
        "core",
        "bucket",
        "count",
        "time_us",
        "share",
        "avg_us",
        *pipes,
        "dominant_pipe",
        "dominant_ratio",
    )


def verdict(dominant_pipe: str | None, ratio: float | None, chk: Check) -> tuple[str, Severity, str] | None:
    """(label, severity, why) of a kernel whose busiest pipe is ``dominant_pipe`` at ``ratio``; None when it is
    neither bound by that pipe nor under-utilised."""
    if dominant_pipe is None or ratio is None:
        return None
    if ratio >= chk["bound_ratio"]:
        label, why = VERDICTS[dominant_pipe]
        return label, chk["pipe_severity"].get(dominant_pipe, chk.severity), why
    if ratio < chk["idle_ratio"]:
        return (
            "under-utilised",
            chk.severity,
            f"no pipe is busy more than {pct(chk['idle_ratio'])} of the time — latency, synchronisation "
            "or too few blocks",
        )
    return None


def boundness_findings(ranks: list[RankData], table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("kernel-boundness")
    out: list[Finding] = []
    if table.is_empty():
        return out
    by_rank = {rank.rank: rank for rank in ranks}
    judged = [
        (row, v)
        for row in table.iter_rows(named=True)
        if (v := verdict(row["dominant_pipe"], row["dominant_ratio"], chk)) is not None
    ]
    if not judged:
        return out
    keys = pl.DataFrame(
        [{k: row[k] for k in ("rank", "op", "input_shapes")} for row, _ in judged],
        schema={k: table.schema[k] for k in ("rank", "op", "input_shapes")},
    )
    tops = _cited_rows(ranks, keys)
    for row, (label, sev, why) in judged:
        rank = by_rank[row["rank"]]
        shapes = f" ({row['input_shapes']})" if row["input_shapes"] else ""
        ratios = ", ".join(f"{p} {row[p]:.2f}" for p in PIPES if p in row and row[p] is not None)
        out.append(
            Finding(
                check=chk.id,
                severity=sev,
                rank=row["rank"],
                title=f"Rank {row['rank']}: {row['op']}{shapes} is {label}",
                message=(
                    f"Rank {row['rank']}: {row['op']}{shapes} — {row['count']} calls, {ms(row['time_us'])} "
                    f"({pct(row['share'])} of kernel time) — is {label}: {why}. Duration-weighted pipe ratios: "
                    f"{ratios}."
                ),
                metrics={
                    "dominant_pipe": row["dominant_pipe"],
                    "dominant_ratio": round(row["dominant_ratio"], 4),
                    "time_us": round(row["time_us"], 3),
                    "calls": row["count"],
                    **{p: round(row[p], 4) for p in PIPES if p in row and row[p] is not None},
                },
                evidence=(
                    cite_kernels(
                        rank,
                        None,
                        int(row["count"]),
                        {
                            "source": "kernel_details",
                            "op": row["op"],
                            "input_shapes": row["input_shapes"],
                            "bucket_not": "communication",
                        },
                        locs=tops.get((row["rank"], row["op"], row["input_shapes"]), []),
                        values={"time_us": round(row["time_us"], 3)},
                    ),
                ),
            )
        )
    return out


def _cited_rows(ranks: list[RankData], wanted: pl.DataFrame) -> dict[tuple, list[int]]:
    """(rank, op, input_shapes) of ``wanted`` -> the largest rows of those non-communication groups."""
    keys = ["rank", "op", "input_shapes"]
    k = kernel_table(ranks, ["op", "input_shapes", "bucket", "lines", "line_durs"])
    if k is None:
        return {}
    k = k.filter(pl.col("bucket") != "communication").join(wanted, on=keys, how="semi", nulls_equal=True)
    tops = top_lines_frame(k, keys, MAX_CITED)
    return {(rank, op, shapes): lines for rank, op, shapes, lines in tops.iter_rows()}
