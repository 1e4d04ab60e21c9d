"""Cross-rank section of the report: alignment, stragglers and MoE balance, assembled for the pipeline.

One entry point so the pipeline stays a list of calls; each part lives in its own module.
"""

from __future__ import annotations

import polars as pl

from profan.analyses import align, moe_balance, stragglers
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack


def cross_rank_section(ranks: list[RankData], steps: pl.DataFrame,
                       pack: RulePack) -> tuple[dict[str, pl.DataFrame], list[Finding], list[str]]:
    """(tables, findings, notes) for straggler and MoE balance analysis."""
    tables: dict[str, pl.DataFrame] = {}
    findings: list[Finding] = []
    notes: list[str] = []
    aligned = align.align(ranks)
    if not aligned.is_empty():
        notes += align.consistency_notes(ranks, aligned)
        s_tables, s_findings = stragglers.straggler_findings(ranks, aligned, _step_times(ranks, steps), pack)
        tables.update(s_tables)
        findings += s_findings
        if not s_tables:
            need = pack.check(stragglers.CHECK)["min_ranks"]
            notes.append(f"stragglers: at most {int(aligned['present'].max())} ranks share a collective; naming an "
                         f"outlier needs at least {need}")
    elif len(ranks) > 1 and any(r.collectives is not None for r in ranks):
        notes.append("stragglers: no collective was found on two or more ranks, so arrivals could not be compared")
    moe_tab, moe_f = moe_balance.moe_findings(ranks, pack)
    if not moe_tab.is_empty():
        tables["moe_balance"] = moe_tab
    findings += moe_f
    return tables, findings, notes


def _step_times(ranks: list[RankData], steps: pl.DataFrame) -> pl.DataFrame:
    """step_trace_time rows where the profiler wrote them (Ascend), else the trace's own per-step device split."""
    if not steps.is_empty():
        return steps
    parts = [r.trace_steps.filter(pl.col("scope") == "step").select("step", "step_us", "free_us", "computing_us")
             .with_columns(pl.lit(r.rank, pl.Int64).alias("rank"))
             for r in ranks if getattr(r, "trace_steps", None) is not None and not r.trace_steps.is_empty()]
    return pl.concat(parts, how="diagonal_relaxed") if parts else steps
