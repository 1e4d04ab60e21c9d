"""Causes from findings: the last analysis of the pipeline.

Why an order: a symptom is explained by the first cause that claims it, and the causes that name a place (a slow
pipeline stage, a hot expert, a straggler, an imbalanced rank, a slow link) account for the waiting of every other
rank, so they claim first. What no such cause explains becomes a cause of its own kind (idle device, exposed
transfers, kernels not bound by compute, AI CPU fallbacks), one per kind across ranks and steps.

Every estimate is per step and conservative: the smallest saving the data supports under the assumption the cause
states, never more than the step (`fold` caps the sum). Where the data cannot support one, the cause has none and
its assumption says why. The words (title, action, how to verify, competing explanations) are templates in
rules/checks.toml; the builders (`rank_causes`, `comm_causes`, `kernel_causes`, `idle_causes`) only compute the
numbers that fill them, with what `claims` gives them all.
"""

from __future__ import annotations

from profan.analyses.contract import Job, Section
from profan.diagnosis import comm_causes, ep_causes, idle_causes, kernel_causes, rank_causes, rl_causes, serving_causes
from profan.diagnosis.claims import SYMPTOMS, Claims, step_times
from profan.diagnosis.cost import step_cost
from profan.diagnosis.severity import grade_findings, run_kind
from profan.diagnosis.step import denominator, step_summary
from profan.model.causes import Cause


def section(job: Job) -> Section:
    """The causes of the job's findings, each with the findings it explains (by `Finding.key`), and the cost
    model of each rank's step (table step_cost) they are measured against."""
    # graded by cost first, as the report shows them; a cause is built from what its check detected (a straggler
    # its cost makes info is still the rank the others wait for) and kept only if its gain is worth it
    claims = Claims(graded(job), {finding.key for finding in job.findings if finding.severity in SYMPTOMS})
    steps_us = step_times(job)
    cost = step_cost(job.steps, job.tables["trace_steps"], job.tables["comm_exposed"])
    causes: list[Cause] = []
    builders = (
        rl_causes.long_tail,  # an RL job's causes first: they name the phase every rank of the step waits for
        rl_causes.weight_sync,
        rl_causes.update_dominated,
        rl_causes.gen_under_batched,
        rl_causes.logprob_unfused,
        rank_causes.stage,
        rank_causes.moe,
        rank_causes.straggler,
        rank_causes.compute,
        comm_causes.slow_link,
        comm_causes.waited_peer,
        comm_causes.late_peers,
        comm_causes.overlappable,
        ep_causes.exposed_ep,
        ep_causes.small_expert_gemms,
        comm_causes.exposed_transfer,
        comm_causes.unsplit_exposed,
        kernel_causes.unfused_attention,
        kernel_causes.unfused_elementwise,
        kernel_causes.boundness,
        kernel_causes.ai_cpu,
        idle_causes.idle_between,
        serving_causes.prefill_interference,
        serving_causes.launch_bound,
        serving_causes.host_gaps,
    )
    for build in builders:
        causes += build(job, claims, steps_us)
    causes += idle_causes.idle(
        job, claims, steps_us, cost
    )  # last: it explains only the idle no other cause accounts for
    return Section(causes=causes, tables={"step_cost": cost})


def graded(job: Job) -> list:
    """The job's findings graded by their cost (`severity.grade_findings`), as the report will show them."""
    traced = job.tables.get("trace_steps")
    step = denominator(step_summary({"steps": job.steps, "trace_steps": traced}, []))
    return grade_findings(list(job.findings), job.pack.severity, run_kind(job.ranks, traced), step)
