"""The MoE analyses of each rank: its device time by part of the layer (`parts`) and what its expert-parallel
dispatch and combine cost, exposed or hidden behind compute (`ep_cost`). The expert balance across ranks is the
cross-rank section's (`balance`)."""

from __future__ import annotations

from profan.analyses.contract import Job, Section
from profan.analyses.moe import ep_cost, parts


def section(job: Job) -> Section:
    """Tables moe_parts (the breakdown's MoE and EP rows by part, with the rules that decided them) and
    moe_ep_cost (dispatch / combine exposed or hidden, per rank and step), and findings of exposed EP time."""
    tables = {"moe_parts": parts.moe_parts(job.ranks, job.pack), "moe_ep_cost": ep_cost.ep_cost(job.ranks)}
    findings = ep_cost.ep_findings(job.ranks, tables["moe_ep_cost"], job.pack)
    return Section(tables={key: value for key, value in tables.items() if not value.is_empty()}, findings=findings)
