"""Serving causes: launch-bound decode iterations, host gaps between iterations, prefill iterations that stall
the decodes (findings of `profan.analyses.serving.findings`). Each gain is a bound: the measured idle, gap or
stall per iteration on the least affected rank, against that rank's iterations as the step."""

from __future__ import annotations

from profan.analyses.contract import Job
from profan.analyses.serving.findings import GAPS, INTERFERENCE, LAUNCH, delays_text, slow_iterations
from profan.diagnosis.claims import Claims, Grounds, make_cause
from profan.model.causes import Cause
from profan.model.textfmt import counted, fmt_ranks, ms, pct

COST = {LAUNCH: "between_kernels_us", GAPS: "device_gap_us", INTERFERENCE: "stall_us"}
# the iteration each cause's gain is a share of (its finding's ``iteration_periods``): the cause's own step, which
# the verdict's step does not replace (`profan.diagnosis.step.own_step`)
PER = {LAUNCH: "decode iteration", GAPS: "iteration", INTERFERENCE: "decode iteration"}
SHARE_OF = {LAUNCH: "a decode iteration", GAPS: "an iteration", INTERFERENCE: "a decode iteration"}


def _cause(job: Job, claims: Claims, check: str) -> list[Cause]:
    found = claims.unclaimed(check)
    if not found:
        return []
    cost = COST[check]
    least = min(found, key=lambda f: float(f.metrics[cost]))
    worst = max(found, key=lambda f: float(f.metrics["worst_us"]))
    w = worst.metrics
    values = {
        "ranks": fmt_ranks(sorted({rank for f in found for rank in f.ranks})),
        "on_ranks": counted(sorted({rank for f in found for rank in f.ranks}), "rank"),
        "device": w["device"],
        "idle": ms(least.metrics[cost]),
        "gap": ms(least.metrics[cost]),
        "stall": ms(least.metrics.get("stall_total_us", 0.0)),
        "total": ms(least.metrics.get("gap_total_us", 0.0)),
        "span": ms(least.metrics.get("span_us", 0.0)),
        "share": pct(least.metrics["share"]),
        "bound_ms": float(least.metrics[cost]) / 1000,
        "worst_rank": worst.rank,
        "worst_iteration": w["worst_iteration"],
        "worst_idle": ms(w["worst_us"]),
        "worst_gap": ms(w["worst_us"]),
        "worst_period": ms(_worst_period(w)),
        "iterations": slow_iterations(w.get("slow", [])),
        "delays": delays_text(w.get("slow", [])),
        "per": PER[check],
        "share_of": SHARE_OF[check],
    }
    claims.own(found)
    periods = {int(key): float(value) for key, value in least.metrics["iteration_periods"].items()}
    grounds = Grounds(sources=found, steps_us=periods, bound_us=float(least.metrics[cost]))
    return [make_cause(job, check, values, grounds)]


def _worst_period(metrics: dict) -> float:
    """The worst iteration's period: from an interference finding's slow rows, else its iteration periods."""
    slow = {row["iteration"]: row["period_us"] for row in metrics.get("slow", [])}
    worst = metrics["worst_iteration"]
    return float(slow.get(worst, metrics["iteration_periods"].get(worst, metrics["worst_us"])))


def launch_bound(job: Job, claims: Claims, _steps_us: dict[int, float]) -> list[Cause]:
    return _cause(job, claims, LAUNCH)


def host_gaps(job: Job, claims: Claims, _steps_us: dict[int, float]) -> list[Cause]:
    return _cause(job, claims, GAPS)


def prefill_interference(job: Job, claims: Claims, _steps_us: dict[int, float]) -> list[Cause]:
    return _cause(job, claims, INTERFERENCE)
