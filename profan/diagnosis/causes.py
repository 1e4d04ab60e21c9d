"""Causes from findings: the last analysis of the pipeline.

Why an order: a symptom is explained by the first cause that claims it, and the causes that name a place (a slow
pipeline stage, a hot expert, a straggler, an imbalanced rank, a slow link) account for the waiting of every other
rank, so they claim first. What no such cause explains becomes a cause of its own kind (idle device, exposed
transfers, kernels not bound by compute, AI CPU fallbacks), one per kind across ranks and steps.

Every estimate is per step and conservative: the smallest saving the data supports under the assumption the cause
states, never more than the step (`fold` caps the sum). Where the data cannot support one, the cause has none and
its assumption says why. The words (title, action, how to verify, competing explanations) are templates in
rules/checks.toml; this module only computes the numbers that fill them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl

from profan.analyses.common import fmt_ranks, ms, step_periods
from profan.analyses.contract import Job, Section
from profan.analyses.imbalance import pp_stages
from profan.diagnosis.cost import step_cost
from profan.model.causes import Cause
from profan.model.findings import Finding

SYMPTOMS = ("critical", "warning")  # severities of findings a cause is made from
# what the MoE check measured per rank, in words
METRIC_WORDS = {"tokens": "tokens", "gmm_us": "expert GEMM time", "moe_us": "MoE-bucket time"}


def section(job: Job) -> Section:
    """The causes of the job's findings, each with the findings it explains (by `Finding.key`), and the cost
    model of each rank's step (table step_cost) they are measured against."""
    claims = Claims(job.findings)
    steps_us = step_times(job)
    cost = step_cost(job.steps, job.tables["trace_steps"], job.tables["comm_exposed"])
    causes: list[Cause] = []
    builders = (
        _stage,
        _moe,
        _straggler,
        _compute,
        _slow_link,
        _waited_peer,
        _late_peers,
        _exposed_transfer,
        _unfused_attention,
        _unfused_elementwise,
        _boundness,
        _ai_cpu,
        _idle_between,
    )
    for build in builders:
        causes += build(job, claims, steps_us)
    causes += _idle(job, claims, steps_us, cost)  # last: it explains only the idle no other cause accounts for
    return Section(causes=causes, tables={"step_cost": cost})


class Claims:
    """Which findings a cause already explains: each finding is explained by the first cause that claims it."""

    def __init__(self, findings: Iterable[Finding]) -> None:
        self.findings = list(findings)
        self.taken: set[tuple] = set()

    def take(
        self,
        checks: Iterable[str],
        *,
        steps: Iterable[int] | None = None,
        ranks: Iterable[int] | None = None,
        not_ranks: Iterable[int] = (),
        severities: tuple[str, ...] = ("critical", "warning", "info"),
    ) -> list[Finding]:
        """The unclaimed findings of ``checks`` (in ``steps``, on ``ranks``, not on ``not_ranks``), now claimed. A
        finding for no particular step (or rank) matches any step (or rank); one for neither is a claim about the
        whole job, not a symptom, and is claimed only as a source (`own`)."""
        checks, exclude = set(checks), set(not_ranks)
        step_set = None if steps is None else set(steps)
        rank_set = None if ranks is None else set(ranks)
        out = [
            f
            for f in self.findings
            if f.key not in self.taken
            and (f.rank is not None or f.step is not None)
            and f.check in checks
            and f.severity in severities
            and (step_set is None or f.step is None or f.step in step_set)
            and (rank_set is None or f.rank is None or f.rank in rank_set)
            and (f.rank is None or f.rank not in exclude)
        ]
        self.taken.update(f.key for f in out)
        return out

    def own(self, sources: Iterable[Finding]) -> None:
        """Claim a cause's own source findings."""
        self.taken.update(f.key for f in sources)

    def unclaimed(self, check: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check and f.key not in self.taken and f.severity in SYMPTOMS]


def step_times(job: Job) -> dict[int, float]:
    """Per step, the slowest rank's step time: the step every rank waits for (step_trace_time.csv, else the
    traces' ProfilerStep windows)."""
    frames = []
    if not job.steps.is_empty():
        frames.append(job.steps.select("step", "step_us"))
    traced = job.tables.get("trace_steps")
    if traced is not None and not traced.is_empty():
        frames.append(traced.filter(pl.col("scope") == "step").select("step", "step_us"))
    if not frames:
        return {}
    per = pl.concat(frames).drop_nulls().group_by("step").agg(pl.col("step_us").max())
    return dict(per.iter_rows())


def make_cause(
    job: Job,
    check: str,
    values: dict[str, Any],
    *,
    sources: list[Finding],
    explained: list[Finding],
    impact_us: float | None,
    steps_us: dict[int, float],
    message: str | None = None,
    case: str | None = None,
    ranks: Iterable[int] = (),
    steps: Iterable[int] = (),
    action_case: str | None = None,
) -> Cause:
    """A cause of ``check`` from its source findings, its texts filled from rules/checks.toml with ``values``."""
    rule = job.pack.check(check).cause
    steps = sorted({*steps, *(s for f in sources for s in f.steps)})
    # the ranks at fault: those given, else every rank the source findings name
    ranks = sorted(set(ranks) or {r for f in sources for r in f.ranks})
    measured = [steps_us[s] for s in steps if s in steps_us] or list(steps_us.values())
    step_us = statistics.fmean(measured) if measured else None
    if impact_us is not None and step_us:
        impact_us = min(max(impact_us, 0.0), step_us)
    fill = _filler(values)

    def text(key: str) -> str:  # a case's own text where the rule has one (``<case>_<key>``), else the rule's
        return rule.get(f"{case}_{key}", rule[key]) if case else rule[key]

    action = rule.get(f"{action_case}_action", text("action")) if action_case else text("action")
    assumption = text("assumption")
    evidence = tuple(e for f in sources for e in f.evidence)
    return Cause(
        check=check,
        title=fill(text("title")),
        message=message if message is not None else " ".join(f.message for f in sources[:1]),
        evidence=evidence,
        impact_us=impact_us,
        assumption=fill(assumption),
        action=fill(action),
        verify=fill(text("verify")),
        alternatives=tuple(fill(a) for a in rule.get("alternatives", [])),
        ranks=tuple(ranks),
        steps=tuple(steps),
        step_us=step_us,
        metrics=values,
        explains_keys=tuple(f.key for f in [*sources, *explained]),
    )


def _filler(values: dict[str, Any]) -> Callable[[str], str]:
    def fill(template: str) -> str:
        try:
            return template.format_map(values)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"rules/checks.toml: template {template[:60]!r} needs {exc}") from None

    return fill


def _waiting(job: Job, check: str) -> set[str]:
    """The checks a cause of ``check`` may explain (its [check.cause] explains), with itself."""
    return {check, *job.pack.check(check).cause["explains"]}


def _stage(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A slow pipeline stage: the others wait for it in their PP receives. Gain: its excess over the stages' mean
    Computing, which moving layers can remove."""
    check = "pipeline-stage-imbalance"
    stage_of, _ = pp_stages(job.ranks)
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        s = job.steps.filter(pl.col("step") == f.step, pl.col("rank").is_in(list(stage_of)))
        means = (
            s.with_columns(pl.col("rank").replace_strict(stage_of, return_dtype=pl.Int64).alias("stage"))
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
            *claims.take(_waiting(job, check) - {"kernel-boundness"}, steps=[f.step]),
            *claims.take({"kernel-boundness"}, ranks=m["slow_ranks"]),
        ]
        out.append(
            make_cause(
                job,
                check,
                values,
                sources=[f],
                explained=explained,
                impact_us=excess,
                steps_us=steps_us,
                ranks=m["slow_ranks"],
            )
        )
    return out


def _moe(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
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
            *claims.take(_waiting(job, check) - {"straggler", "compute-imbalance"}, not_ranks=[hot]),
        ]
        out.append(
            make_cause(
                job, check, values, sources=[f], explained=explained, impact_us=excess, steps_us=steps_us, ranks=[hot]
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


def _straggler(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A rank the others wait for at the collectives. Gain: how much later than the second-latest rank it
    arrived, per step — the collectives would have finished that much sooner without it."""
    check = "straggler"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        if f.rank is None or "lag_us" not in m:
            continue
        per_step = {int(s): float(v) for s, v in (m.get("lag_us_per_step") or {}).items()}
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
            *claims.take(_waiting(job, check) - own, not_ranks=[f.rank], steps=steps or None),
        ]
        out.append(
            make_cause(
                job,
                check,
                values,
                sources=[f],
                explained=explained,
                impact_us=lag_us,
                steps_us=steps_us,
                case=why,
                steps=steps,
            )
        )
    return out


def _compute(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A rank that computes more than the ranks it should match. Gain: its excess over the median rank."""
    check = "compute-imbalance"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        if f.rank is None:
            continue
        median_rank = m["median_rank"]
        excess = m["max_computing_us"] - m["median_computing_us"]
        values = {"rank": f.rank, "ratio": m["ratio"], "median_rank": median_rank, "excess_ms": excess / 1000}
        claims.own([f])
        explained = claims.take(_waiting(job, check), ranks=m["ranks"], not_ranks=[f.rank], steps=[f.step])
        out.append(
            make_cause(
                job,
                check,
                values,
                sources=[f],
                explained=explained,
                impact_us=excess,
                steps_us=steps_us,
                ranks=[f.rank],
            )
        )
    return out


def _slow_link(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A link much slower than its peers. Gain: the time its transfers take beyond what its peers' rate would
    take, per step (`analyses.bandwidth`) — if nothing else holds those collectives."""
    check = "comm-slow-link"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        ranks = m["link_ranks"] or list(f.ranks)
        values = {
            "link": m["link"],
            "bandwidth_gbps": m["bandwidth_gbps"],
            "peer_median_gbps": m["peer_median_gbps"],
            "lost_ms": m["lost_us_per_step"] / 1000,
        }
        claims.own([f])
        explained = claims.take(_waiting(job, check) - {check}, ranks=ranks)
        out.append(
            make_cause(
                job,
                check,
                values,
                sources=[f],
                explained=explained,
                impact_us=m["lost_us_per_step"],
                steps_us=steps_us,
                ranks=ranks,
            )
        )
    return out


def _waited_peer(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A peer the collectives of several ranks wait for (HCCL Notify_Wait), named even when it is not in the
    capture. Gain: the wait towards it that every waiting rank shares, per step."""
    check = "comm-waited-peer"
    by_peer: dict[int, list[Finding]] = {}
    for f in claims.unclaimed(check):
        by_peer.setdefault(int(f.metrics["peer"]), []).append(f)
    captured = {r.rank for r in job.ranks}
    out = []
    for peer, found in by_peer.items():
        waiting = sorted({r for f in found for r in f.ranks})
        per_step = [float(f.metrics["wait_us"]) / max(len(steps_us), 1) for f in found]
        values = {
            "peer": peer,
            "ranks": fmt_ranks(waiting),
            "who": f"Rank {waiting[0]} waits" if len(waiting) == 1 else f"Ranks {fmt_ranks(waiting)} wait",
            "first_rank": waiting[0] if waiting else peer,
            "wait": _span([w / 1000 for w in per_step], "{:,.1f}") + " ms",
            "min_wait_ms": min(per_step) / 1000,
            "outside": "" if peer in captured else f" (peer {peer} is not in this capture)",
        }
        claims.own(found)
        explained = claims.take(_waiting(job, check) - {check}, ranks=waiting)
        out.append(
            make_cause(
                job,
                check,
                values,
                sources=found,
                explained=explained,
                impact_us=min(per_step),
                steps_us=steps_us,
                ranks=[peer],
                steps=steps_us,
            )
        )
    return out


def _late_peers(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Collectives that wait rather than transfer, where no cause names whom for (no straggler among the captured
    ranks, no Notify_Wait peer): the ranks they wait for are outside the capture, unrecorded, or take turns. No
    estimate: the least waiting rank's wait is an upper bound — how much of the late ranks' time is removable is
    not in the capture (on the Qwen3 sample, the stage-0 ranks alone wait 316 ms a step, where the whole job shows
    85 ms of removable stage imbalance)."""
    check = "comm-wait-dominated"
    found = claims.unclaimed(check)
    if not found:
        return []
    waits: dict[int, float] = {}
    for f in found:
        for r in f.ranks:
            waits[r] = waits.get(r, 0.0) + float(f.metrics["waiting_ms"])
    per_step = {r: w / max(len(steps_us), 1) for r, w in waits.items()}
    captured = {r.rank for r in job.ranks}
    peer_lists = [f.metrics.get("peers") for f in found]
    peers = {p for ps in peer_lists if ps is not None for p in ps}
    late = sorted((peers & captured) - set(waits))
    outside = sorted(peers - captured)
    # no group names a peer (each holds the rank alone): whom they wait for is as unknown as unrecorded
    case = "unknown" if None in peer_lists or not peers else "outside" if outside else "late" if late else "mutual"
    worst = max(found, key=lambda f: float(f.metrics["waiting_ms"]))
    values = {
        "ranks": fmt_ranks(sorted(waits)),
        "n_ranks": len(waits),
        "wait": _span(list(per_step.values()), "{:,.1f}") + " ms",
        "min_wait_ms": min(per_step.values()),
        "ops": "; ".join(worst.metrics.get("largest") or []),
        "outside": fmt_ranks(outside),
        "late": fmt_ranks(late),
        "first_rank": min(waits),
        "second_rank": sorted(waits)[1] if len(waits) > 1 else min(waits),
        "late_rank": late[0] if late else min(waits),
        "captured": len(captured),
    }
    claims.own(found)
    cause = make_cause(
        job,
        check,
        values,
        sources=found,
        explained=[],
        impact_us=None,
        steps_us=steps_us,
        case=case,
        ranks=late,
    )
    return [cause]


def _exposed_transfer(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Exposed communication that is transfer, not waiting, and no other cause explains. Gain: the least exposed
    transfer of any rank in those steps — what overlapping would give every rank at least."""
    check = "comm-exposed-split"
    # a finding whose ops record no transfer/wait split claims no transfer to overlap: it stays a symptom
    found = [f for f in claims.unclaimed(check) if f.metrics.get("split_recorded", True)]
    if not found:
        return []
    steps = sorted({s for f in found for s in f.steps})
    exposed = job.tables.get("comm_exposed")
    transfer = [f.metrics["transfer_ms"] for f in found]
    if exposed is not None and not exposed.is_empty():
        per_step = exposed.filter(pl.col("step").is_in(steps)).group_by("step").agg(pl.col("transfer_ms").min())
        floor_ms = float(per_step["transfer_ms"].mean()) if not per_step.is_empty() else min(transfer)
    else:
        floor_ms = min(transfer)
    values = {
        "min_transfer_ms": floor_ms,
        "transfer": _span(transfer, "{:,.1f}") + " ms",
        "n_ranks": len({r for f in found for r in f.ranks}),
    }
    claims.own(found)
    explained = claims.take(_waiting(job, check) - {check}, steps=steps)
    message = "; ".join(f"{f.title}" for f in found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
    return [
        make_cause(
            job,
            check,
            values,
            sources=found,
            explained=explained,
            impact_us=floor_ms * 1000,
            steps_us=steps_us,
            message=message,
        )
    ]


def _idle(job: Job, claims: Claims, steps_us: dict[int, float], cost: pl.DataFrame) -> list[Cause]:
    """Idle device time no other cause explains: one cause over the ranks and steps that show it. No estimate:
    where the trace records the launches, the part the device waited for the host is measured (`sources.kineto`)
    and said, but a host late because it was busy (removable) and one blocked in a synchronisation that waits for
    a peer look the same there; elsewhere (Ascend's Free, CPU-only traces) even that split is missing."""
    check = "device-idle"
    found = claims.unclaimed(check)
    if not found:
        return []
    shares = [float(f.metrics["share"]) for f in found]
    free = [float(f.metrics["free_us"]) for f in found]
    steps = sorted({s for f in found for s in f.steps})
    host = _host_waits(job, cost, steps, {r for f in found for r in f.ranks})
    measured = not host.is_empty() and host["idle_host_us"].null_count() == 0
    floor_us = (
        float(host.group_by("step").agg(pl.col("idle_host_us").min())["idle_host_us"].mean()) if measured else None
    )
    values = {
        "device": _device(job),
        "shares": _span(shares, "{:.1%}"),
        "window": "the step" if steps else "the traced span (no steps)",
        "n_ranks": len({r for f in found for r in f.ranks}),
        "min_ms": min(free) / 1000,
        "host_ms": _span([v / 1000 for v in host["idle_host_us"].to_list()], "{:,.1f}") + " ms" if measured else "",
        "min_host_ms": (floor_us or 0.0) / 1000,
        "graph_events": _graph_events(job, {r for f in found for r in f.ranks}),
    }
    preparing = _preparing(job, found)
    if preparing is not None:
        values["preparing"] = _span([v / 1000 for v in preparing["preparing_us"]], "{:,.1f}") + " ms"
        values["min_preparing_ms"] = float(preparing["preparing_us"].min()) / 1000
        loader = preparing["loading_before_us"].drop_nulls()
        values["loader"] = (
            f"; of it, {_span([v / 1000 for v in loader], '{:,.1f}')} ms inside the data loader (trace_view.json)"
            if loader.len() == preparing.height
            else ""
        )
    claims.own(found)
    worst = max(found, key=lambda f: float(f.metrics["share"]))
    least = min(found, key=lambda f: float(f.metrics["share"]))
    sources = [worst, *([least] if least is not worst else [])]
    message = f"{len(found)} rank-step(s) with the device idle at or above the check's threshold. Most: {worst.message}"
    return [
        make_cause(
            job,
            check,
            values,
            sources=sources,
            explained=found,
            impact_us=None,
            steps_us=steps_us,
            message=message,
            case="host" if measured else "preparing" if preparing is not None else None,
            ranks=[r for f in found for r in f.ranks],
            steps=steps,
            action_case="graph" if values["graph_events"] else None,
        )
    ]


STEP_KEYS = {"rank": pl.Int64, "step": pl.Int64}


def _preparing(job: Job, found: list[Finding]) -> pl.DataFrame | None:
    """Per rank, the mean time before its steps' first device task (step_trace_time.csv Preparing) over the idle
    findings' steps, where that is at least the check's ``preparing_share`` of their idle time on every rank:
    the host preparing each step is then most of the idle. None otherwise (no Preparing column, or less)."""
    if job.steps.is_empty() or "preparing_us" not in job.steps.columns:
        return None
    keys = pl.DataFrame({"rank": [f.rank for f in found], "step": [f.step for f in found]}, schema=STEP_KEYS)
    rows = job.steps.join(keys.unique(), on=["rank", "step"]).filter(pl.col("preparing_us").is_not_null())
    if rows.is_empty():
        return None
    per = rows.group_by("rank").agg(pl.col("preparing_us").mean(), pl.col("free_us").mean()).sort("rank")
    share = job.pack.check("device-idle")["preparing_share"]
    if not bool((per["preparing_us"] >= share * per["free_us"]).all()):
        return None
    # of it, the time inside the data loader, where trace_view.json gives it (`trace_view.loading_before`)
    traced = job.tables.get("trace_steps")
    if traced is None or "loading_before_us" not in traced.columns:
        return per.with_columns(pl.lit(None, pl.Float64).alias("loading_before_us"))
    lanes = traced.filter(pl.col("source") == "overlap_analysis").join(keys.unique(), on=["rank", "step"])
    loader = lanes.group_by("rank").agg(pl.col("loading_before_us").mean())
    return per.join(loader, on="rank", how="left")


def _host_waits(job: Job, cost: pl.DataFrame, steps: list[int], ranks: set[int]) -> pl.DataFrame:
    """The idle time the device waited for the host (``step, idle_host_us``): per rank and step from the step cost,
    or, for a capture without steps, over each rank's whole trace (trace_steps' ``trace`` rows)."""
    if steps:
        return cost.filter(pl.col("step").is_in(steps)) if not cost.is_empty() else pl.DataFrame()
    traced = job.tables.get("trace_steps")
    if traced is None or traced.is_empty() or "idle_host_us" not in traced.columns:
        return pl.DataFrame()
    return traced.filter((pl.col("scope") == "trace") & pl.col("rank").is_in(list(ranks))).select(
        "step", "idle_host_us"
    )


def _graph_events(job: Job, ranks: set[int]) -> int:
    """Device events the ranks' traces replay from CUDA / HIP graphs (trace_steps ``graph_events``, whole-trace
    rows): where the step already runs from a graph, capturing it in one is no advice."""
    traced = job.tables.get("trace_steps")
    if traced is None or traced.is_empty() or "graph_events" not in traced.columns:
        return 0
    rows = traced.filter((pl.col("scope") == "trace") & pl.col("rank").is_in(list(ranks)))
    return int(rows["graph_events"].fill_null(0).sum())


def _span(values: list[float], form: str) -> str:
    """'16.3%–19.6%', or one value when all are the same as printed."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}–{high}"


def _device(job: Job) -> str:
    """The device the idle time was measured on: NPU for Ascend output, else what the traces' step windows say
    (GPU, or CPU for CPU-only traces); "device" when ranks disagree."""
    kinds = {r.kind for r in job.ranks}
    traced = job.tables.get("trace_steps")
    devices = (
        set(traced["device"].drop_nulls().unique()) if traced is not None and "device" in traced.columns else set()
    )
    words = {"NPU"} if kinds == {"ascend"} else {str(d) for d in devices} or {"GPU"}
    return words.pop() if len(words) == 1 else "device"


def _unfused_attention(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
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
    saving = {r: statistics.fmean(v) for r, v in per_rank.items()}
    return _kernel_change(job, claims, steps_us, check, found, saving, "softmax_ms", values, lambda r: r.groups)


def _unfused_elementwise(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
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
    return _kernel_change(job, claims, steps_us, check, found, saving, "saving_ms", values, lambda r: r.fusible)


def _kernel_change(
    job: Job,
    claims: Claims,
    steps_us: dict[int, float],
    check: str,
    found: list[Finding],
    saving_us: dict[int, float],
    saving_name: str,
    values: dict[str, Any],
    measured: Callable[[Any], object],
) -> list[Cause]:
    """The cause of a change to some kernels (fusing them) that saves ``saving_us`` per step on each rank the
    findings name: the least of those savings, filled in as ``saving_name`` (ms), when every rank the check could
    measure (``measured`` of its RankData is not None) has them — the ranks synchronise, so the step shortens only
    as much as its slowest rank; otherwise no estimate (the ``partial`` case names the ranks without them)."""
    others = sorted({r.rank for r in job.ranks if measured(r) is not None} - set(saving_us))
    least = min(saving_us.values())
    values = {**values, "ranks": fmt_ranks(sorted(saving_us)), "others": fmt_ranks(others), saving_name: least / 1000}
    claims.own(found)
    case, impact = ("partial", None) if others else (None, least)
    return [make_cause(job, check, values, sources=found, explained=[], impact_us=impact, steps_us=steps_us, case=case)]


def _idle_between(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """The device idle between steps, before each step's first event (time no step's window holds). Gain: per
    rank the mean of that idle time over its steps — in the ``loading`` case (the data loader holds at least
    ``loading_share`` of it on every rank) only the part inside the loader, which prefetching workers hide —
    and of the ranks the least, as they synchronise."""
    check = "idle-between-steps"
    found = claims.unclaimed(check)
    traced = job.tables.get("trace_steps")
    if not found or traced is None or "idle_before_us" not in traced.columns:
        return []
    per_rank = (
        traced.filter((pl.col("scope") == "step") & pl.col("idle_before_us").is_not_null())
        .group_by("rank")
        .agg(
            pl.col("idle_before_us").mean().alias("idle"),
            pl.col("loading_before_us").mean().alias("loading"),
            (pl.col("idle_before_us") / (pl.col("idle_before_us") + pl.col("step_us"))).mean().alias("share"),
        )
        .sort("rank")
    )
    named = {r for f in found for r in f.ranks}
    mine = per_rank.filter(pl.col("rank").is_in(list(named)))
    loading = bool((mine["loading"] >= job.pack.check(check)["loading_share"] * mine["idle"]).all())
    # of the ranks that wait so (a rank whose loader is slow holds the others up inside their collectives, not
    # before their steps: their own idle time here says nothing of what it costs them)
    estimate = float(mine["loading" if loading else "idle"].min())
    # the gain is of the step period (window and the idle time before it), the time this idle time is part of
    periods = {**steps_us, **dict(step_periods(traced).select("step", "period_us").iter_rows())}
    worst = max(found, key=lambda f: float(f.metrics["idle_before_us"]))
    w = worst.metrics
    values = {
        "device": w["device"],
        "ranks": fmt_ranks(sorted(named)),
        "idle": _span([x / 1000 for x in mine["idle"]], "{:,.1f}") + " ms",
        "share": _span(list(mine["share"]), "{:.1%}"),
        "loading": _span([x / 1000 for x in mine["loading"]], "{:,.1f}") + " ms",
        "estimate_ms": estimate / 1000,
        "longest": f"rank {worst.rank}, step {worst.step}: {ms(w['idle_before_us'])} idle, "
        f"{ms(w['loading_before_us'])} of it in the data loader",
    }
    claims.own(found)
    case = "loading" if loading else None
    return [
        make_cause(job, check, values, sources=found, explained=[], impact_us=estimate, steps_us=periods, case=case)
    ]


def _boundness(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Hot kernels bound by memory movement, the scalar unit or nothing, that no other cause explains."""
    check = "kernel-boundness"
    found = claims.unclaimed(check)
    if not found:
        return []
    ranks = sorted({r for f in found for r in f.ranks})
    by_rank: dict[int, float] = {}
    for f in found:
        for r in f.ranks:
            by_rank[r] = by_rank.get(r, 0.0) + float(f.metrics["time_us"])
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
    return [
        make_cause(job, check, values, sources=found, explained=[], impact_us=None, steps_us=steps_us, message=message)
    ]


def _ai_cpu(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """AI CPU fallbacks above the check's share, that no other cause explains."""
    check = "ai-cpu-ops"
    found = claims.unclaimed(check)
    if not found:
        return []
    ops = sorted({str(op) for f in found for op in f.metrics.get("ops", [])})
    values = {
        "ranks": fmt_ranks(sorted({r for f in found for r in f.ranks})),
        "total_ms": max(float(f.metrics.get("time_us", 0.0)) for f in found) / 1000,
        "ops": ", ".join(ops[:8]) or "see the findings",
    }
    claims.own(found)
    return [make_cause(job, check, values, sources=found, explained=[], impact_us=None, steps_us=steps_us)]
