"""The report's findings folded around its causes: grouped, numbered and linked.

Why group: the same check across ranks and steps is one claim about the job ("ranks 0–63 wait in collectives"),
not 64 claims; a 64-rank job with one fault must read like a 4-rank one. A group keeps every member, each with its
own evidence and an id (F3.2), so nothing measured is lost. Findings are grouped by check and by the cause that
explains them, so a symptom of one cause is never folded with a symptom of another. A finding that names no rank
and no step (a job-level claim, a comparison's bucket) stays on its own.
"""

from __future__ import annotations

from dataclasses import replace

from profan.model.causes import Cause
from profan.model.findings import Finding, number_findings
from profan.model.textfmt import fmt_ranks
from profan.rulepack.pack import RulePack


def fold(
    findings: list[Finding], causes: list[Cause], pack: RulePack, step_us: float | None = None
) -> tuple[list[Finding], list[Cause]]:
    """Number the causes by estimated gain (C1 first) with their gains capped so that those of a step add up to
    no more than the step; group and number the findings; link each symptom to its cause and back. ``step_us``:
    the verdict's step (`profan.diagnosis.step.denominator`), which every cause is then measured against."""
    if step_us:
        causes = [replace(c, step_us=step_us) if c.step_us else c for c in causes]
    ordered = _capped(sorted(causes, key=Cause.sort_key))
    cause_of: dict[tuple, str] = {}
    for i, c in enumerate(ordered, start=1):
        for key in c.explains_keys:
            cause_of.setdefault(key, f"C{i}")
    groups: dict[tuple, list[Finding]] = {}
    alone: list[Finding] = []
    for f in findings:
        f = replace(f, explained_by=cause_of.get(f.key))
        if f.rank is None and f.step is None:
            alone.append(f)
        else:
            groups.setdefault((f.check, f.explained_by), []).append(f)
    folded = number_findings([g[0] if len(g) == 1 else _group(g, pack) for g in groups.values()] + alone)
    folded = [replace(f, members=tuple(m.with_id(f"{f.id}.{i}") for i, m in enumerate(f.members, 1))) for f in folded]
    id_of = {m.key: f.id for f in folded for m in (f.members or (f,))}
    linked = [
        c.with_ids(f"C{i}", tuple(sorted({id_of[k] for k in c.explains_keys if k in id_of}, key=_number)))
        for i, c in enumerate(ordered, start=1)
    ]
    return folded, linked


def _number(fid: str) -> int:
    return int(fid[1:])


def _group(members: list[Finding], pack: RulePack) -> Finding:
    """One finding for the members: the worst member's claim and evidence, the span they cover, and the members,
    worst first (`_worst_first`)."""
    by = pack.check(members[0].check).params.get("worst_by")
    members = sorted(members, key=lambda m: _worst_first(m, by))
    worst = members[0]
    ranks = sorted({r for m in members for r in m.ranks})
    steps = sorted({s for m in members for s in m.steps})
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


def _worst_first(f: Finding, by: str | None) -> tuple:
    """Most severe first; within a severity, the largest value of the check's ``worst_by`` metric (members
    without it after), then rank and step order."""
    value = f.metrics.get(by) if by else None
    measured = isinstance(value, int | float) and not isinstance(value, bool)
    severity, *rest = f.sort_key()
    return (severity, not measured, -value if measured else 0.0, *rest)


def _capped(causes: list[Cause]) -> list[Cause]:
    """Each cause's gain at most what the causes before it left of its steps: the gains of the causes of a step
    never add up to more than the step (estimates made separately can overlap). A cause that names no step is of
    every step: it draws on each step's room, and what it takes is taken from all of them."""
    spent: dict[int, float] = {}  # per step, the gains of the causes of that step
    everywhere = 0.0  # the gains of causes that name no step
    out = []
    for c in causes:
        if c.impact_us is None or c.step_us is None:
            out.append(c)
            continue
        taken = [spent.get(k, 0.0) for k in c.steps] if c.steps else list(spent.values())
        room = c.step_us - everywhere - max(taken, default=0.0)
        impact = min(c.impact_us, max(room, 0.0))
        if c.steps:
            for k in c.steps:
                spent[k] = spent.get(k, 0.0) + impact
        else:
            everywhere += impact
        if impact < c.impact_us:
            c = replace(
                c,
                impact_us=impact,
                assumption=f"{c.assumption} Capped at {impact / 1000:,.1f} ms: the causes above it already account "
                "for the rest of the step.",
            )
        out.append(c)
    return out
