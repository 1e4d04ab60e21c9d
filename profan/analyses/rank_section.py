"""What the analyses compute from each rank alone: step breakdowns, coverage, boundness, top kernels and
communication ops, for all ranks at once.

None of these compares ranks with each other, so each is the per-rank result stacked in rank order. They run as
one set of queries over every rank (keyed by rank: `analyses.common.kernel_table`), not one set per rank: a
polars query has a fixed cost of 0.1–0.3 ms, and 64 ranks × ~40 queries each cost 13 ms per rank — more than
the whole set over all 64 ranks. A map over batches of ranks (another machine's share of a cluster) can call
`rank_sections` on its batch: the result for a batch is the rows of those ranks.
"""

from __future__ import annotations

import polars as pl

from profan.analyses import boundness as bound
from profan.analyses import breakdown as bd
from profan.analyses import comm
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack


def rank_sections(ranks: list[RankData], pack: RulePack) -> tuple[dict[str, pl.DataFrame], dict[str, list[Finding]]]:
    """The per-rank tables (rows in rank order) and findings (per analysis, in rank order) of ``ranks``."""
    bound_tab = bound.boundness(ranks, pack)
    comm_tab = comm.comm_table(ranks)
    breakdown = bd.breakdown(ranks)
    tables = {"breakdown": breakdown,
              "top_kernels": bd.top_kernels(ranks, pack.check("step-breakdown")["table_steps_max"]),
              "boundness": bound_tab, "communication": comm_tab}
    findings = {"step_breakdown": bd.step_breakdown_findings(ranks, pack, breakdown),
                "coverage": bd.coverage_findings(ranks, pack),
                "boundness": bound.boundness_findings(ranks, bound_tab, pack),
                "transit": comm.transit_quirk_findings(comm_tab, pack)}
    return tables, findings
