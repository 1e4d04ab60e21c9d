"""Severity from cost: one rule for how loud every cause and finding is (thresholds in rules/severity.toml).

Why one rule: a check's thresholds grade a ratio (a share of the step, a rank against the median), but a user acts
on what a thing costs. 54% of a healthy CPU gloo step spent in collectives is what gloo on the CPU does, not a
fault; 100% of a 14.6 µs trace is 14.6 µs. So a finding is never louder than its cost, above what a healthy run of
its kind spends so, makes it (both its share of the step and its time), and a cause is as loud as its gain (or its
bound) makes it; a cause worth less than the floor is no cause, and one whose evidence is a single event (one
stalled op) is no pattern.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from profan.diagnosis.step import own_step
from profan.model.causes import Cause
from profan.model.findings import SEVERITY_ORDER, Finding, Severity
from profan.model.rank import RankData
from profan.rulepack.severity import SeverityRules


def run_kind(ranks: list[RankData], trace_steps: pl.DataFrame | None) -> str:
    """The kind of run the baselines are for: npu (Ascend output), cpu (CPU-only traces: every traced rank's
    device is the host), else gpu."""
    if ranks and all(rank.kind == "ascend" for rank in ranks):
        return "npu"
    devices = (
        set(trace_steps["device"].drop_nulls().unique())
        if trace_steps is not None and not trace_steps.is_empty() and "device" in trace_steps.columns
        else set()
    )
    return "cpu" if devices == {"CPU"} else "gpu"


def level(cost_us: float, step_us: float | None, rules: SeverityRules) -> str | None:
    """'critical', 'warning' or 'info' for a cost of ``cost_us`` per step of ``step_us``, or None where it is
    under the floor (both under floor_share of the step and under floor_ms)."""
    share = cost_us / step_us if step_us else 0.0

    def reaches(name: str) -> bool:
        return share >= rules.shares[name] and cost_us >= rules.times_ms[name] * 1000

    for name in ("critical", "warning"):
        if reaches(name):
            return name
    under = share < rules.shares["floor"] and cost_us < rules.times_ms["floor"] * 1000
    return None if under else "info"


def above_normal(cost_us: float, step_us: float | None, check: str, kind: str, rules: SeverityRules) -> float:
    """The part of a cost above what a healthy run of ``kind`` spends in ``check`` (its baseline share)."""
    return max(cost_us - rules.normal_share(kind, check) * (step_us or 0.0), 0.0)


def finding_cost(finding: Finding, rules: SeverityRules) -> float | None:
    """What a finding costs per step (µs), from its check's cost metric (or the difference of two); None where
    the check names none or the finding lacks it."""
    metric = rules.cost.get(finding.check)
    if metric is None:
        return None
    names = [metric] if isinstance(metric, str) else list(metric)
    values = [finding.metrics.get(name) for name in names]
    if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in values):
        return None
    return float(values[0]) - sum(float(value) for value in values[1:])


def grade_findings(findings: list[Finding], rules: SeverityRules, kind: str, step_us: float | None) -> list[Finding]:
    """Each finding at most as severe as its cost makes it (`level` of its cost above normal, of its own step
    where it has one, else ``step_us``); the rest unchanged. Idempotent: grading twice gives the same."""
    out = []
    for finding in findings:
        cost = finding_cost(finding, rules)
        if cost is None or finding.severity == "info":
            out.append(finding)
            continue
        step = finding.metrics.get("step_us") or finding.metrics.get("period_us") or step_us
        own_kind = f"{kind}-unstepped" if unstepped(finding) else kind
        by_cost = level(above_normal(cost, step, finding.check, own_kind, rules), step, rules) or "info"
        milder: Severity = max(finding.severity, by_cost, key=SEVERITY_ORDER.__getitem__)  # type: ignore[assignment]
        out.append(finding if milder == finding.severity else replace(finding, severity=milder))
    return out


def unstepped(finding: Finding) -> bool:
    """Whether the finding's window is a whole trace without steps (its evidence selects scope 'trace'): there the
    span is the capture, and the time a process waits for its next call is in it."""
    return any(e.select.get("scope") == "trace" for e in finding.evidence)


def events_cited(cause: Cause) -> int:
    """How many rows or events the cause's evidence covers."""
    return sum(e.row_count for e in cause.evidence)


def keep(causes: list[Cause], rules: SeverityRules, kind: str, step_us: float | None) -> list[Cause]:
    """The causes that are causes: worth at least the floor above normal (a cause with neither gain nor bound
    stays), and resting on more than one event. Worth is of the verdict's step, or of the cause's own
    (`own_step`)."""
    out = []
    for cause in causes:
        if events_cited(cause) < rules.min_events:
            continue
        worth, step = cause.worth_us, cause.step_us if own_step(cause) else step_us or cause.step_us
        if worth is not None and level(above_normal(worth, step, cause.check, kind, rules), step, rules) is None:
            continue
        out.append(cause)
    return out


def grade_causes(causes: list[Cause], rules: SeverityRules, kind: str) -> list[Cause]:
    """Each cause's severity from its gain, else its bound, above normal, of its step: info for one with
    neither (nothing says what it costs)."""
    out = []
    for cause in causes:
        worth = cause.worth_us
        graded = (
            None
            if worth is None
            else level(above_normal(worth, cause.step_us, cause.check, kind, rules), cause.step_us, rules)
        )
        out.append(replace(cause, severity=graded or "info"))
    return out
