"""The MoE analyses of each rank: its device time by part of the layer (`parts`) and what its expert-parallel
dispatch and combine cost, exposed or hidden behind compute (`ep_cost`). The expert balance across ranks is the
cross-rank section's (`balance`)."""

from __future__ import annotations

from profan.analyses.contract import Job, Section
from profan.analyses.moe import parts


def section(job: Job) -> Section:
    """Tables moe_parts (the breakdown's MoE and EP rows by part, with the rules that decided them)."""
    table = parts.moe_parts(job.ranks, job.pack)
    return Section(tables={"moe_parts": table} if not table.is_empty() else {})
