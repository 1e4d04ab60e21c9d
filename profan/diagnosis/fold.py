"""The report's findings folded around its causes: grouped, numbered and linked.

Why group: the same check across ranks and steps is one claim about the job ("ranks 0–63 wait in collectives"),
not 64 claims; a 64-rank job with one fault must read like a 4-rank one. A group keeps every member, each with its
own evidence and an id (F3.2), so nothing measured is lost. Findings are grouped by check and by the cause that
explains them, so a symptom of one cause is never folded with a symptom of another. A finding that names no rank
and no step (a job-level claim, a comparison's bucket) stays on its own.
"""

from __future__ import annotations

from dataclasses import replace

from profan.diagnosis.step import own_step
from profan.model.causes import Cause
from profan.model.findings import Finding, number_findings
from profan.model.textfmt import fmt_ranks
from profan.rulepack.pack import RulePack


def fold(
    findings: list[Finding], causes: list[Cause], pack: RulePack, step_us: float | None = None
) -> tuple[list[Finding], list[Cause]]:
    """Number the causes by estimated gain (C1 first) with their gains capped so that those of a step add up to
    no more than the step; group and number the findings; link each symptom to its cause and back. ``step_us``:
    the verdict's step (`profan.diagnosis.step.denominator`), which every cause is then measured against but
    those with a step of their own (`own_step`: a serving cause's iteration)."""
    if step_us:
        causes = [
            replace(cause, step_us=step_us) if cause.step_us and not own_step(cause) else cause for cause in causes
        ]
    ordered = _capped(sorted(causes, key=Cause.sort_key))
    cause_of: dict[tuple, str] = {}
    for index, cause in enumerate(ordered, start=1):
        for key in cause.explains_keys:
            cause_of.setdefault(key, f"C{index}")
    groups: dict[tuple, list[Finding]] = {}
    alone: list[Finding] = []
    for finding in findings:
        finding = replace(finding, explained_by=cause_of.get(finding.key))
        if finding.rank is None and finding.step is None:
            alone.append(finding)
        else:
            groups.setdefault((finding.check, finding.explained_by), []).append(finding)
    folded = number_findings(
        [group[0] if len(group) == 1 else _group(group, pack) for group in groups.values()] + alone
    )
    folded = [
        replace(
            finding,
            members=tuple(member.with_id(f"{finding.id}.{index}") for index, member in enumerate(finding.members, 1)),
        )
        for finding in folded
    ]
    id_of = {member.key: finding.id for finding in folded for member in (finding.members or (finding,))}
    linked = [
        cause.with_ids(
            f"C{index}",
            tuple(
                sorted(
                    {id_of[explains_key] for explains_key in cause.explains_keys if explains_key in id_of}, key=_number
                )
            ),
        )
        for index, cause in enumerate(ordered, start=1)
    ]
    return folded, linked


def _number(fid: str) -> int:
    return int(fid[1:])


def _group(members: list[Finding], pack: RulePack) -> Finding:
    """One finding for the members: the worst member's claim and evidence, the span they cover, and the members,
    worst first (`_worst_first`)."""
    by = pack.check(members[0].check).params.get("worst_by")
    members = sorted(members, key=lambda member: _worst_first(member, by))
    worst = members[0]
    ranks = sorted({rank for member in members for rank in member.ranks})
    steps = sorted({step for member in members for step in member.steps})
    span = "; ".join(
        part
        for part in (
            f"rank{'s' if len(ranks) > 1 else ''} {fmt_ranks(ranks)}" if ranks else "",
            f"step{'s' if len(steps) > 1 else ''} {fmt_ranks(steps)}" if steps else "",
        )
        if part
    )
    return Finding(
        check=worst.check,
        severity=worst.severity,
        title=f"{worst.title} — and {len(members) - 1} more like it ({span})",
        message=(
            f"{pack.check(worst.check).name}: {len(members)} findings over {span}; each member keeps its own "
            f"evidence. The worst: {worst.message}"
        ),
        evidence=worst.evidence,
        rank=ranks[0] if len(ranks) == 1 else None,
        step=steps[0] if len(steps) == 1 else None,
        metrics={**worst.metrics, "members": len(members)},
        ranks=tuple(ranks),
        steps=tuple(steps),
        members=tuple(members),
        explained_by=worst.explained_by,
    )


def _worst_first(finding: Finding, by: str | None) -> tuple:
    """Most severe first; within a severity, the largest value of the check's ``worst_by`` metric (members
    without it after), then rank and step order."""
    value = finding.metrics.get(by) if by else None
    measured = isinstance(value, int | float) and not isinstance(value, bool)
    severity, *rest = finding.sort_key()
    return (severity, not measured, -value if measured else 0.0, *rest)


def _capped(causes: list[Cause]) -> list[Cause]:
    """Each cause's gain at most what the causes before it left of its steps: the gains of the causes of a step
    never add up to more than the step (estimates made separately can overlap). A cause that names no step is of
    every step: it draws on each step's room, and what it takes is taken from all of them."""
    spent: dict[int, float] = {}  # per step, the gains of the causes of that step
    everywhere = 0.0  # the gains of causes that name no step
    out = []
    for cause in causes:
        if cause.impact_us is None or cause.step_us is None:
            out.append(cause)
            continue
        taken = [spent.get(step, 0.0) for step in cause.steps] if cause.steps else list(spent.values())
        room = cause.step_us - everywhere - max(taken, default=0.0)
        impact = min(cause.impact_us, max(room, 0.0))
        if cause.steps:
            for step in cause.steps:
                spent[step] = spent.get(step, 0.0) + impact
        else:
            everywhere += impact
        if impact < cause.impact_us:
            cause = replace(
                cause,
                impact_us=impact,
                assumption=f"{cause.assumption} Capped at {impact / 1000:,.1f} ms: the causes above it already account "
                "for the rest of the step.",
            )
        out.append(cause)
    return out
