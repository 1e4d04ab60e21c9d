"""Causes of an RL job's step (rules/checks.toml rl-*): the rollout's long tail, the exposed weight sync and a
step the update dominates, each from its finding of `analyses.rl.section`, measured against the RL ledger's steps
(table rl_steps) rather than a trace's own step windows: one RL step spans every role's trace."""

from __future__ import annotations

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


def long_tail(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    out = []
    for f in claims.take(["rl-long-tail"], severities=("critical", "warning")):
        m, steps_us = f.metrics, _steps_us(job)
        values = {
            "worker": m["worker"],
            "tail": ms(m["tail_us"]),
            "tail_ms": m["tail_us"] / 1000,
            "share": pct(m["tail_us"] / m["step_us"]),
            "wait": pct(m["wait_share"]),
            "forwards": m["forwards"],
            "others_forwards": m["others_forwards"],
            "which": job.pack.check("rl-long-tail").params[
                "longer" if m["forwards"] > m["others_forwards"] else "slower"
            ],
            "steps": ", ".join(map(str, m["steps"])),
        }
        grounds = Grounds(
            sources=[f], steps_us=steps_us, impact_us=m["tail_us"], explained=_explained(claims), steps=m["steps"]
        )
        out.append(make_cause(job, "rl-long-tail", values, grounds, Wording(message=f.message)))
    return out


def weight_sync(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    out = []
    for f in claims.take(["rl-weight-sync"], severities=("critical", "warning")):
        m = f.metrics
        values = {
            "sync": ms(m["sync_us"]),
            "sync_ms": m["sync_us"] / 1000,
            "share": pct(m["sync_us"] / m["step_us"]),
            "steps": ", ".join(map(str, m["steps"])),
            "longest": _longest_gap(job),
        }
        grounds = Grounds(
            sources=[f],
            steps_us=_steps_us(job),
            impact_us=m["sync_us"],
            explained=_explained(claims),
            steps=m["steps"],
        )
        out.append(make_cause(job, "rl-weight-sync", values, grounds, Wording(message=f.message)))
    return out


def update_dominated(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    out = []
    for f in claims.take(["rl-update-dominated"], severities=("critical", "warning")):
        m = f.metrics
        excess = m["update_us"] - m["threshold"] * m["step_us"]
        values = {
            "share": pct(m["update_us"] / m["step_us"]),
            "update": ms(m["update_us"]),
            "threshold": pct(m["threshold"]),
            "excess_ms": excess / 1000,
        }
        grounds = Grounds(sources=[f], steps_us=_steps_us(job), bound_us=excess, explained=_explained(claims))
        out.append(make_cause(job, "rl-update-dominated", values, grounds, Wording(message=f.message)))
    return out


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


def gen_under_batched(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    out = []
    for f in claims.take(["rl-gen-under-batched"], severities=("critical", "warning")):
        m = f.metrics
        values = {
            "worker": m["worker"],
            "sequences": m["sequences"],
            "passes": m["passes"],
            "per_forward": f"{m['sequences_per_forward']:.0f}",
            "gain_ms": m["gain_us"] / 1000,
            "steps": ", ".join(map(str, m["steps"])),
        }
        grounds = Grounds(
            sources=[f], steps_us=_steps_us(job), impact_us=m["gain_us"], explained=_explained(claims), steps=m["steps"]
        )
        out.append(make_cause(job, "rl-gen-under-batched", values, grounds, Wording(message=f.message)))
    return out


def logprob_unfused(job: Job, claims: Claims, _steps: dict[int, float]) -> list[Cause]:
    out = []
    for f in claims.take(["rl-logprob-unfused"], severities=("critical", "warning")):
        m = f.metrics
        values = {
            "micro_batch": f"{m['micro_batch']:.0f}",
            "sequences": m["sequences"],
            "gain": ms(m["gain_us"]),
            "gain_ms": m["gain_us"] / 1000,
            "steps": ", ".join(map(str, m["steps"])),
        }
        grounds = Grounds(
            sources=[f], steps_us=_steps_us(job), impact_us=m["gain_us"], explained=_explained(claims), steps=m["steps"]
        )
        out.append(make_cause(job, "rl-logprob-unfused", values, grounds, Wording(message=f.message)))
    return out
