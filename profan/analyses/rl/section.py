"""The RL analysis of the report: the step ledger's tables (rl_phases, rl_steps, rl_ledger, rl_rollout; where the
traces show them rl_switches, rl_generation, rl_logprob) and its findings — one ledger finding per rank (busy and
idle per phase; it supersedes the per-trace idle and MoE findings), the long tail, the exposed weight sync, an
update-dominated step, under-batched generation and small log-prob micro-batches, graded by rules/checks.toml.
Nothing here for a job whose traces name no RL role."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.analyses.contract import Job, Section
from profan.analyses.rl import batching, long_tail
from profan.analyses.rl import ledger as ledger_mod
from profan.model.evidence import cite_events, cite_lines
from profan.model.findings import Finding
from profan.model.textfmt import ms, pct
from profan.rulepack import rl

UPDATE_PHASES = ("actor update", "critic update")
_NO_SHAPES = (
    "RL job: the traces record no input shapes of their forwards (the profiler's record_shapes; verl's torch tool "
    "contents: [shapes]), so how generation and the log-prob passes are batched is not measured"
)
SYNC_PHASE = "weight sync"


def section(job: Job) -> Section:
    ranks = ledger_mod.rl_ranks(job.ranks)
    none = {"rl_steps": pl.DataFrame(), "rl_ledger": pl.DataFrame()}  # what the diagnosis reads, made always
    if not ranks:
        roles = [rank for rank in job.ranks if "role" in rank.info]
        said = "RL job: its roles are read, but the step ledger reads the phases' annotations of Kineto traces only"
        return Section(tables=none, notes=[said] if roles else [])
    rules = rl.rules()
    led = ledger_mod.build(ranks, rules, job.rl_timers)
    if led is None:
        return Section(tables=none, notes=["RL job: no trace marks a phase of rules/rl.toml, so no step ledger"])
    tail = long_tail.workers(led.spans, ranks, rules)
    gen, passes = batching.generation(led.spans, ranks), batching.logprob(led.spans, ranks, led.ranks, rules)
    tables = {"rl_phases": led.phases, "rl_steps": led.steps, "rl_ledger": led.ranks, "rl_rollout": tail}
    extra = (("rl_switches", led.switches), ("rl_generation", gen), ("rl_logprob", passes))
    tables |= {name: frame for name, frame in extra if not frame.is_empty()}
    findings = [*_rank_findings(led), *_tail(job, led, tail), *_sync(job, led), *_update(job, led)]
    findings += [
        *batching.generation_findings(job, gen, _steps_us(led)),
        *batching.logprob_findings(job, passes, _steps_us(led)),
    ]
    notes, off = _timer_notes(job, led)
    notes += [] if not gen.is_empty() or not passes.is_empty() else [_NO_SHAPES]
    notes += _switch_note(led)
    return Section(tables=tables, findings=findings, notes=notes, warnings=[*led.left_out, *off, *_unmarked(led)])


def _switch_note(led: ledger_mod.Ledger) -> list[str]:
    """A colocated job's engine switches said: their time per step, and that the weight sync lies in them."""
    if led.switches.is_empty():
        return []
    per = (
        led.switches.group_by("step", "switch")
        .agg(pl.col("switch_us").max())
        .group_by("switch")
        .agg(pl.col("switch_us").mean())
    )
    said = ", ".join(f"{name} {ms(us)}" for name, us in per.sort("switch").iter_rows())
    return [
        f"RL job colocated (the engines' switches are marked): per step {said} on the slowest rank, inside "
        "generation (rows of rl_phases, per rank rl_switches); the weights reach the rollout engine in the switch "
        "to rollout, so the weight-sync phase after the update holds only what runs outside it"
    ]


def _unmarked(led: ledger_mod.Ledger) -> list[str]:
    """The step's first phase (generation) unmarked in every trace: from the second step on, its time lies in the
    window of the first phase that is marked, which the ledger then overstates."""
    first = next(phase for phase in rl.rules().phases if not phase.driver and not phase.unannotated)
    if first.name in set(led.spans["phase"]):
        return []
    return [
        f"no trace of this RL job marks {first.name} ({', '.join(first.annotations)}): from the second step on its "
        f"time lies in the window of {led.spans.sort('start_us')['phase'][0]}; analyse the folder holding the "
        "rollout workers' traces too"
    ]


def _cite(spans: pl.DataFrame, select: dict) -> list:
    """The annotations behind a claim, per trace file."""
    return [
        cite_events(file, part["event_idx"].to_list(), part.height, select)
        for (file,), part in spans.sort("start_us").group_by(["file"], maintain_order=True)
    ]


def _rank_findings(led: ledger_mod.Ledger) -> list[Finding]:
    """One info finding per rank: its busy share of the step and where it idles."""
    out = []
    for (rank,), rows in led.ranks.group_by(["rank"], maintain_order=True):
        role, role_rank = rows["role"][0], rows["role_rank"][0]
        per = rows.group_by("phase").agg(pl.col("busy_us").mean(), pl.col("window_us").mean())
        busy, window = per["busy_us"].sum(), per["window_us"].sum()
        top = per.sort("busy_us", descending=True).head(3)
        where = ", ".join(f"{p} {ms(b)}" for p, b in zip(top["phase"], top["busy_us"], strict=True) if b > 0)
        spans = led.spans.filter(pl.col("rank") == rank)
        if spans.is_empty():
            continue
        out.append(
            Finding(
                check="rl-step-ledger",
                severity="info",
                title=f"{role} rank {role_rank}: busy {pct(busy / window)} of the RL step",
                message=(
                    f"{role} rank {role_rank} (rank {rank}) is busy {ms(busy)} of a {ms(window)} RL step "
                    f"({pct(busy / window)}; {where or 'no phase'}) and idle the rest, while other roles work."
                ),
                evidence=tuple(_cite(spans, {"source": "kineto_trace", "rank": rank, "role": role})),
                rank=rank,
                metrics={"busy_us": busy, "step_us": window, "idle_us": window - busy, "role": role},
            )
        )
    return out


def _steps_us(led: ledger_mod.Ledger) -> float:
    return float(led.steps["step_us"].mean())


def _tail(job: Job, led: ledger_mod.Ledger, tail: pl.DataFrame) -> list[Finding]:
    """The long tail, where the last worker's lead over the next-latest is a large share of the step."""
    if tail.is_empty() or tail["rank"].n_unique() < 2:
        return []
    chk = job.pack.check("rl-long-tail")
    per = tail.group_by("step").agg(pl.col("tail_us").first(), pl.col("wait_share").first())
    tail_us, step_us = float(per["tail_us"].mean()), _steps_us(led)
    level = graded(tail_us / step_us, chk)
    if level is None:
        return []
    last = tail.filter(pl.col("behind_us") == 0)
    slow = last.group_by("rank", "role", "role_rank").len().sort("len", descending=True).row(0, named=True)
    mine = tail.filter(pl.col("rank") == slow["rank"])
    others = tail.filter(pl.col("rank") != slow["rank"])
    worker = f"{slow['role']} rank {slow['role_rank']}"
    return [
        Finding(
            check="rl-long-tail",
            severity=level,
            title=f"Long-tail rollout: {worker} ends generation {ms(tail_us)} after the next-latest worker",
            message=(
                f"{worker} ends its generation last in {mine.filter(pl.col('behind_us') == 0).height} of "
                f"{per.height} step(s), {ms(tail_us)} per step after the next-latest worker "
                f"({pct(tail_us / step_us)} of the {ms(step_us)} step); the rollout pool waits "
                f"{pct(float(per['wait_share'].mean()))} of its generation time for it. Its batch runs "
                f"{int(mine['forwards'].max())} forwards (tokens) against {int(others['forwards'].max())} on the "
                "others."
            ),
            evidence=tuple(_cite(tail, {"source": "kineto_trace", "phase": "generation"})),
            rank=slow["rank"],
            metrics={
                "tail_us": tail_us,
                "step_us": step_us,
                "wait_share": float(per["wait_share"].mean()),
                "worker": worker,
                "forwards": int(mine["forwards"].max()),
                "others_forwards": int(others["forwards"].max()),
                "steps": sorted(per["step"].to_list()),
            },
        )
    ]


def _sync(job: Job, led: ledger_mod.Ledger) -> list[Finding]:
    """The weight sync, where its exposed time is a large share of the step."""
    rows = led.phases.filter((pl.col("phase") == SYNC_PHASE) & (pl.col("measured") == "trace"))
    if rows.is_empty():
        return []
    sync_us, step_us = float(rows["phase_us"].mean()), _steps_us(led)
    level = graded(sync_us / step_us, job.pack.check("rl-weight-sync"))
    if level is None:
        return []
    last = led.spans.filter(pl.col("step").is_in(rows["step"].to_list()))
    before = last.sort("end_us").group_by("step").tail(1)  # the annotation the sync follows, each step
    evidence = _cite(before, {"source": "kineto_trace", "phase": SYNC_PHASE, "after": "last annotated phase"})
    inside = led.unannotated.filter(pl.col("phase") == SYNC_PHASE)
    evidence += [
        cite_events(file, part["event_idx"].to_list(), part.height, {"source": "kineto_trace", "phase": SYNC_PHASE})
        for (file,), part in inside.group_by(["file"], maintain_order=True)
    ]
    evidence += _timer_evidence(job, led.phases.filter(pl.col("phase") == SYNC_PHASE))
    return [
        Finding(
            check="rl-weight-sync",
            severity=level,
            title=f"Weight sync exposed: {ms(sync_us)} per step ({pct(sync_us / step_us)} of the step)",
            message=(
                f"From the end of {before['phase'][0]} to the last work any rank does before the next generation, "
                f"{ms(sync_us)} per step ({pct(sync_us / step_us)} of the {ms(step_us)} step) no annotated phase "
                "runs: the weight sync to the rollout engines, overlapped with nothing."
            ),
            evidence=tuple(evidence),
            rank=int(before["rank"][0]),  # the rank whose weights are synced: its update ends before the sync
            metrics={"sync_us": sync_us, "step_us": step_us, "steps": sorted(rows["step"].to_list())},
        )
    ]


def _update(job: Job, led: ledger_mod.Ledger) -> list[Finding]:
    """The update's share of the step, where it dominates."""
    rows = led.phases.filter(pl.col("phase").is_in(UPDATE_PHASES) & (pl.col("measured") == "trace"))
    if rows.is_empty():
        return []
    chk = job.pack.check("rl-update-dominated")
    update_us = float(rows.group_by("step").agg(pl.col("phase_us").sum())["phase_us"].mean())
    step_us = _steps_us(led)
    level = graded(update_us / step_us, chk)
    if level is None:
        return []
    spans = led.spans.filter(pl.col("phase").is_in(UPDATE_PHASES))
    return [
        Finding(
            check="rl-update-dominated",
            severity=level,
            title=f"The actor update is {pct(update_us / step_us)} of the RL step",
            message=f"The update phases take {ms(update_us)} of the {ms(step_us)} RL step "
            f"({pct(update_us / step_us)}).",
            evidence=tuple(_cite(spans, {"source": "kineto_trace", "phase": "actor update"})),
            rank=int(spans["rank"][0]),
            metrics={"update_us": update_us, "step_us": step_us, "threshold": chk.params["warning_share"]},
        )
    ]


def _timer_evidence(job: Job, phases: pl.DataFrame) -> list:
    rows = phases.drop_nulls("line")
    if rows.is_empty() or "file" not in job.rl_timers.columns:
        return []
    file = job.rl_timers["file"][0]
    return [cite_lines(file, rows["line"].to_list(), rows.height, {"source": "rl_timers", "timer": rows["timer"][0]})]


def _timer_notes(job: Job, led: ledger_mod.Ledger) -> tuple[list[str], list[str]]:
    """The reconciliation said: the largest difference between a phase's trace time and its timer (a note), and
    each phase-step outside the check's timer_tolerance (a warning: the traces and the timer disagree)."""
    both = led.phases.drop_nulls(["diff_pct"])
    if both.is_empty():
        return ["RL job: no per-step timer log (metrics.jsonl) beside the traces: the ledger is not reconciled"], []
    worst = both.sort(pl.col("diff_pct").abs(), descending=True).row(0, named=True)
    tol = job.pack.check("rl-step-ledger").params["timer_tolerance"] * 100
    verdict = "within" if abs(worst["diff_pct"]) <= tol else "outside"
    note = (
        f"RL step ledger against the framework's timers ({both.height} phase-steps): the largest difference is "
        f"{worst['phase']} in step {worst['step']}, {worst['diff_pct']:+.1f}% ({ms(worst['phase_us'])} in the traces, "
        f"{ms(worst['timer_us'])} timing_s/{worst['timer']}), {verdict} {tol:.0f}%"
    )
    off = both.filter(pl.col("diff_pct").abs() > tol)
    said = [
        f"RL phase {row['phase']} in step {row['step']}: {ms(row['phase_us'])} in the traces against "
        f"{ms(row['timer_us'])} timing_s/{row['timer']} ({row['diff_pct']:+.1f}%, more than {tol:.0f}%): the "
        "framework timed something the traces do not show as this phase (driver work, another call), or the "
        "reverse"
        for row in off.iter_rows(named=True)
    ]
    return [note], said
