"""Causes of an RL job's step (rules/checks.toml rl-*): the rollout's long tail, the exposed weight sync and a
step the update dominates, each from its finding of `analyses.rl.section`, measured against the RL ledger's steps
(table rl_steps) rather than a trace's own step windows: one RL step spans every role's trace."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from profan.analyses.contract import Job
from profan.diagnosis.claims import Claims, Grounds, Wording, make_cause
from profan.model.causes import Cause
from profan.model.textfmt import ms, pct


def _steps_us(job: Job) -> dict[int, float]:
    steps = job.tables.get("rl_steps")
    return {} if steps is None or steps.is_empty() else dict(steps.select("step", "step_us").iter_rows())


def _explained(claims: Claims) -> list:
    """The ledger findings of the ranks a cause keeps waiting: every RL rank's (the pool idles for it)."""
    return claims.take(["rl-step-ledger"])


def _causes(job: Job, claims: Claims, check: str, said: Callable[[dict], dict], gain_key: str | None) -> list[Cause]:
    """One cause per finding of ``check`` at warning or above: the check's texts filled with ``said(metrics)``,
    its gain the finding's ``gain_key`` metric (else its bound, ``said``'s ``excess_ms``), measured against the RL
    ledger's steps, explaining every RL rank's ledger finding."""
    out = []
    for f in claims.take([check], severities=("critical", "warning")):
        m, values = f.metrics, said(f.metrics)
        measure = {"impact_us": m[gain_key]} if gain_key else {"bound_us": values["excess_ms"] * 1000}
        grounds = Grounds(
            sources=[f], steps_us=_steps_us(job), explained=_explained(claims), steps=m.get("steps", []), **measure
        )
        out.append(make_cause(job, check, values, grounds, Wording(message=f.message)))
    return out


def _steps_said(m: dict) -> str:
    return ", ".join(map(str, m["steps"]))


def long_tail(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    which = job.pack.check("rl-long-tail").params

    def said(m: dict) -> dict:
        return {
            "worker": m["worker"],
            "tail": ms(m["tail_us"]),
            "tail_ms": m["tail_us"] / 1000,
            "share": pct(m["tail_us"] / m["step_us"]),
            "wait": pct(m["wait_share"]),
            "forwards": m["forwards"],
            "others_forwards": m["others_forwards"],
            "which": which["longer" if m["forwards"] > m["others_forwards"] else "slower"],
            "steps": _steps_said(m),
        }

    return _causes(job, claims, "rl-long-tail", said, "tail_us")


def weight_sync(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    def said(m: dict) -> dict:
        return {
            "sync": ms(m["sync_us"]),
            "sync_ms": m["sync_us"] / 1000,
            "share": pct(m["sync_us"] / m["step_us"]),
            "steps": _steps_said(m),
            "longest": _longest_gap(job),
        }

    return _causes(job, claims, "rl-weight-sync", said, "sync_us")


def update_dominated(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    """No gain: what the update could save is not in the trace; its share above the threshold bounds it."""

    def said(m: dict) -> dict:
        return {
            "share": pct(m["update_us"] / m["step_us"]),
            "update": ms(m["update_us"]),
            "threshold": pct(m["threshold"]),
            "excess_ms": (m["update_us"] - m["threshold"] * m["step_us"]) / 1000,
        }

    return _causes(job, claims, "rl-update-dominated", said, None)


def gen_under_batched(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    def said(m: dict) -> dict:
        return {
            "worker": m["worker"],
            "sequences": m["sequences"],
            "passes": m["passes"],
            "per_forward": f"{m['sequences_per_forward']:.0f}",
            "gain_ms": m["gain_us"] / 1000,
            "steps": _steps_said(m),
        }

    return _causes(job, claims, "rl-gen-under-batched", said, "gain_us")


def logprob_unfused(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    def said(m: dict) -> dict:
        return {
            "micro_batch": f"{m['micro_batch']:.0f}",
            "sequences": m["sequences"],
            "gain": ms(m["gain_us"]),
            "gain_ms": m["gain_us"] / 1000,
            "steps": _steps_said(m),
        }

    return _causes(job, claims, "rl-logprob-unfused", said, "gain_us")


def _longest_gap(job: Job) -> str:
    """What the ledger says of the sync on the generating ranks: their busy time in it, against its window."""
    led = job.tables.get("rl_ledger")
    if led is None or led.is_empty():
        return "the RL ledger has no rank rows"
    sync = (
        led.filter(pl.col("phase") == "weight sync")
        .group_by("role")
        .agg(pl.col("busy_us").mean(), pl.col("window_us").mean())
    )
    return (
        "; ".join(f"{role} ranks busy {ms(b)} of its {ms(w)}" for role, b, w in sync.sort("role").iter_rows())
        + " — the rest is waiting, not transfer or load work"
    )
