"""The cause in an MoE layer's expert-parallel exchange: dispatch and combine that run with nothing computing
beside them (check ``moe-ep-exposed``, `analyses.moe.ep_cost`)."""

from __future__ import annotations

from profan.analyses.contract import Job
from profan.analyses.moe.ep_ops import wait_split
from profan.diagnosis.claims import Claims, Grounds, explainable, make_cause, span
from profan.model.causes import Cause
from profan.model.textfmt import ms


def exposed_ep(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Exposed dispatch / combine on the ranks whose findings no earlier cause took. Gain: the least exposed rank's
    exposed EP time per step — what hiding the exchange gives every rank of the group at least (a rank exposed
    longer waits for a peer: the exchange ends when the slowest rank's does)."""
    check = "moe-ep-exposed"
    found = [f for f in claims.unclaimed(check) if f.metrics["named"]]  # bare all-to-alls: a finding, no cause
    if not found:
        return []
    least = min(found, key=lambda f: f.metrics["exposed_us"])
    parts = least.metrics["by_part"]
    values = {
        "shares": span([float(f.metrics["share"]) for f in found], "{:.1%}"),
        "n_ranks": len({rank for f in found for rank in f.ranks}),
        "min_exposed_ms": least.metrics["exposed_us"] / 1000,
        "by_part": ", ".join(
            f"{p} {ms(v['exposed_us'])} exposed and {ms(v['hidden_us'])} hidden on rank {least.rank}"
            for p, v in sorted(parts.items())
        ),
    }
    split = wait_split(job.tables.get("moe_ep_ops"), least.rank)
    values["wait_split"] = (
        f"Of rank {least.rank}'s all-to-all time per step, {ms(split[0])} is waiting for the last rank to enter "
        f"each op and {ms(split[1])} the exchange itself (table moe_ep_ops: each op's start on the last-arriving "
        "rank less its start here): overlap hides the transfer, balancing the ranks removes the waiting."
        if split
        else "No cross-rank start times to split waiting from transfer (one rank captured)."
    )
    claims.own(found)
    steps = sorted({step for f in found for step in f.steps})
    ranks = sorted({rank for f in found for rank in f.ranks})
    explained = claims.take(explainable(job, check) - {check}, steps=steps, ranks=ranks)
    grounds = Grounds(sources=found, steps_us=steps_us, explained=explained, impact_us=least.metrics["exposed_us"])
    return [make_cause(job, check, values, grounds)]


def small_expert_gemms(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Experts launched one GEMM each with few rows, on the ranks graded warning or above (an info finding says
    the pattern, no more). Gain: the least flagged rank's gaps between its experts' GEMMs per step — what one
    grouped GEMM removes at least; the fuller tiles are not estimated."""
    check = "moe-small-expert-gemms"
    found = [f for f in claims.unclaimed(check) if f.severity != job.pack.check(check)["severity"]]
    if not found:
        return []
    least = min(found, key=lambda f: f.metrics["gap_us"])
    values = {
        "ranks": ", ".join(str(f.rank) for f in found),
        "rank": least.rank,
        "experts_per_layer": least.metrics["experts_per_layer"],
        "median_rows": least.metrics["median_rows"],
        "share": least.metrics["share"],
        "gap_ms": least.metrics["gap_us"] / 1000,
    }
    claims.own(found)
    ranks = sorted({rank for f in found for rank in f.ranks})
    explained = claims.take(explainable(job, check) - {check}, ranks=ranks)
    grounds = Grounds(sources=found, steps_us=steps_us, explained=explained, impact_us=least.metrics["gap_us"])
    return [make_cause(job, check, values, grounds)]
