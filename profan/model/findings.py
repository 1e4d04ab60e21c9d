"""Findings: claims with numbers, each impossible to build without evidence."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from profan.model.evidence import Evidence, typed, whole_numbers

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)  # most severe first
SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One claim. ``id`` is assigned when the report is assembled (F1, F2, … in severity order).

    It cannot be built with a check the rule pack does not have, a severity other than critical / warning / info,
    or without evidence: a report read back from a file goes through the same gate (`from_dict`)."""

    check: str  # id of the check in the rule pack that produced it
    severity: Severity
    title: str
    message: str
    evidence: tuple[Evidence, ...]
    rank: int | None = None
    step: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    # The ranks and steps the claim covers: one each for a single finding (its rank and step, if any); for a
    # group (`diagnosis.fold`), every member's, and the members themselves, each with its own evidence.
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    members: tuple[Finding, ...] = ()
    explained_by: str | None = None  # id of the cause this finding is a symptom of

    def __post_init__(self) -> None:
        if not self.ranks and self.rank is not None:
            object.__setattr__(self, "ranks", (self.rank,))
        if not self.steps and self.step is not None:
            object.__setattr__(self, "steps", (self.step,))
        if self.severity not in SEVERITY_ORDER:
            raise ValueError(f"unknown severity {self.severity!r}")
        if not self.evidence:
            raise ValueError(f"finding {self.check!r} ({self.title}) has no evidence")
        if not all(isinstance(e, Evidence) for e in self.evidence):
            raise TypeError("evidence items must be Evidence")

    def with_id(self, fid: str) -> Finding:
        return replace(self, id=fid)

    @property
    def key(self) -> tuple:
        """What tells two findings of one report apart before they are numbered (a cause names the findings it
        explains by it)."""
        return (self.check, self.rank, self.step, self.title)

    def sort_key(self) -> tuple:
        return (
            SEVERITY_ORDER[self.severity],
            self.check,
            -1 if self.rank is None else self.rank,
            -1 if self.step is None else self.step,
            self.title,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "check": self.check,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "rank": self.rank,
            "step": self.step,
            "ranks": list(self.ranks),
            "steps": list(self.steps),
            "explained_by": self.explained_by,
            "metrics": self.metrics,
            "evidence": [e.to_dict() for e in self.evidence],
            "members": [member.to_dict() for member in self.members],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """A finding of a report read from a file, every field checked for its type (a report is untrusted)."""
        return cls(
            check=typed(d, "check", str),
            severity=typed(d, "severity", str),
            title=typed(d, "title", str),
            message=typed(d, "message", str),
            evidence=tuple(Evidence.from_dict(e) for e in typed(d, "evidence", list)),
            rank=_optional_int(d, "rank"),
            step=_optional_int(d, "step"),
            metrics=typed(d, "metrics", dict, {}),
            id=typed(d, "id", str, ""),
            ranks=whole_numbers(d, "ranks"),
            steps=whole_numbers(d, "steps"),
            members=tuple(cls.from_dict(m) for m in typed(d, "members", list, [])),
            explained_by=None if d.get("explained_by") is None else typed(d, "explained_by", str),
        )


def _optional_int(d: dict[str, Any], key: str) -> int | None:
    return None if d.get(key) is None else typed(d, key, int)


def number_findings(findings: list[Finding]) -> list[Finding]:
    """Sort by severity (then check, rank, step) and assign F1…Fn — deterministic for the same input."""
    ordered = sorted(findings, key=Finding.sort_key)
    return [f.with_id(f"F{index}") for index, f in enumerate(ordered, start=1)]
