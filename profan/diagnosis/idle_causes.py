"""Causes of an idle device: idle time inside the steps that no other cause explains (with what the host did
then, where the trace says), and idle time between steps (the data loader, or other host work)."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import step_periods
from profan.analyses.contract import Job
from profan.diagnosis.claims import Claims, Grounds, Wording, make_cause, span
from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.textfmt import fill_rule_text, fmt_ranks, ms


def idle(job: Job, claims: Claims, steps_us: dict[int, float], cost: pl.DataFrame) -> list[Cause]:
    """Idle device time no other cause explains: one cause over the ranks and steps that show it. No estimate:
    where the trace records the launches, the part the device waited for the host is measured (`sources.trace.kineto`)
    and said, but a host late because it was busy (removable) and one blocked in a synchronisation that waits for
    a peer look the same there; elsewhere (Ascend's Free, CPU-only traces) even that split is missing."""
    check = "device-idle"
    found = claims.unclaimed(check)
    if not found:
        return []
    shares = [float(f.metrics["share"]) for f in found]
    free = [float(f.metrics["free_us"]) for f in found]
    steps = sorted({step for f in found for step in f.steps})
    host = _host_waits(job, cost, steps, {rank for f in found for rank in f.ranks})
    measured = not host.is_empty() and host["idle_host_us"].null_count() == 0
    floor_us = (
        float(host.group_by("step").agg(pl.col("idle_host_us").min())["idle_host_us"].mean()) if measured else None
    )
    values = {
        "device": _device(job),
        "shares": span(shares, "{:.1%}"),
        "window": "the step" if steps else "the traced span (no steps)",
        "n_ranks": len({rank for f in found for rank in f.ranks}),
        "min_ms": min(free) / 1000,
        "host_ms": span([v / 1000 for v in host["idle_host_us"].to_list()], "{:,.1f}") + " ms" if measured else "",
        "min_host_ms": (floor_us or 0.0) / 1000,
        "graph_events": _graph_events(job, {rank for f in found for rank in f.ranks}),
        "longest_gap": _longest_gap(found),
    }
    preparing = _preparing(job, found)
    if preparing is not None:
        values.update(_preparing_values(job, preparing))
    blocked = _blocked(found, job.pack.check(check)["blocked_share"])
    blocked_by = None if blocked is None else blocked.pop("finding")
    if blocked is not None:
        values.update(blocked)
    claims.own(found)
    sources = _cited(found, blocked_by)
    worst = sources[0]
    message = f"{len(found)} rank-step(s) with the device idle at or above the check's threshold. Most: {worst.message}"
    return [
        make_cause(
            job,
            check,
            values,
            Grounds(
                sources=sources,
                steps_us=steps_us,
                explained=found,
                ranks=[rank for f in found for rank in f.ranks],
                steps=steps,
            ),
            _wording(
                message,
                blocked=bool(blocked),
                measured=measured,
                preparing=preparing is not None,
                graph=bool(values["graph_events"]),
            ),
        )
    ]


def _cited(found: list[Finding], blocked_by: Finding | None) -> list[Finding]:
    """The findings the cause cites: the idlest rank-step first, then the least idle and the one blocked in a
    synchronisation, each once (findings are compared by identity: their metrics are dicts)."""
    worst = max(found, key=lambda f: float(f.metrics["share"]))
    least = min(found, key=lambda f: float(f.metrics["share"]))
    sources = [worst]
    for finding in (least, blocked_by):
        if finding is not None and all(finding is not source for source in sources):
            sources.append(finding)
    return sources


def _wording(message: str, *, blocked: bool, measured: bool, preparing: bool, graph: bool) -> Wording:
    """The rule's case that fits what the trace shows: blocked in a synchronisation, the host's share measured,
    the step preparing its input; graph mode as the action where the trace launches graphs and is not blocked."""
    case = "blocked" if blocked else "host" if measured else "preparing" if preparing else None
    return Wording(message=message, case=case, action_case="graph" if graph and not blocked else None)


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


def _preparing_values(job: Job, preparing: pl.DataFrame) -> dict:
    """The ``preparing`` case's values: the time before each step's first task per rank, of it the data loader's
    where trace_view.json gives it for every rank, and where the host's ops in that time are to be read."""
    loader = preparing["loading_before_us"].drop_nulls()
    files = {file for rank in job.ranks if rank.rank in set(preparing["rank"].to_list()) for file in rank.files}
    return {
        "host_ops": "trace_view.json's CPU ops between the step's start (ProfilerStep#N) and its first task"
        if "trace_view" in files
        else "The DB's CPU ops (table PYTORCH_API) between the step's start and its first task"
        if "ascend_db" in files
        else "The CPU ops between the step's start and its first task, which this capture does not hold (profile "
        "with the CPU activity and profiler_level Level1 or above, which writes trace_view.json),",
        "preparing": span([v / 1000 for v in preparing["preparing_us"]], "{:,.1f}") + " ms",
        "min_preparing_ms": float(preparing["preparing_us"].min()) / 1000,
        "loader": f"; of it, {span([v / 1000 for v in loader], '{:,.1f}')} ms inside the data loader (trace_view.json)"
        if loader.len() == preparing.height
        else "",
    }


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


def host_doing(metrics: dict) -> str:
    """What the host did in an idle stretch, as a finding's metrics name it (`trace_steps.host_metrics`)."""
    parts = [f"{metrics['host_op']} ({ms(metrics['host_op_us'])})"] if metrics.get("host_op") else []
    if metrics.get("host_call"):
        parts.append(f"blocked in {metrics['host_call']} ({ms(metrics['host_call_us'])})")
    return f"; the host meanwhile in {', '.join(parts)}" if parts else ""


def _longest_gap(found: list[Finding]) -> str:
    """The longest idle stretch of the findings and what the host did in it, as a sentence ("" without one)."""
    gaps = [f for f in found if f.metrics.get("gap_us")]
    if not gaps:
        return ""
    f = max(gaps, key=lambda g: float(g.metrics["gap_us"]))
    where = f"rank {f.rank}" + (f", step {f.step}" if f.step is not None else "")
    return f" The longest idle stretch: {where}, {ms(f.metrics['gap_us'])}{host_doing(f.metrics)}."


def _blocked(found: list[Finding], share: float) -> dict | None:
    """The worst idle finding's longest idle stretch, where one runtime call of the host covers at least
    ``share`` of its idle time (`trace_steps.host_metrics`): the host blocked while the device had nothing to
    run. None otherwise."""
    worst = max(found, key=lambda f: float(f.metrics.get("host_call_us") or 0.0))
    m = worst.metrics
    if not m.get("host_call") or float(m["host_call_us"]) < share * float(m["free_us"]):
        return None
    return {
        "finding": worst,
        "call": m["host_call"],
        "call_ms": float(m["host_call_us"]) / 1000,
        "op": f", inside {m['host_op']}" if m.get("host_op") and m["host_op"] != m["host_call"] else "",
        "stretch_ms": float(m["gap_us"]) / 1000,
        "on_rank": f"rank {worst.rank}" + (f", step {worst.step}" if worst.step is not None else ""),
    }


def _device(job: Job) -> str:
    """The device the idle time was measured on: NPU for Ascend output, else what the traces' step windows say
    (GPU, or CPU for CPU-only traces); "device" when ranks disagree."""
    kinds = {rank.kind for rank in job.ranks}
    traced = job.tables.get("trace_steps")
    devices = (
        set(traced["device"].drop_nulls().unique()) if traced is not None and "device" in traced.columns else set()
    )
    words = {"NPU"} if kinds == {"ascend"} else {str(device) for device in devices} or {"GPU"}
    return words.pop() if len(words) == 1 else "device"


def _others_loading(text: str, others: pl.DataFrame) -> str:
    """The loading case's note on the ranks below the check's share that load about as long ("" for none)."""
    if others.is_empty():
        return ""
    filled = {
        "others": fmt_ranks(others["rank"].to_list()),
        "others_ms": span([other / 1000 for other in others["loading"]], "{:,.1f}") + " ms",
    }
    return fill_rule_text(text, filled)


def idle_between(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
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
    named = {rank for f in found for rank in f.ranks}
    mine = per_rank.filter(pl.col("rank").is_in(list(named)))
    # the ranks below the share that load about as long: a loader every rank has, not a few ranks' own
    least = float(mine["loading"].min() or 0.0)
    others = per_rank.filter(~pl.col("rank").is_in(list(named)) & (pl.col("loading") >= 0.5 * least) & (least > 0))
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
        "idle": span([x / 1000 for x in mine["idle"]], "{:,.1f}") + " ms",
        "share": span(list(mine["share"]), "{:.1%}"),
        "loading": span([x / 1000 for x in mine["loading"]], "{:,.1f}") + " ms",
        "estimate_ms": estimate / 1000,
        "longest": f"rank {worst.rank}, step {worst.step}: {ms(w['idle_before_us'])} idle"
        + (f", {ms(w['loading_before_us'])} of it in the data loader" if w["loading_before_us"] else "")
        + host_doing(w),
        "others_loading": _others_loading(job.pack.check(check).cause["loading_others"], others),
        "host_work": f", the host in {w['host_op']}"
        if w.get("host_op")
        else ", while the host works on something else",
    }
    claims.own(found)
    case = "loading" if loading else None
    return [
        make_cause(job, check, values, Grounds(sources=found, steps_us=periods, impact_us=estimate), Wording(case=case))
    ]
