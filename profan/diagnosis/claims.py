"""What every cause builder shares: which findings are already explained (`Claims`), the step time a gain is
measured against, and `make_cause`, which fills a cause's texts from rules/checks.toml."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from profan.analyses.contract import Job
from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.textfmt import fill_rule_text

SYMPTOMS = ("critical", "warning")  # severities of findings a cause is made from


class Claims:
    """Which findings a cause already explains: each finding is explained by the first cause that claims it.

    ``detected``: the keys of the findings their check raised as symptoms (warning or above by its own
    thresholds), before their cost graded them. A cause is built from those: the check says what is wrong, the cost
    says how loud, and whether it is a cause at all is its gain above what is normal for the run's kind
    (`severity.keep`). Without it, the findings' own severities say which are symptoms."""

    def __init__(self, findings: Iterable[Finding], detected: set[tuple] | None = None) -> None:
        self.findings = list(findings)
        self.taken: set[tuple] = set()
        self.detected = detected

    def take(
        self,
        checks: Iterable[str],
        *,
        steps: Iterable[int] | None = None,
        ranks: Iterable[int] | None = None,
        not_ranks: Iterable[int] = (),
        severities: tuple[str, ...] = ("critical", "warning", "info"),
        where: Callable[[Finding], bool] | None = None,
    ) -> list[Finding]:
        """The unclaimed findings of ``checks`` (in ``steps``, on ``ranks``, not on ``not_ranks``, and for which
        ``where`` holds), now claimed. A finding for no particular step (or rank) matches any step (or rank); one
        for neither is a claim about the whole job, not a symptom, and is claimed only as a source (`own`)."""
        checks, exclude = set(checks), set(not_ranks)
        step_set = None if steps is None else set(steps)
        rank_set = None if ranks is None else set(ranks)
        out = [
            finding
            for finding in self.findings
            if finding.key not in self.taken
            and (finding.rank is not None or finding.step is not None)
            and finding.check in checks
            and finding.severity in severities
            and (step_set is None or finding.step is None or finding.step in step_set)
            and (rank_set is None or finding.rank is None or finding.rank in rank_set)
            and (finding.rank is None or finding.rank not in exclude)
            and (where is None or where(finding))
        ]
        self.taken.update(finding.key for finding in out)
        return out

    def own(self, sources: Iterable[Finding]) -> None:
        """Claim a cause's own source findings."""
        self.taken.update(source.key for source in sources)

    def unclaimed(self, check: str) -> list[Finding]:
        """The symptoms of ``check`` no cause has claimed yet."""
        return [
            finding
            for finding in self.findings
            if finding.check == check
            and finding.key not in self.taken
            and (finding.severity in SYMPTOMS if self.detected is None else finding.key in self.detected)
        ]


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


@dataclass(frozen=True)
class Grounds:
    """What a cause stands on: the findings it comes from (``sources``) and those it explains besides, the step
    times its gain is a share of, and the gain (``impact_us``) or, where none can be estimated, the bound on it
    (``bound_us``). The ranks at fault default to every rank the sources name; the steps are the given ones with
    the sources'."""

    sources: list[Finding]
    steps_us: dict[int, float]
    impact_us: float | None = None
    bound_us: float | None = None
    explained: list[Finding] = field(default_factory=list)
    ranks: Iterable[int] = ()
    steps: Iterable[int] = ()


@dataclass(frozen=True)
class Wording:
    """Which of the rule's texts a cause takes: a case's own (``<case>_title`` …) where the rule has one, a case of
    its action alone, and the message (by default the first source finding's)."""

    message: str | None = None
    case: str | None = None
    action_case: str | None = None


def make_cause(job: Job, check: str, values: dict[str, Any], grounds: Grounds, wording: Wording = Wording()) -> Cause:
    """A cause of ``check`` on ``grounds``, its texts filled from rules/checks.toml with ``values``."""
    rule = job.pack.check(check).cause
    sources = grounds.sources
    steps = sorted({*grounds.steps, *(step for source in sources for step in source.steps)})
    ranks = sorted(set(grounds.ranks) or {rank for source in sources for rank in source.ranks})
    measured = [grounds.steps_us[step] for step in steps if step in grounds.steps_us] or list(grounds.steps_us.values())
    step_us = statistics.fmean(measured) if measured else None
    impact_us, bound_us = grounds.impact_us, grounds.bound_us
    if impact_us is not None and step_us:
        impact_us = min(max(impact_us, 0.0), step_us)
    if bound_us is not None and step_us:
        bound_us = min(max(bound_us, 0.0), step_us)
    fill = _filler(values)
    case = wording.case

    def text(key: str) -> str:  # a case's own text where the rule has one (``<case>_<key>``), else the rule's
        return rule.get(f"{case}_{key}", rule[key]) if case else rule[key]

    action_case = wording.action_case
    action = rule.get(f"{action_case}_action", text("action")) if action_case else text("action")
    message = wording.message
    return Cause(
        check=check,
        title=fill(text("title")),
        message=message if message is not None else " ".join(source.message for source in sources[:1]),
        evidence=tuple(e for source in sources for e in source.evidence),
        impact_us=impact_us,
        assumption=fill(text("assumption")),
        action=fill(action),
        verify=fill(text("verify")),
        alternatives=tuple(fill(a) for a in rule.get("alternatives", [])),
        ranks=tuple(ranks),
        steps=tuple(steps),
        step_us=step_us,
        metrics=values,
        explains_keys=tuple(source.key for source in [*sources, *grounds.explained]),
        bound_us=None if impact_us is not None else bound_us,
    )


def _filler(values: dict[str, Any]) -> Callable[[str], str]:
    def fill(template: str) -> str:
        try:
            return fill_rule_text(template, values)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"rules/checks.toml: template {template[:60]!r} needs {exc}") from None

    return fill


def explainable(job: Job, check: str) -> set[str]:
    """The checks a cause of ``check`` may explain (its [check.cause] explains), with itself."""
    return {check, *job.pack.check(check).cause["explains"]}


def span(values: list[float], form: str) -> str:
    """'16.3%–19.6%', or one value when all are the same as printed."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}–{high}"
