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
    """A hot expert: its rank does more expert work and the expert-parallel group waits for it. Gain: the hot
    rank's expert time less what the slowest rank would take with balanced routing (`balanced_expert_us`)."""
    check = "moe-expert-imbalance"
    chk = job.pack.check(check)
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        hot = m["hot_rank"]
        load = {int(rank): float(value) for rank, value in m["values"].items()}
        bucket = chk.cause["expert_bucket"]
        expert_us = {rank: _bucket_per_step(job, rank, bucket) for rank in load}
        # the spread balanced routers keep is measured for tokens counted in traces; other sources: the mean
        floor = float(chk["token_ratio_floor"]) if "token_source" in m else 1.0
        target = balanced_expert_us(load, expert_us, hot, floor)
        excess = None if target is None or expert_us[hot] is None else max(expert_us[hot] - target, 0.0)
        values = {
            "hot_rank": hot,
            "hot_experts": ", ".join(map(str, m["hot_experts"])) or "its local experts",
            "ratio": m["ratio"],
            "metric": METRIC_WORDS.get(m["metric"], m["metric"]),
            "excess_ms": (excess or 0.0) / 1000,
            "hot_ms": (expert_us[hot] or 0.0) / 1000,
            "balanced_ms": (target or 0.0) / 1000,
            "floor": floor,
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


def balanced_expert_us(
    load: dict[int, float], expert_us: dict[int, float | None], hot: int, floor: float
) -> float | None:
    """The expert time per step of the slowest rank once routing is balanced, from the group's own ranks.

    Two things a balanced run keeps that "the hot rank at the mean" forgets: routers balanced by loss or bias
    still spread — the slowest rank carries ``floor`` × the mean load (the largest max/mean measured on balanced
    runs, check ``moe-expert-imbalance``'s ``token_ratio_floor``) — and expert time is not proportional to load:
    routing, launches and weight reads cost a rank the same with few tokens as with many. So the time is fitted
    as fixed + per-unit × load over the ranks (least squares) and read at ``floor`` × the mean load; with fewer
    than two distinct loads, or a fit that does not rise with load, time is taken proportional to load."""
    points = [(load[rank], us) for rank, us in expert_us.items() if us is not None]
    hot_us = expert_us.get(hot)
    if hot_us is None or not load.get(hot):
        return None
    mean = statistics.fmean(load.values())
    target_load = min(floor * mean, load[hot])
    loads = [point[0] for point in points]
    if len(set(loads)) > 1:
        slope, fixed = statistics.linear_regression(loads, [point[1] for point in points])
        if slope > 0 and fixed >= 0:
            return min(fixed + slope * target_load, hot_us)
    return hot_us * target_load / load[hot]


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
