"""The analyses of each rank alone: step breakdowns, coverage, boundness, top kernels and communication ops, for
all ranks at once.

None of these compares ranks with each other, so each is the per-rank result stacked in rank order. They run as
one set of queries over every rank (keyed by rank: `analyses.common.kernel_table`), not one set per rank: a
polars query has a fixed cost of 0.1–0.3 ms, and 64 ranks × ~40 queries each cost 13 ms per rank — more than
the whole set over all 64 ranks. A map over batches of ranks (another machine's share of a cluster) can call
`rank_sections` on its batch: the result for a batch is the rows of those ranks.
"""

from __future__ import annotations

from profan.analyses.communication import op_time as comm
from profan.analyses.contract import Analysis, Job, Section, run_analyses
from profan.analyses.per_rank import boundness as bound
from profan.analyses.per_rank import breakdown as bd
from profan.analyses.per_rank.attention import unfused_findings
from profan.analyses.per_rank.elementwise import chain_findings
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks
from profan.rulepack.pack import RulePack


def breakdown_section(job: Job) -> Section:
    """Device time per rank, step and bucket (over all steps too, for long captures), and what no rule explains."""
    table = bd.breakdown(job.ranks)
    steps_max = job.pack.check("step-breakdown")["table_steps_max"]
    return Section(
        tables={"breakdown": table, "breakdown_all_steps": bd.breakdown_over_steps(table, steps_max)},
        findings=[*bd.step_breakdown_findings(job.ranks, job.pack, table), *bd.coverage_findings(job.ranks, job.pack)],
    )


def kernel_section(job: Job) -> Section:
    """The top kernels of each bucket, what bounds the hottest ones, attention and elementwise chains run unfused."""
    bound_tab = bound.boundness(job.ranks, job.pack)
    steps_max = job.pack.check("step-breakdown")["table_steps_max"]
    return Section(
        tables={"top_kernels": bd.top_kernels(job.ranks, steps_max), "boundness": bound_tab},
        findings=[
            *bound.boundness_findings(job.ranks, bound_tab, job.pack),
            *unfused_findings(job.ranks, job.pack),
            *chain_findings(job.ranks, job.pack),
        ],
    )


def comm_ops_section(job: Job) -> Section:
    """The communication ops of communication.json (the table later communication analyses read)."""
    comm_tab = comm.comm_table(job.ranks)
    return Section(tables={"communication": comm_tab}, findings=comm.transit_quirk_findings(comm_tab, job.pack))


def unassessed_section(job: Job) -> Section:
    """Notes on what could not be assessed for want of kernel rows or their pipe ratios."""
    notes = []
    ranks = job.ranks
    no_pipes = [
        rank
        for rank in ranks
        if rank.groups is not None and not rank.has_pipe_ratios and rank.kernel_locator == "lines"
    ]
    if no_pipes:
        notes.append(
            "kernel boundness not assessed for ranks whose kernel_details.csv has no PipeUtilization "
            "ratios: " + ", ".join(str(rank.rank) for rank in no_pipes)
        )
    if not any(rank.groups is not None for rank in ranks):
        notes.append("no kernel_details.csv / op_summary found: no per-kernel breakdown")
    unordered = [rank for rank in ranks if rank.groups is not None and rank.fusible is None]
    if unordered:
        notes.append(
            "chains of elementwise kernels (unfused-elementwise) not assessed for ranks without a Kineto trace "
            "of their device events (a kernel file is read as groups, not in issue order): "
            + fmt_ranks(rank.rank for rank in unordered)
        )
    return Section(notes=notes)


def rank_sections(ranks: list[RankData], pack: RulePack) -> Section:
    """The per-rank analyses of ``ranks`` as one section: tables with rows in rank order, each analysis's findings
    in rank order."""
    return run_analyses(
        [
            Analysis("breakdown", breakdown_section),
            Analysis("kernels", kernel_section),
            Analysis("communication ops", comm_ops_section),
        ],
        Job(ranks=ranks, pack=pack),
    )
