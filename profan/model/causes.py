"""Causes: what holds the step back, what removing it would save per step, what to change, and the findings it
explains.

A finding is a measured symptom ("rank 0 waits 316 ms in collectives"); a cause is the diagnosis that accounts for
symptoms across ranks ("stage 1 computes 1.73× stage 0, and the others wait for it"). A cause is built only with
evidence and with an action from the rule pack (`rules/checks.toml`): the knowledge of what to change lives there,
the numbers come from the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from profan.model.evidence import Evidence, typed, whole_numbers


@dataclass(frozen=True)
class Cause:
    """One diagnosis. ``id`` (C1, C2, … by estimated gain) and ``explains`` (finding ids) are set when the report
    is assembled; before that, ``explains_keys`` names the findings by `Finding.key`.

    ``impact_us`` is the step time it would save per step if removed, conservatively, under ``assumption``; None
    where the data cannot support an estimate (the assumption then says why). ``bound_us`` is then the most it
    could save, where the data bounds it (the least waiting rank's wait): what it is ordered and graded by, said
    as a bound. ``severity`` follows the gain (or the bound) as a share of the step and in time
    (`profan.diagnosis.severity`), set when the report is assembled."""

    check: str
    title: str
    message: str
    evidence: tuple[Evidence, ...]
    impact_us: float | None
    assumption: str
    action: str
    verify: str
    alternatives: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    step_us: float | None = None  # the step the impact is measured against (the slowest rank's, mean per step)
    metrics: dict[str, Any] = field(default_factory=dict)
    explains_keys: tuple[tuple, ...] = ()
    explains: tuple[str, ...] = ()
    id: str = ""
    bound_us: float | None = None
    severity: str = "info"

    def __post_init__(self) -> None:
        if not self.evidence:
            raise ValueError(f"cause {self.check!r} ({self.title}) has no evidence")
        if not all(isinstance(e, Evidence) for e in self.evidence):
            raise TypeError("evidence items must be Evidence")
        if self.impact_us is not None and self.impact_us < 0:
            raise ValueError(f"cause {self.check!r}: a negative impact ({self.impact_us})")
        if self.severity not in ("critical", "warning", "info"):
            raise ValueError(f"cause {self.check!r}: unknown severity {str(self.severity)[:20]!r}")
        if not self.assumption:
            raise ValueError(f"cause {self.check!r}: every estimate states its assumption")

    @property
    def impact_share(self) -> float | None:
        if self.impact_us is None or not self.step_us:
            return None
        return self.impact_us / self.step_us

    @property
    def worth_us(self) -> float | None:
        """What the cause is worth per step: its estimated gain, else its bound (None: neither)."""
        return self.impact_us if self.impact_us is not None else self.bound_us

    def sort_key(self) -> tuple:
        """Largest gain first, a cause without an estimate by its bound (116 ms of waiting on peers outside the
        capture before 18 ms of exposed transfer); causes with neither last."""
        worth = self.worth_us
        return (worth is None, -(worth or 0.0), self.impact_us is None, self.check, self.ranks, self.title)

    def with_ids(self, cid: str, explains: tuple[str, ...]) -> Cause:
        return replace(self, id=cid, explains=explains)

    def to_dict(self) -> dict[str, Any]:
        share = self.impact_share
        return {
            "id": self.id,
            "check": self.check,
            "title": self.title,
            "message": self.message,
            "ranks": list(self.ranks),
            "steps": list(self.steps),
            "impact_us": None if self.impact_us is None else round(self.impact_us, 3),
            "impact_share": None if share is None else round(share, 4),
            "step_us": None if self.step_us is None else round(self.step_us, 3),
            "bound_us": None if self.bound_us is None else round(self.bound_us, 3),
            "severity": self.severity,
            "assumption": self.assumption,
            "action": self.action,
            "verify": self.verify,
            "alternatives": list(self.alternatives),
            "explains": list(self.explains),
            "metrics": self.metrics,
            "evidence": [e.to_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cause:
        """A cause of a report read from a file, every field checked for its type (a report is untrusted)."""
        impact = d.get("impact_us")
        step_us = d.get("step_us")
        bound = d.get("bound_us")
        for name, value in (("impact_us", impact), ("step_us", step_us), ("bound_us", bound)):
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
                raise TypeError(f"{name!r} is {str(value)[:40]!r}, not a number")
        alternatives = typed(d, "alternatives", list, [])
        explains = typed(d, "explains", list, [])
        if not all(isinstance(x, str) for x in [*alternatives, *explains]):
            raise TypeError("'alternatives' and 'explains' hold strings")
        return cls(
            check=typed(d, "check", str),
            title=typed(d, "title", str),
            message=typed(d, "message", str),
            evidence=tuple(Evidence.from_dict(e) for e in typed(d, "evidence", list)),
            impact_us=None if impact is None else float(impact),
            assumption=typed(d, "assumption", str),
            action=typed(d, "action", str),
            verify=typed(d, "verify", str),
            alternatives=tuple(alternatives),
            ranks=whole_numbers(d, "ranks"),
            steps=whole_numbers(d, "steps"),
            step_us=None if step_us is None else float(step_us),
            metrics=typed(d, "metrics", dict, {}),
            explains=tuple(explains),
            id=typed(d, "id", str, ""),
            bound_us=None if bound is None else float(bound),
            severity=typed(d, "severity", str, "info"),
        )
