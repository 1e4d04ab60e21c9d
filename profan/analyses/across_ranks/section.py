"""Cross-rank section of the report: alignment, stragglers and MoE balance, assembled as one analysis.

One analysis because its parts share the alignment, and it needs only the job's inputs, so the pipeline runs it
in a thread beside the others; each part lives in its own module.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.across_ranks import align, overlappable, straggler_arrivals, stragglers
from profan.analyses.contract import Job, Section
from profan.analyses.moe import balance as moe_balance
from profan.model.findings import Finding
from profan.model.rank import RankData


def section(job: Job) -> Section:
    """Stragglers at aligned collectives and MoE expert balance: tables, findings and notes."""
    ranks, steps, pack = job.ranks, job.steps, job.pack
    # the exposed reductions' table, kept only with its finding: it is that finding's working
    tables: dict[str, pl.DataFrame] = {overlappable.TABLE: pl.DataFrame()}
    findings: list[Finding] = []
    notes: list[str] = []
    aligned = align.align(ranks)
    if not aligned.is_empty():
        notes += align.consistency_notes(ranks, aligned)
        timed = _step_times(ranks, steps)
        s_tables, s_findings = stragglers.straggler_findings(ranks, aligned, timed, pack)
        tables.update(s_tables)
        findings += s_findings
        check = pack.check(overlappable.CHECK)
        exposed = overlappable.per_step(aligned, timed, check["reduction_kernel"])
        found = overlappable.findings(aligned, exposed, check)
        if found:
            tables[overlappable.TABLE] = exposed
        findings += found
        if not s_tables:
            need = pack.check(straggler_arrivals.CHECK)["min_ranks"]
            notes.append(
                f"stragglers: at most {int(aligned['present'].max())} ranks share a collective; naming an "
                f"outlier needs at least {need}"
            )
    elif len(ranks) > 1 and any(rank.collectives is not None for rank in ranks):
        notes.append("stragglers: no collective was found on two or more ranks, so arrivals could not be compared")
    moe_tab, moe_f = moe_balance.moe_findings(ranks, pack)
    if not moe_tab.is_empty():
        tables["moe_balance"] = moe_tab
    findings += moe_f
    return Section(tables=tables, findings=findings, notes=notes)


def _step_times(ranks: list[RankData], steps: pl.DataFrame) -> pl.DataFrame:
    """step_trace_time rows where the profiler wrote them (Ascend), else the trace's own per-step device split."""
    if not steps.is_empty():
        return steps
    parts = [
        rank.trace_steps.filter(pl.col("scope") == "step")
        .select("step", "step_us", "free_us", "computing_us")
        .with_columns(pl.lit(rank.rank, pl.Int64).alias("rank"))
        for rank in ranks
        if getattr(rank, "trace_steps", None) is not None and not rank.trace_steps.is_empty()
    ]
    return pl.concat(parts, how="diagonal_relaxed") if parts else steps
