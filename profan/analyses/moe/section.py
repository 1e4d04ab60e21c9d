"""The MoE analyses of each rank: its device time by part of the layer (`parts`) and what its expert-parallel
dispatch and combine cost, exposed or hidden behind compute (`ep_cost`). The expert balance across ranks is the
cross-rank section's (`balance`)."""

from __future__ import annotations

from profan.analyses.contract import Job, Section
from profan.analyses.moe import ep_cost, ep_ops, expert_gemms, parts
from profan.rulepack.hardware import load as load_hardware


def section(job: Job) -> Section:
    """Tables moe_parts (the breakdown's MoE and EP rows by part, with the rules that decided them) and
    moe_ep_cost (dispatch / combine exposed or hidden, per rank and step), moe_ep_ops (each all-to-all's waiting
    for the late peer vs transfer, and its bandwidth against the link prior), and findings of exposed EP time."""
    tables = {"moe_parts": parts.moe_parts(job.ranks, job.pack), "moe_ep_cost": ep_cost.ep_cost(job.ranks)}
    tables["moe_ep_ops"] = ep_ops.ep_ops(job.ranks, job.pack, job.hardware or load_hardware())
    tables["moe_expert_gemms"] = expert_gemms.expert_gemms(job.ranks, job.pack)
    findings = ep_cost.ep_findings(job.ranks, tables["moe_ep_cost"], job.pack)
    findings += expert_gemms.expert_gemm_findings(job.ranks, tables["moe_expert_gemms"], job.steps, job.pack)
    # moe_ep_ops is read by the causes, so it is always there (empty tables leave the report at its end)
    kept = {key: value for key, value in tables.items() if key == "moe_ep_ops" or not value.is_empty()}
    return Section(tables=kept, findings=findings)
