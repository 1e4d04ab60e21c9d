"""Causes that name the ranks at fault: a slow pipeline stage, a hot expert, a straggler, a rank that computes
more than its peers. They claim first: the waiting of every other rank is theirs."""

from __future__ import annotations

import statistics

import polars as pl

from profan.analyses.across_ranks.imbalance import pp_stages
from profan.analyses.contract import Job
from profan.diagnosis.claims import Claims, Grounds, Wording, explainable, make_cause
from profan.model.causes import Cause
from profan.model.textfmt import fmt_ranks

METRIC_WORDS = {"tokens": "tokens", "gmm_us": "expert GEMM time", "moe_us": "MoE-bucket time"}


def stage(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A slow pipeline stage: the others wait for it in their PP receives. Gain: its excess over the stages' mean
    Computing, which moving layers can remove."""
    check = "pipeline-stage-imbalance"
    stage_of, _ = pp_stages(job.ranks)
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        frame = job.steps.filter(pl.col("step") == f.step, pl.col("rank").is_in(list(stage_of)))
        means = (
            frame.with_columns(pl.col("rank").replace_strict(stage_of, return_dtype=pl.Int64).alias("stage"))
            .group_by("stage")
            .agg(pl.col("computing_us").mean())["computing_us"]
            .to_list()
        )
        mean_us = statistics.fmean(means) if means else m["fast_computing_us"]
        excess = m["slow_computing_us"] - mean_us
        kernels = [
            f"{e.select['op']} ({e.select['input_shapes']})" if e.select.get("input_shapes") else e.select["op"]
            for e in f.evidence
            if "op" in e.select
        ]
        values = {
            **{k: m[k] for k in ("slow_stage", "fast_stage", "ratio")},
            "slow_ranks": fmt_ranks(m["slow_ranks"]),
            "fast_ranks": fmt_ranks(m["fast_ranks"]),
            "slow_ms": m["slow_computing_us"] / 1000,
            "mean_ms": mean_us / 1000,
            "move_ms": excess / 1000,
            "extra_kernels": "; ".join(kernels) or "not broken down (no kernel rows)",
        }
        claims.own([f])
        explained = [
            *claims.take(explainable(job, check) - {"kernel-boundness"}, steps=[f.step]),
            *claims.take({"kernel-boundness"}, ranks=m["slow_ranks"]),
        ]
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(sources=[f], steps_us=steps_us, explained=explained, impact_us=excess, ranks=m["slow_ranks"]),
            )
        )
    return out


def moe(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A hot expert: its rank does more expert work and the expert-parallel group waits for it."""
    check = "moe-expert-imbalance"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        hot = m["hot_rank"]
        value = float(m["values"][str(hot)])
        # the hot rank's expert time per step, of which the share above the mean goes with balanced routing
        expert_us = _bucket_per_step(job, hot, job.pack.check(check).cause["expert_bucket"])
        excess = None if not value or expert_us is None else expert_us * (1 - float(m["mean"]) / value)
        values = {
            "hot_rank": hot,
            "hot_experts": ", ".join(map(str, m["hot_experts"])) or "its local experts",
            "ratio": m["ratio"],
            "metric": METRIC_WORDS.get(m["metric"], m["metric"]),
            "excess_ms": (excess or 0.0) / 1000,
        }
        claims.own([f])
        explained = [
            *claims.take({"straggler", "compute-imbalance"}, ranks=[hot]),
            *claims.take(explainable(job, check) - {"straggler", "compute-imbalance"}, not_ranks=[hot]),
        ]
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(sources=[f], steps_us=steps_us, explained=explained, impact_us=excess, ranks=[hot]),
            )
        )
    return out


def _bucket_per_step(job: Job, rank: int, bucket: str) -> float | None:
    """A rank's kernel time in one bucket, mean per step (the breakdown table); None when it has none."""
    b = job.tables.get("breakdown")
    if b is None or b.is_empty():
        return None
    rows = b.filter((pl.col("rank") == rank) & (pl.col("bucket") == bucket) & pl.col("step").is_not_null())
    return float(rows["time_us"].sum()) / rows["step"].n_unique() if not rows.is_empty() else None


def straggler(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A rank the others wait for at the collectives. Gain: how much later than the second-latest rank it
    arrived, per step — the collectives would have finished that much sooner without it."""
    check = "straggler"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        if f.rank is None or "lag_us" not in m:
            continue
        per_step = {int(key): float(value) for key, value in (m.get("lag_us_per_step") or {}).items()}
        steps = sorted({*f.steps, *per_step})
        # per step of the job: a rank late in some steps only saves in those
        lag_us = sum(per_step.values()) / max(len(steps_us), len(per_step), 1) if per_step else m["lag_us"]
        why = str(m.get("cause_class", "unknown"))
        values = {
            "rank": f.rank,
            "typical_rank": m.get("typical_rank", m.get("median_rank", 0)),
            "why_text": why.replace("_", " "),
            "lag_ms": lag_us / 1000,
            "caused_ms": float(m.get("caused_wait_us") or 0.0) / 1000,
        }
        claims.own([f])
        own = {"compute-imbalance", *({"device-idle"} if why == "host_gap" else set())}
        explained = [
            *claims.take(own, ranks=[f.rank]),
            *claims.take(explainable(job, check) - own, not_ranks=[f.rank], steps=steps or None),
        ]
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(sources=[f], steps_us=steps_us, explained=explained, impact_us=lag_us, steps=steps),
                Wording(case=why),
            )
        )
    return out


def compute(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A rank that computes more than the ranks it should match. Gain: its excess over the median rank."""
    check = "compute-imbalance"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        if f.rank is None:
            continue
        median_rank = m["median_rank"]
        excess = m["max_computing_us"] - m["median_computing_us"]
        values = {
            "rank": f.rank,
            "ratio": m["ratio"],
            "median_rank": median_rank,
            "against": m["against"],
            "excess_ms": excess / 1000,
        }
        claims.own([f])
        # a finding over each rank's median step names its steps in its metrics, one of a single step its step
        steps = m.get("steps") or ([f.step] if f.step is not None else None)
        explained = claims.take(explainable(job, check), ranks=m["ranks"], not_ranks=[f.rank], steps=steps)
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(sources=[f], steps_us=steps_us, explained=explained, impact_us=excess, ranks=[f.rank]),
            )
        )
    return out
