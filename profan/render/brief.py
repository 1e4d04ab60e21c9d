"""The brief: a compact JSON view of a report for programs with a small reading budget (an LLM's context window,
a CI bot).

A full ``profan.report/2`` document carries every table and runs to hundreds of KB; a caller that only needs to
know *what is wrong, what it costs and what to change* should not have to read it. The brief is shared by the CLI
(``analyze --brief``) and the MCP server, so both give the same answer in the same shape: the causes first
(estimated gain, action, how to verify, competing explanations, the findings each explains, its top evidence
locators), then the findings no cause explains, summary counts and where the time went. It is held to a byte cap
by the ladder of forms of `profan.render.byte_cap`. The rows behind one id are the evidence document's
(`profan.render.evidence_doc`); the rule pack as data is the rules index's (`profan.render.rules_index`).

It only selects and trims what the Report already holds (plus one share per bucket); no analysis happens here.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from profan.model.causes import Cause
from profan.model.evidence import Evidence
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import SCHEMA as REPORT_SCHEMA
from profan.model.report import Report, clean
from profan.model.rl_ledger import ledger_brief
from profan.render.byte_cap import LOCATORS_PER_ITEM, Size, below_floor, clip, fit, json_bytes, list_ids

BRIEF_SCHEMA = "profan.brief/2"

MAX_BYTES = 8000  # the CLI brief's budget in UTF-8 bytes of compact JSON (an 8 KB context slice)
ITEMS_PER_FINDING = 2  # evidence items shown per finding; `evidence_items` says how many there are
TITLE_CHARS = 200
VERDICT_LINES = 8  # a comparison's verdict lines kept, the rest counted (`verdict_total`)
LIST_ITEMS = 4  # warnings / notes kept (each clipped), the rest counted
BUCKETS_BARE = 3  # time_by_bucket rows the barest briefs keep
# How much of each cause the brief shows, richest first: characters per text, competing explanations, evidence
# items and locators per item, and whether the assumption is kept. A cause never shrinks to nothing.
CAUSE_LEVELS = (
    {"chars": 1000, "alternatives": 4, "items": 2, "locators": 3, "assumption": True},
    {"chars": 320, "alternatives": 2, "items": 1, "locators": 2, "assumption": True},
    {"chars": 160, "alternatives": 1, "items": 1, "locators": 1, "assumption": False},
    {"chars": 100, "alternatives": 0, "items": 1, "locators": 1, "assumption": False},
)


def _evidence_stub(evidence: tuple[Evidence, ...], items: int = ITEMS_PER_FINDING, per_item: int = LOCATORS_PER_ITEM):
    out = []
    for ev in evidence[:items]:
        out.append({"file": ev.file, ev.kind: list(ev.locators[:per_item]), "row_count": ev.row_count})
    return out


def finding_stub(finding: Finding, lean: bool = False) -> dict[str, Any]:
    """One finding, cut down to what an agent needs to decide whether to drill into it; ``lean``: one evidence
    item with one locator (what a tight budget keeps)."""
    stub: dict[str, Any] = {
        "id": finding.id,
        "severity": finding.severity,
        "check": finding.check,
        "rank": finding.rank,
        "step": finding.step,
        "title": clip(finding.title, TITLE_CHARS),
    }
    list_ids(stub, "ranks", finding.ranks)
    list_ids(stub, "steps", finding.steps)
    if finding.members:
        stub["members"] = len(finding.members)
    items = 1 if lean else ITEMS_PER_FINDING
    stub["evidence"] = _evidence_stub(finding.evidence, items, 1 if lean else LOCATORS_PER_ITEM)
    if len(finding.evidence) > items:
        stub["evidence_items"] = len(finding.evidence)
    return stub


def cause_stub(cause: Cause, level: int = 0) -> dict[str, Any]:
    """One cause at a detail level of CAUSE_LEVELS: what it is, what removing it would save per step, what to
    change and how to tell it worked, and the ids of the findings it explains (not repeated as findings)."""
    lv = CAUSE_LEVELS[level]
    n = lv["chars"]
    share = cause.impact_share
    stub: dict[str, Any] = {
        "id": cause.id,
        "check": cause.check,
        "title": clip(cause.title, n),
        "impact_us": None if cause.impact_us is None else round(cause.impact_us, 3),
        "impact_share": None if share is None else round(share, 4),
        "step_us": None if cause.step_us is None else round(cause.step_us, 3),
        "severity": cause.severity,
    }
    if cause.impact_us is None and cause.bound_us is not None:
        stub["bound_us"] = round(cause.bound_us, 3)  # no estimate: the most it could save, ordered by
    if lv["assumption"]:
        stub["assumption"] = clip(cause.assumption, n)
    stub["action"] = clip(cause.action, n)
    stub["verify"] = clip(cause.verify, n)
    stub["alternatives"] = [clip(alternative, n) for alternative in cause.alternatives[: lv["alternatives"]]]
    stub["explains"] = list(cause.explains)
    list_ids(stub, "ranks", cause.ranks)
    list_ids(stub, "steps", cause.steps)
    stub["evidence"] = _evidence_stub(cause.evidence, lv["items"], lv["locators"])
    if len(cause.evidence) > lv["items"]:
        stub["evidence_items"] = len(cause.evidence)
    return stub


def bucket_shares(report: Report) -> list[dict[str, Any]]:
    """Kernel time per bucket over all ranks and steps, largest first (the headline of 'where did time go')."""
    bd = report.breakdown
    if bd.is_empty() or not {"bucket", "time_us"} <= set(bd.columns):
        return []
    tab = (
        bd.group_by("bucket")
        .agg(pl.col("time_us").sum())
        .with_columns(share=(pl.col("time_us") / pl.col("time_us").sum()).round(4))
        .sort("time_us", descending=True)
    )
    return [
        {"bucket": row["bucket"], "share": row["share"], "time_ms": round(row["time_us"] / 1000, 3)}
        for row in tab.iter_rows(named=True)
    ]


SERVING_RANKS = 8  # ranks whose per-phase rows the brief lists (the JSON report has every rank)


def serving_summary(report: Report) -> dict[str, Any]:
    """``serving``: per rank and phase, the iterations and their time (p50 / p90 / max, ms) and device busy
    share, tokens per iteration and time per token where known — for a serving capture only (else nothing, so
    a training brief is as it was)."""
    phases = report.tables.get("serving_phases")
    if phases is None or phases.is_empty():
        return {}
    keep = sorted(set(phases["rank"].to_list()))[:SERVING_RANKS]
    rows = phases.filter(pl.col("rank").is_in(keep))
    ms_cols = {"time_us": "time_ms", "p50_us": "p50_ms", "p90_us": "p90_ms", "max_us": "max_ms"}
    out = rows.select(
        "rank",
        "phase",
        "iterations",
        *[(pl.col(key) / 1000).round(3).alias(value) for key, value in ms_cols.items()],
        pl.col("busy_share").round(4),
        pl.col("tokens_per_iteration").round(2),
        (pl.col("us_per_token") / 1000).round(4).alias("ms_per_token"),
        "slowest",
    )
    split = report.tables.get("serving_phase_buckets")
    if split is not None and not split.is_empty():  # each phase's three largest buckets, as shares of its time
        top = split.group_by("rank", "phase", maintain_order=True).agg(
            pl.struct("bucket", pl.col("share").round(4)).head(3).alias("top_buckets")
        )
        out = out.join(top, on=["rank", "phase"], how="left", maintain_order="left")
    return {"serving": {"phases": out.to_dicts(), "ranks_total": phases["rank"].n_unique()}}


def _compare_verdict(report: Report) -> dict[str, Any]:
    """A comparison's verdict (each side's causes matched by check and ranks), every line with its severity
    (`_render` keeps the first ones its form allows); nothing for any other report."""
    if report.source.get("kind") != "compare":
        return {}
    from profan.render.verdict import compare_verdict

    return {
        "verdict": [
            {"severity": line["severity"], "sentence": clip(line["sentence"], 240)} for line in compare_verdict(report)
        ]
    }


def _clipped_list(items: list[str], keep: int = LIST_ITEMS) -> dict[str, Any]:
    return {"count": len(items), "first": [clip(item, 240) for item in items[:keep]]}


def _skeleton(report: Report, report_file: str | None, drill: str | None) -> dict[str, Any]:
    """Everything of the brief but its causes and findings, in the order it is read: what to read first leads."""
    from profan.diagnosis.step import step_summary

    counts = {s: sum(finding.severity == s for finding in report.findings) for s in SEVERITIES}
    target = report_file or report.source.get("root_abs") or report.source.get("root", "")
    step = step_summary(report.tables, report.causes)
    return {
        "schema": BRIEF_SCHEMA,
        "report_schema": REPORT_SCHEMA,
        "headline": [item.id for item in report.headline],
        **_compare_verdict(report),
        "causes": [],
        "summary": {
            "causes": len(report.causes),
            "findings": len(report.findings),
            "explained": sum(finding.explained_by is not None for finding in report.findings),
            **counts,
            "worst": report.worst_severity,
            "step_us": None if step is None else round(step["step_us"], 3),
            "time_by_bucket": bucket_shares(report),
            **({"rl_ledger": ledger} if (ledger := ledger_brief(report.tables)) is not None else {}),
            **serving_summary(report),
        },
        "findings": [],
        "omitted": {},
        "source": {
            "root": report.source.get("root"),
            "root_abs": report.source.get("root_abs"),
            "format": report.source.get("format"),
            "ranks": [r.get("rank") for r in report.source.get("ranks", [])],
        },
        "report_file": report_file,
        "warnings": _clipped_list(report.warnings),
        "notes": _clipped_list(report.notes),
        "drill": drill or f"profan evidence {shlex.quote(str(target))} ID --format json",
    }


@dataclass(frozen=True)
class _Plan:
    """How much of the report one form of the brief shows."""

    findings: int  # the first findings no cause explains, in priority order
    lean: int  # the last `lean` of those with one evidence item and one locator
    levels: tuple[int, ...]  # per shown cause, its CAUSE_LEVELS index
    warnings: int = LIST_ITEMS  # warnings quoted (the rest counted)
    notes: int = LIST_ITEMS  # notes quoted
    buckets: int | None = None  # time_by_bucket rows (None: all)
    verdict: int = VERDICT_LINES  # a comparison's verdict lines quoted (the rest counted)


def _plans(causes: int, findings: int, headline: int) -> Iterator[_Plan]:
    """The forms of the brief, richest first, each showing less than the one before: the info findings go (least
    important first), the shown findings' evidence thins, the notes are counted instead of quoted (what was not
    assessed weighs less than what is wrong), the later causes lose detail a level at a time (the last first), the
    warnings are cut to the first (a comparison's verdict to three lines), the headline findings go, the later
    causes go (named under `omitted`), the last warning quoted goes (the verdict keeps its first line), the first
    cause is shortened, the bucket table is cut, and last the first cause reaches its barest. The first cause is
    never dropped; without causes (a comparison), neither is the first finding."""
    p = _Plan(findings, 0, (0,) * causes)
    yield p
    steps: list[dict[str, Any]] = [{"findings": n} for n in range(findings - 1, headline - 1, -1)]
    steps += [{"lean": n} for n in range(1, min(findings, headline) + 1)]
    steps += [{"notes": 1}, {"notes": 0}]
    for level in range(1, len(CAUSE_LEVELS)):
        steps += [{"level": (index, level)} for index in range(causes - 1, 0, -1)]
    steps += [{"warnings": 1}, {"verdict": 3}]
    keep = 0 if causes else min(1, findings)
    steps += [{"findings": n} for n in range(min(findings, headline) - 1, keep - 1, -1)]
    steps += [{"causes": n} for n in range(causes - 1, 0, -1)]
    steps += [{"warnings": 0}, {"verdict": 1}]
    steps += [{"level": (0, 1)}] if causes else []
    steps += [{"buckets": BUCKETS_BARE}]
    steps += [{"level": (0, level)} for level in range(2, len(CAUSE_LEVELS)) if causes]
    for step in steps:
        if "findings" in step:
            p = replace(p, findings=step["findings"], lean=min(p.lean, step["findings"]))
        elif "level" in step:
            index, level = step["level"]
            p = replace(p, levels=(*p.levels[:index], level, *p.levels[index + 1 :]))
        elif "causes" in step:
            p = replace(p, levels=p.levels[: step["causes"]])
        else:
            p = replace(p, **step)
        yield p


def brief(
    report: Report,
    *,
    max_bytes: int | None = MAX_BYTES,
    report_file: str | None = None,
    drill: str | None = None,
    size: Size = json_bytes,
) -> dict[str, Any]:
    """The compact view: every cause, then the findings no cause explains (most severe first), in the richest form
    of `_plans` whose ``size`` is within ``max_bytes``. A finding a cause explains is named by id under it
    (``explains``), not repeated; what is left out is listed under ``omitted`` (check -> ids) so nothing
    disappears silently. ``report_file``, when the full report was written too, is where ``profan evidence``
    should look; ``drill`` replaces the hint on how to get the rows behind an id (the MCP server points at its own
    tool).
    """
    skeleton = clean(_skeleton(report, report_file, drill))
    unexplained = [finding for finding in report.findings if finding.explained_by is None]
    order = _priority(unexplained)
    headline = sum(finding.severity in ("critical", "warning") for finding in unexplained)
    causes: dict[tuple[str, int], dict[str, Any]] = {}
    stubs: dict[tuple[str, bool], dict[str, Any]] = {}

    def render(p: _Plan) -> dict[str, Any]:
        for cause, level in zip(report.causes, p.levels, strict=False):
            causes.setdefault((cause.id, level), clean(cause_stub(cause, level)))
        shown = order[: p.findings]
        lean = {finding.id for finding in shown[len(shown) - p.lean :]} if p.lean else set()
        for finding in shown:
            stubs.setdefault((finding.id, finding.id in lean), clean(finding_stub(finding, finding.id in lean)))
        return _render(report, skeleton, p, causes, stubs, {finding.id: finding.id in lean for finding in shown})

    forms = (render(p) for p in _plans(len(report.causes), len(order), headline))
    doc, fits = fit(forms, max_bytes, size)
    return doc if fits else below_floor(doc, "brief", max_bytes, size)


def _render(
    report: Report,
    skeleton: dict[str, Any],
    p: _Plan,
    causes: dict[tuple[str, int], dict[str, Any]],
    stubs: dict[tuple[str, bool], dict[str, Any]],
    shown: dict[str, bool],
) -> dict[str, Any]:
    """One form of the brief: ``shown`` maps the ids of the findings shown to whether each is lean; what is left
    out (a cause that did not fit, a finding no cause explains that is not shown) is named as check -> ids."""
    doc = dict(skeleton)
    doc["causes"] = [causes[(cause.id, level)] for cause, level in zip(report.causes, p.levels, strict=False)]
    doc["findings"] = [stubs[(finding.id, shown[finding.id])] for finding in report.findings if finding.id in shown]
    omitted: dict[str, list[str]] = {}
    for cause in report.causes[len(p.levels) :]:
        omitted.setdefault(cause.check, []).append(cause.id)
    for finding in report.findings:
        if finding.explained_by is None and finding.id not in shown:
            omitted.setdefault(finding.check, []).append(finding.id)
    doc["omitted"] = omitted
    if p.warnings < LIST_ITEMS:
        doc["warnings"] = _clipped_list(report.warnings, p.warnings)
    if p.notes < LIST_ITEMS:
        doc["notes"] = _clipped_list(report.notes, p.notes)
    if len(doc.get("verdict", ())) > p.verdict:
        doc["verdict_total"] = len(doc["verdict"])
        doc["verdict"] = doc["verdict"][: p.verdict]
    if p.buckets is not None:
        doc["summary"] = {**doc["summary"], "time_by_bucket": doc["summary"]["time_by_bucket"][: p.buckets]}
    return doc


def _priority(findings: list[Finding]) -> list[Finding]:
    """Most severe first; within a severity, one finding of each check before a second of any (a brief that
    shows four ranks' 'device idle' and no 'kernel boundness' answers fewer questions)."""
    seen: dict[str, int] = {}
    keyed = []
    for pos, finding in enumerate(findings):
        nth = seen.get(finding.check, 0)
        seen[finding.check] = nth + 1
        keyed.append(((SEVERITIES.index(finding.severity), nth, pos), finding))
    return [finding for _, finding in sorted(keyed, key=lambda kv: kv[0])]
