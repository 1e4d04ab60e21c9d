"""What the analyses compute from one rank alone, run in the per-rank map right after the rank is read.

Why here: a cluster's per-rank findings and tables (step breakdowns, coverage, boundness, top kernels,
communication ops) used to be computed after every rank was read, in one process; at 64 ranks that was a third of
the run. Each rank's share now runs where the rank was read (a worker process; later another machine), and the
reduce (`profan.pipeline.build_report`) concatenates the small results and runs the cross-rank analyses.

Each function below is the same one the reduce would call, given a one-rank list: the concatenation over ranks is
exactly the all-ranks result (they never compare ranks with each other).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from profan.analyses import boundness as bound
from profan.analyses import breakdown as bd
from profan.analyses import comm
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack

TABLES = ("breakdown", "top_kernels", "boundness", "communication")
FINDINGS = ("step_breakdown", "coverage", "boundness", "transit")  # in the report's order


@dataclass
class RankSection:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    findings: dict[str, list[Finding]] = field(default_factory=dict)


def rank_section(rd: RankData, pack: RulePack) -> RankSection:
    one = [rd]
    bound_tab = bound.boundness(one, pack)
    comm_tab = comm.comm_table(one)
    return RankSection(
        tables={"breakdown": bd.breakdown(one),
                "top_kernels": bd.top_kernels(one, pack.check("step-breakdown")["table_steps_max"]),
                "boundness": bound_tab, "communication": comm_tab},
        findings={"step_breakdown": bd.step_breakdown_findings(one, pack),
                  "coverage": bd.coverage_findings(one, pack),
                  "boundness": bound.boundness_findings(one, bound_tab, pack),
                  "transit": comm.transit_quirk_findings(comm_tab, pack)})


def gather(ranks: list[RankData], pack: RulePack) -> tuple[dict[str, pl.DataFrame], dict[str, list[Finding]]]:
    """All ranks' sections joined: tables concatenated in rank order, findings per analysis in rank order. A rank
    read without its section (RankData built by hand) gets it computed here."""
    sections = [r.section if isinstance(r.section, RankSection) else rank_section(r, pack) for r in ranks]
    tables = {}
    for name in TABLES:
        parts = [s.tables[name] for s in sections if not s.tables[name].is_empty()]
        tables[name] = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
    tables["breakdown"] = bd.sort_breakdown(tables["breakdown"])
    findings = {k: [f for s in sections for f in s.findings[k]] for k in FINDINGS}
    return tables, findings
