"""Cross-checks between files of one rank: does kernel_details.csv list what op_statistic.csv totals?

The profiler writes both from the same data, so a mismatch means rows were trimmed, filtered or lost — worth
knowing before trusting per-kernel shares. Agreement is stated too (as a note), so the reader knows it was checked.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.contract import Job, Section
from profan.model.evidence import cite_lines
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms
from profan.rulepack.pack import RulePack


def section(job: Job) -> Section:
    """op_statistic.csv against kernel_details.csv, per rank: the table, a warning where they disagree, a note
    where they agree."""
    table = op_statistic_table(job.ranks)
    findings, notes = op_statistic_findings(table, job.pack)
    return Section(tables={"op_statistic_check": table}, findings=findings, notes=notes)


def op_statistic_table(ranks: list[RankData]) -> pl.DataFrame:
    """Per rank and (op type, core): the op_statistic totals beside the kernel_details sums."""
    parts = []
    for rank in ranks:
        if rank.op_stats is None or rank.groups is None:
            continue
        k = (
            rank.groups.filter(pl.col("bucket") != "communication")
            .group_by("type", "core")
            .agg(pl.col("count").sum().alias("kernel_count"), pl.col("time_us").sum().alias("kernel_time_us"))
        )
        j = rank.op_stats.join(
            k, left_on=["op_type", "core"], right_on=["type", "core"], how="full", coalesce=True
        ).sort(["src_line", "op_type", "core"], nulls_last=True)  # file order; kernel-only types after
        parts.append(
            j.with_columns(pl.lit(rank.rank, pl.Int64).alias("rank"), pl.lit(rank.files["op_statistic"]).alias("file"))
        )
    if not parts:
        return pl.DataFrame()
    frame = pl.concat(parts, how="diagonal_relaxed")
    return frame.with_columns(
        (
            (pl.col("count").fill_null(0) == pl.col("kernel_count").fill_null(0))
            & ((pl.col("total_us").fill_null(0) - pl.col("kernel_time_us").fill_null(0)).abs() <= 0.01)
        ).alias("match")
    )


def op_statistic_findings(table: pl.DataFrame, pack: RulePack) -> tuple[list[Finding], list[str]]:
    """A warning per rank whose kernel rows disagree with op_statistic.csv; a note per rank that agrees."""
    chk = pack.check("kernels-vs-op-statistic")
    findings: list[Finding] = []
    notes: list[str] = []
    if table.is_empty():
        return findings, notes
    for (rank, file), g in table.group_by(["rank", "file"], maintain_order=True):
        bad = g.filter(~pl.col("match"))
        if bad.is_empty():
            notes.append(
                f"rank {rank}: kernel_details.csv agrees with {file} on all {g.height} op types (count and total time)"
            )
            continue
        stat_us = float(bad["total_us"].fill_null(0).sum())
        kern_us = float(bad["kernel_time_us"].fill_null(0).sum())
        worst = bad.sort("total_us", descending=True, nulls_last=True)["op_type"].head(5)
        names = ", ".join(worst.fill_null("(empty Type)").to_list())  # a Type cell left empty reads as null
        lines = bad["src_line"].drop_nulls().to_list()
        evidence = []
        if lines:
            evidence.append(
                cite_lines(
                    file,
                    lines,
                    len(lines),
                    {"source": "op_statistic", "mismatch": True},
                    values={"total_us": round(stat_us, 3)},
                )
            )
        if not evidence:
            continue  # only kernel rows with no op_statistic line: nothing in op_statistic to cite
        findings.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=rank,
                title=f"Rank {rank}: kernel_details.csv disagrees with op_statistic.csv on {bad.height} op type(s)",
                message=(
                    f"Rank {rank}: for {bad.height} of {g.height} op types ({names}) the rows of kernel_details.csv "
                    f"sum to {ms(kern_us)} but op_statistic.csv totals {ms(stat_us)}. Kernel rows were trimmed "
                    "or lost; per-kernel shares describe only the rows present."
                ),
                metrics={"op_types": bad.height, "op_statistic_us": round(stat_us, 3), "kernel_us": round(kern_us, 3)},
                evidence=tuple(evidence),
            )
        )
    return findings, notes
