"""Causes in the kernels themselves: attention or elementwise chains left unfused, hot kernels not bound by
compute, AI CPU fallbacks."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from profan.analyses.contract import Job
from profan.diagnosis.claims import Claims, Grounds, Wording, make_cause
from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.textfmt import fmt_ranks


def unfused_attention(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Attention run as separate matmul, softmax and matmul kernels, that no other cause explains: a fused kernel
    saves at least the softmax kernels' time of the rank that has least of it."""
    check = "unfused-attention"
    found = claims.unclaimed(check)
    if not found:
        return []
    per_rank: dict[int, list[float]] = {}
    for f in found:
        for r in f.ranks:
            per_rank.setdefault(r, []).append(float(f.metrics["softmax_us"]))
    worst = max(found, key=lambda f: float(f.metrics["softmax_us"]))
    values = {"other_ms": float(worst.metrics["other_us"]) / 1000, "kernels": "; ".join(worst.metrics["largest"])}
    saving = {r: statistics.fmean(value) for r, value in per_rank.items()}
    change = KernelChange(check, found, saving, "softmax_ms", values, lambda rank: rank.groups)
    return _kernel_change(job, claims, steps_us, change)


def unfused_elementwise(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Chains of elementwise kernels run one op at a time, that no other cause explains: fusing them saves at least
    the least affected rank's saving per step."""
    check = "unfused-elementwise"
    found = claims.unclaimed(check)
    if not found:
        return []
    # per step of the job: a saving in some steps only is spread over the job's steps; one outside any step
    # shortens no step (it counts only for a capture without steps)
    in_steps = [f for f in found if f.step in steps_us] if steps_us else found
    per_rank: dict[int, float] = {}
    for f in in_steps or found:
        for r in f.ranks:
            per_rank[r] = per_rank.get(r, 0.0) + float(f.metrics["saving_us"])
    worst = max(found, key=lambda f: float(f.metrics["saving_us"]))
    values = {
        "runs": int(worst.metrics["runs"]),
        "kernels": int(worst.metrics["kernels"]),
        "runs_named": "; ".join(worst.metrics["largest"]),
    }
    saving = {r: total / max(len(steps_us), 1) for r, total in per_rank.items()}
    change = KernelChange(check, found, saving, "saving_ms", values, lambda rank: rank.fusible)
    return _kernel_change(job, claims, steps_us, change)


@dataclass(frozen=True)
class KernelChange:
    """A change to some kernels (fusing them) as a check's findings propose it: the check and its findings, the
    saving per step on each rank they name (µs) and the name its least is filled in as (ms), the check's other
    values, and ``measured``: what of a rank's RankData the check reads (None: the rank could not be measured)."""

    check: str
    found: list[Finding]
    saving_us: dict[int, float]
    saving_name: str
    values: dict[str, Any]
    measured: Callable[[Any], object]


def _kernel_change(job: Job, claims: Claims, steps_us: dict[int, float], change: KernelChange) -> list[Cause]:
    """The cause of ``change``: the least of its savings, when every rank the check could measure has them — the
    ranks synchronise, so the step shortens only as much as its slowest rank; otherwise no estimate (the
    ``partial`` case names the ranks without them)."""
    saving_us = change.saving_us
    others = sorted({rank.rank for rank in job.ranks if change.measured(rank) is not None} - set(saving_us))
    least = min(saving_us.values())
    values = {
        **change.values,
        "ranks": fmt_ranks(sorted(saving_us)),
        "others": fmt_ranks(others),
        change.saving_name: least / 1000,
    }
    claims.own(change.found)
    case, impact = ("partial", None) if others else (None, least)
    cause = make_cause(
        job,
        change.check,
        values,
        Grounds(sources=change.found, steps_us=steps_us, impact_us=impact, bound_us=least),
        Wording(case=case),
    )
    return [cause]


def boundness(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Hot kernels bound by memory movement, the scalar unit or nothing, that no other cause explains."""
    check = "kernel-boundness"
    found = claims.unclaimed(check)
    if not found:
        return []
    ranks = sorted({rank for f in found for rank in f.ranks})
    by_rank: dict[int, float] = {}
    for f in found:
        for rank in f.ranks:
            by_rank[rank] = by_rank.get(rank, 0.0) + float(f.metrics["time_us"])
    names = sorted({f.title.split(": ", 1)[-1] for f in found})
    values = {
        "n_kernels": len(found),
        "bounds": ", ".join(sorted({str(f.metrics["dominant_pipe"]) for f in found})),
        "total_ms": max(by_rank.values(), default=0.0) / 1000,
        "ranks": fmt_ranks(ranks),
        "kernels": "; ".join(names[:6]) + (f"; and {len(names) - 6} more" if len(names) > 6 else ""),
    }
    claims.own(found)
    message = "; ".join(f.title for f in found[:6]) + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
    # making them compute-bound saves at most their time on the busiest rank
    bound = values["total_ms"] * 1000
    return [
        make_cause(
            job, check, values, Grounds(sources=found, steps_us=steps_us, bound_us=bound), Wording(message=message)
        )
    ]


def ai_cpu(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """AI CPU fallbacks above the check's share, that no other cause explains."""
    check = "ai-cpu-ops"
    found = claims.unclaimed(check)
    if not found:
        return []
    ops = sorted({str(op) for f in found for op in f.metrics.get("ops", [])})
    values = {
        "ranks": fmt_ranks(sorted({rank for f in found for rank in f.ranks})),
        "total_ms": max(float(f.metrics.get("time_us", 0.0)) for f in found) / 1000,
        "ops": ", ".join(ops[:8]) or "see the findings",
    }
    claims.own(found)
    bound = values["total_ms"] * 1000  # running them on the AI Core saves at most their AI CPU time
    return [make_cause(job, check, values, Grounds(sources=found, steps_us=steps_us, bound_us=bound))]
