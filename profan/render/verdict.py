"""The verdict every output leads with: the step, the causes by estimated gain with what to change, and the
headline findings no cause explains.

Why one module: the Markdown, HTML and Excel reports and the brief must lead with the same causes in the same
order and say the same words about them (the gain, or why there is none). The numbers are the report's; this only
words them and sorts the findings under the causes that explain them.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from profan.analyses.serving.phases import PHASE_ORDER
from profan.diagnosis.step import step_summary
from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.report import Report
from profan.model.textfmt import counted, fmt_ms, fmt_pct, fmt_ranks, id_list, ms

_NO_ESTIMATE = re.compile(r"^\s*no estimate\s*[:.,;—-]*\s*", re.I)
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.(?=\s+[A-Z]|\s*$)")  # a full stop before a capital or the end


def step_text(step: dict[str, Any] | None) -> str:
    """'810.15 ms (the slowest rank's step 13, from step_trace_time.csv)'."""
    if step is None:
        return "no step time in this capture (no step_trace_time.csv and no step windows in a trace)"
    steps = step["steps"]
    which = (
        f"the slowest rank's step {steps[0]}"
        if len(steps) == 1
        else f"mean over steps {id_list(steps)} of the slowest rank's step"
        if steps
        else "the slowest rank's step"
    )
    text = f"{fmt_ms(step['step_us'])} ms ({which}, from {step['source']})"
    if step.get("period_us"):  # the windows leave out the device's idle time before each step
        text += (
            f"; {fmt_ms(step['period_us'])} ms from one step's start to the next's (steps "
            f"{id_list(step['period_steps'])}), with the idle time between"
        )
    return text


def opening(tables: dict[str, pl.DataFrame], step: dict[str, Any] | None) -> tuple[str, str]:
    """What the verdict opens with, as (label, text): the step (`step_text`), or on a serving capture its model
    iterations — how many, by phase with the p50 period of one, and the marker that cut them — since a serving
    capture's unit is the iteration, not a step; its step follows where it has one."""
    its = tables.get("serving_iterations")
    if its is None or its.is_empty():
        return "The step", step_text(step)
    order = pl.col("phase").replace_strict(PHASE_ORDER, default=len(PHASE_ORDER), return_dtype=pl.Int64)
    phases = its.group_by("phase").agg(pl.len().alias("n"), pl.col("period_us").median().alias("p50")).sort(order)
    each = ", ".join(
        f"{phase} {n:,} ({'' if n == 1 else 'p50 '}{ms(p50)}{'' if n == 1 else ' each'})"
        for phase, n, p50 in phases.iter_rows()
    )
    markers = list(dict.fromkeys(its["rule"].to_list()))
    text = (
        f"{counted(its.height, 'model iteration')} on {counted(its['rank'].to_list(), 'rank')}, cut by marker"
        f"{'s' if len(markers) > 1 else ''} {', '.join(markers)}: {each}"
    )
    return "The iterations", text + (f"; the step: {step_text(step)}" if step else "; no step time (no step windows)")


def no_estimate_reason(assumption: str) -> str:
    """Why a cause has no estimate, in one clause: the first sentence of its assumption, without the
    'No estimate:' it opens with."""
    text = _NO_ESTIMATE.sub("", assumption.strip(), count=1)
    end = _SENTENCE_END.search(text)
    clause = text[: end.start()] if end else text.rstrip(".")
    return clause[:1].lower() + clause[1:] if clause else "the data cannot support one"


def share_of(step: dict[str, Any] | None) -> str:
    """What the causes' shares are of (`profan.diagnosis.step.denominator`), as the verdict words it."""
    return "the step period" if step and step.get("period_us") else "the step"


def gain_text(cause: Cause, per: str = "the step") -> str:
    """'84.8 ms per step (10.5% of the step)', or 'no estimate: <why>'. ``per``: what the share is of — "the step
    period" where the verdict's step has one (`profan.diagnosis.step`). The ms as the causes' own texts write
    them (`textfmt.ms`): the gain line and the assumption under it must not read 61.30 ms and 61.3 ms."""
    per = cause.metrics.get("share_of") or per  # a cause of its own step (`profan.diagnosis.step.own_step`)
    each = cause.metrics.get("per") or "step"
    if cause.impact_us is None and cause.bound_us is not None:
        share = f", {fmt_pct(cause.bound_us / cause.step_us)} of {per}" if cause.step_us else ""
        return (
            f"no estimate (a bound: at most {ms(cause.bound_us)} per {each}{share}): "
            f"{no_estimate_reason(cause.assumption)}"
        )
    if cause.impact_us is None:
        return f"no estimate: {no_estimate_reason(cause.assumption)}"
    share = cause.impact_share
    of_step = f" ({fmt_pct(share)} of {per})" if share is not None else ""
    return f"{ms(cause.impact_us)} per {each}{of_step}"


def span_text(ranks: tuple[int, ...] | list[int], steps: tuple[int, ...] | list[int]) -> str:
    """'ranks 0–3 · step 13': the ranks and steps a cause or finding covers, as runs."""
    parts = []
    if ranks:
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {fmt_ranks(ranks)}")
    if steps:
        parts.append(f"step{'s' if len(steps) > 1 else ''} {fmt_ranks(steps)}")
    return " · ".join(parts)


def drill_ids(report: Report) -> str:
    """'C1, F1, F2.1': one cause, one finding and one group member this report has, the ids the footer's
    `profan evidence` line offers as examples. Fixed examples (C1, F3) name claims a report may not hold: a capture
    with no cause or one finding sent the reader to an id the command then refuses."""
    members = [member.id for finding in report.findings for member in finding.members]
    firsts = [ids[0] for ids in ([c.id for c in report.causes], [f.id for f in report.findings], members) if ids]
    return ", ".join(firsts)


def also_worth_a_look(report: Report) -> list[Finding]:
    """The headline findings no cause explains (warning and critical)."""
    return [item for item in report.headline if isinstance(item, Finding)]


def findings_by_cause(report: Report) -> tuple[list[tuple[Cause, list[Finding]]], list[Finding]]:
    """Each cause with the findings it explains (in the order it lists them), and the findings no cause explains
    (in report order)."""
    by_id = {finding.id: finding for finding in report.findings}
    grouped = []
    placed: set[str] = set()
    for cause in report.causes:
        ids = [explain for explain in cause.explains if explain in by_id]
        ids += [finding.id for finding in report.findings if finding.explained_by == cause.id and finding.id not in ids]
        placed.update(ids)
        grouped.append((cause, [by_id[explain] for explain in ids]))
    return grouped, [finding for finding in report.findings if finding.id not in placed]


def cause_view(cause: Cause, per: str = "the step") -> dict[str, Any]:
    """A cause as the templates show it (texts raw: each renderer escapes them its own way). ``per``: what its
    share is of (`gain_text`)."""
    return {
        "id": cause.id,
        "check": cause.check,
        "title": cause.title,
        "message": cause.message,
        "gain": gain_text(cause, per),
        "impact_us": cause.impact_us,
        "impact_share": cause.impact_share,
        "bound_us": cause.bound_us,
        "severity": cause.severity,
        "has_estimate": cause.impact_us is not None,
        "assumption": cause.assumption,
        "action": cause.action,
        "verify": cause.verify,
        "alternatives": list(cause.alternatives),
        "explains": list(cause.explains),
        "span": span_text(cause.ranks, cause.steps),
        "evidence": [e.to_dict() for e in cause.evidence],
        "rows_total": sum(e.row_count for e in cause.evidence),
    }


def verdict(report: Report) -> dict[str, Any]:
    """What every report leads with: the step, the causes in order, and the headline findings they leave."""
    step = step_summary(report.tables, report.causes)
    per = share_of(step)
    return {
        "step": step,
        **dict(zip(("step_label", "step_text"), opening(report.tables, step), strict=True)),
        "causes": [cause_view(cause, per) for cause in report.causes],
        "also": [
            {
                "id": finding.id,
                "severity": finding.severity,
                "title": finding.title,
                "span": span_text(finding.ranks, finding.steps),
            }
            for finding in also_worth_a_look(report)
        ],
        "explained": sum(finding.explained_by is not None for finding in report.findings),
        "findings": len(report.findings),
    }


def compare_verdict(report: Report) -> list[dict[str, Any]]:
    """A comparison's verdict lines (its table ``compare_causes``: severity, sentence), B's gain first; empty for
    any other report, and for a comparison whose sides have no cause."""
    table = report.tables.get("compare_causes")
    return [] if table is None or table.is_empty() else table.select("severity", "sentence").to_dicts()
