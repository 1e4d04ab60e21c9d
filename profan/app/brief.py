"""Compact JSON views of a report for programs with a small reading budget (an LLM's context window, a CI bot).

A full ``profan.report/2`` document carries every table and runs to hundreds of KB; a caller that only needs to
know *what is wrong, what it costs and what to change* should not have to read it. The views here are shared by
the CLI (``analyze --brief``, ``evidence --format json``, ``rules --format json``) and the MCP server, so both give
the same answer in the same shape:

* ``brief``         — the causes first (estimated gain, action, how to verify, competing explanations, the findings
  each explains, its top evidence locators), then the findings no cause explains, summary counts and where the
  time went; capped in bytes by shrinking the causes' texts and dropping the least important findings, naming what
  it left out so the caller can ask for it;
* ``evidence_doc``  — the raw source rows behind one cause, finding or group member, read back from the files;
* ``rules_doc``     — the rule pack (bucket rules and checks) or one entry of it.

They only select and trim what the Report already holds (plus one share per bucket); no analysis happens here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import polars as pl

from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.evidence import Evidence, check_sizes, read_lines
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import SCHEMA as REPORT_SCHEMA
from profan.model.report import Report, clean
from profan.sources.discover import base_dir

BRIEF_SCHEMA = "profan.brief/2"
EVIDENCE_SCHEMA = "profan.evidence/1"
RULES_SCHEMA = "profan.rules/1"

MAX_BYTES = 8000  # the brief's budget in UTF-8 bytes of compact JSON (an 8 KB context slice)
LOCATORS_PER_ITEM = 3  # the largest rows of each evidence item; `profan evidence` gives all cited rows
ITEMS_PER_FINDING = 2  # evidence items shown per finding; `evidence_items` says how many there are
TITLE_CHARS = 200
LIST_ITEMS = 4  # warnings / notes kept (each clipped), the rest counted
IDS_LISTED = 16  # ranks / steps listed per item; `ranks_total` / `steps_total` say how many there are
# How much of each cause the brief shows, richest first: characters per text, competing explanations, evidence
# items and locators per item, and whether the assumption is kept. The richest that leaves room for the headline
# findings is used; a cause never shrinks to nothing.
CAUSE_LEVELS = (
    {"chars": 1000, "alternatives": 4, "items": 2, "locators": 3, "assumption": True},
    {"chars": 320, "alternatives": 2, "items": 1, "locators": 2, "assumption": True},
    {"chars": 160, "alternatives": 1, "items": 1, "locators": 1, "assumption": False},
    {"chars": 100, "alternatives": 0, "items": 1, "locators": 1, "assumption": False},
)


def dumps(doc: Any) -> str:
    """Compact JSON, the form the byte budget is measured in."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence_stub(evidence: tuple[Evidence, ...], items: int = ITEMS_PER_FINDING, per_item: int = LOCATORS_PER_ITEM):
    out = []
    for ev in evidence[:items]:
        out.append({"file": ev.file, ev.kind: list(ev.locators[:per_item]), "row_count": ev.row_count})
    return out


def _ids(stub: dict[str, Any], key: str, values: tuple[int, ...]) -> None:
    """``values`` under ``key``: all of them, or the first IDS_LISTED and their count (a job of 1,270 steps)."""
    stub[key] = list(values[:IDS_LISTED])
    if len(values) > IDS_LISTED:
        stub[f"{key}_total"] = len(values)


def finding_stub(f: Finding) -> dict[str, Any]:
    """One finding, cut down to what an agent needs to decide whether to drill into it."""
    stub: dict[str, Any] = {
        "id": f.id,
        "severity": f.severity,
        "check": f.check,
        "rank": f.rank,
        "step": f.step,
        "title": _clip(f.title, TITLE_CHARS),
    }
    _ids(stub, "ranks", f.ranks)
    _ids(stub, "steps", f.steps)
    if f.members:
        stub["members"] = len(f.members)
    stub["evidence"] = _evidence_stub(f.evidence)
    if len(f.evidence) > ITEMS_PER_FINDING:
        stub["evidence_items"] = len(f.evidence)
    return stub


def cause_stub(c: Cause, level: int = 0) -> dict[str, Any]:
    """One cause at a detail level of CAUSE_LEVELS: what it is, what removing it would save per step, what to
    change and how to tell it worked, and the ids of the findings it explains (not repeated as findings)."""
    lv = CAUSE_LEVELS[level]
    n = lv["chars"]
    share = c.impact_share
    stub: dict[str, Any] = {
        "id": c.id,
        "check": c.check,
        "title": _clip(c.title, n),
        "impact_us": None if c.impact_us is None else round(c.impact_us, 3),
        "impact_share": None if share is None else round(share, 4),
        "step_us": None if c.step_us is None else round(c.step_us, 3),
    }
    if lv["assumption"]:
        stub["assumption"] = _clip(c.assumption, n)
    stub["action"] = _clip(c.action, n)
    stub["verify"] = _clip(c.verify, n)
    stub["alternatives"] = [_clip(a, n) for a in c.alternatives[: lv["alternatives"]]]
    stub["explains"] = list(c.explains)
    _ids(stub, "ranks", c.ranks)
    _ids(stub, "steps", c.steps)
    stub["evidence"] = _evidence_stub(c.evidence, lv["items"], lv["locators"])
    if len(c.evidence) > lv["items"]:
        stub["evidence_items"] = len(c.evidence)
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
        {"bucket": r["bucket"], "share": r["share"], "time_ms": round(r["time_us"] / 1000, 3)}
        for r in tab.iter_rows(named=True)
    ]


def _clipped_list(items: list[str]) -> dict[str, Any]:
    return {"count": len(items), "first": [_clip(s, 240) for s in items[:LIST_ITEMS]]}


def _skeleton(report: Report, report_file: str | None, drill: str | None) -> dict[str, Any]:
    """Everything of the brief but its causes and findings, in the order it is read: what to read first leads."""
    from profan.render.verdict import step_summary

    counts = {s: sum(f.severity == s for f in report.findings) for s in SEVERITIES}
    target = report_file or report.source.get("root_abs") or report.source.get("root", "")
    step = step_summary(report)
    return {
        "schema": BRIEF_SCHEMA,
        "report_schema": REPORT_SCHEMA,
        "headline": [item.id for item in report.headline],
        "causes": [],
        "summary": {
            "causes": len(report.causes),
            "findings": len(report.findings),
            "explained": sum(f.explained_by is not None for f in report.findings),
            **counts,
            "worst": report.worst_severity,
            "step_us": None if step is None else round(step["step_us"], 3),
            "time_by_bucket": bucket_shares(report),
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


def brief(
    report: Report, *, max_bytes: int = MAX_BYTES, report_file: str | None = None, drill: str | None = None
) -> dict[str, Any]:
    """The compact view: every cause, then as many of the findings no cause explains (most severe first) as fit
    in ``max_bytes``. A finding a cause explains is named by id under it (``explains``), not repeated.

    The causes are shown at the richest detail level of CAUSE_LEVELS that leaves room for the headline findings
    (warning and critical); if even the barest causes do not fit, the last ones go, never the first. What is left
    out is listed under ``omitted`` (check -> ids) so nothing disappears silently. ``report_file``, when the full
    report was written too, is where ``profan evidence`` should look; ``drill`` replaces the hint on how to get the
    rows behind an id (the MCP server points at its own tool).
    """
    doc = clean(_skeleton(report, report_file, drill))
    unexplained = [f for f in report.findings if f.explained_by is None]
    order = _priority(unexplained)
    stubs = {f.id: finding_stub(f) for f in unexplained}
    headline = sum(f.severity in ("critical", "warning") for f in unexplained)
    kept: list[Finding] = []
    for level in range(len(CAUSE_LEVELS)):
        causes = [clean(cause_stub(c, level)) for c in report.causes]
        kept = _largest_prefix(doc, report, causes, stubs, order, max_bytes)
        if len(kept) >= headline and _fill(doc, report, causes, stubs, kept) <= max_bytes:
            break
    while len(causes) > 1 and _fill(doc, report, causes, stubs, kept) > max_bytes:
        causes = causes[:-1]
    _fill(doc, report, causes, stubs, kept)
    return doc


def _largest_prefix(
    doc: dict[str, Any],
    report: Report,
    causes: list[dict[str, Any]],
    stubs: dict[str, dict[str, Any]],
    order: list[Finding],
    max_bytes: int,
) -> list[Finding]:
    """The longest prefix of ``order`` that fits beside ``causes`` (the size grows with the prefix)."""
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fill(doc, report, causes, stubs, order[:mid]) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return order[:lo]


def _priority(findings: list[Finding]) -> list[Finding]:
    """Most severe first; within a severity, one finding of each check before a second of any (a brief that
    shows four ranks' 'device idle' and no 'kernel boundness' answers fewer questions)."""
    seen: dict[str, int] = {}
    keyed = []
    for pos, f in enumerate(findings):
        nth = seen.get(f.check, 0)
        seen[f.check] = nth + 1
        keyed.append(((SEVERITIES.index(f.severity), nth, pos), f))
    return [f for _, f in sorted(keyed, key=lambda kv: kv[0])]


def _fill(
    doc: dict[str, Any],
    report: Report,
    causes: list[dict[str, Any]],
    stubs: dict[str, dict[str, Any]],
    kept: list[Finding],
) -> int:
    """Put ``causes`` and ``kept`` (shown in report order) into ``doc``, and what is left out (a cause that did not
    fit, a finding no cause explains that is not shown) as check -> ids; return the size in bytes."""
    ids = {f.id for f in kept}
    shown_causes = {c["id"] for c in causes}
    doc["causes"] = causes
    doc["findings"] = [stubs[f.id] for f in report.findings if f.id in ids]
    omitted: dict[str, list[str]] = {}
    for c in report.causes:
        if c.id not in shown_causes:
            omitted.setdefault(c.check, []).append(c.id)
    for f in report.findings:
        if f.id not in ids and f.id in stubs:
            omitted.setdefault(f.check, []).append(f.id)
    doc["omitted"] = omitted
    return len(dumps(doc).encode())


# ---------------------------------------------------------------------------------------------- evidence


def find_item(report: Report, ident: str, where: str | Path | None) -> Cause | Finding:
    """The cause (C1), finding (F3) or member of a group (F3.2), or the one-line input error the CLI and the MCP
    server both show."""
    try:
        return report.cause(ident) if ident.startswith("C") else report.finding(ident)
    except KeyError:
        ids = ", ".join(f.id for f in report.findings[:12]) or "none"
        more = "…" if len(report.findings) > 12 else ""
        causes = f"; causes {', '.join(c.id for c in report.causes)}" if report.causes else ""
        what = "cause" if ident.startswith("C") else "finding"
        raise ProfanInputError(where, f"no {what} {ident} (report has {ids}{more}{causes})") from None


def _severity(report: Report, item: Cause | Finding) -> str:
    """A finding's severity; a cause's is the worst of the findings it explains (what it is the cause of)."""
    if isinstance(item, Finding):
        return item.severity
    explained = [f.severity for f in report.findings if f.id in item.explains]
    return next((s for s in SEVERITIES if s in explained), "warning")


def _only(values: tuple[int, ...]) -> int | None:
    return values[0] if len(values) == 1 else None


def _item_fields(report: Report, item: Cause | Finding) -> dict[str, Any]:
    """What the evidence document says about the claim besides its rows."""
    fields: dict[str, Any] = {
        "id": item.id,
        "kind": "cause" if isinstance(item, Cause) else "member" if "." in item.id else "finding",
        "check": item.check,
        "severity": _severity(report, item),
        "rank": item.rank if isinstance(item, Finding) else _only(item.ranks),
        "step": item.step if isinstance(item, Finding) else _only(item.steps),
        "ranks": list(item.ranks),
        "steps": list(item.steps),
        "title": item.title,
        "message": item.message,
        "metrics": item.metrics,
    }
    if isinstance(item, Cause):
        share = item.impact_share
        fields.update(
            impact_us=item.impact_us,
            impact_share=None if share is None else round(share, 4),
            assumption=item.assumption,
            action=item.action,
            verify=item.verify,
            alternatives=list(item.alternatives),
            explains=list(item.explains),
        )
    else:
        fields.update(explained_by=item.explained_by, members=[m.id for m in item.members])
    return fields


def evidence_doc(
    report: Report, data_root: Path, finding_id: str, *, where: str | Path | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The rows behind one cause, finding or group member: per evidence item, the raw text at each cited locator
    (verbatim, as ``profan.model.evidence.read_back`` returns it) and, for CSV files, the header so the cells can be
    named.

    ``limit`` caps the rows read back per item (None: all cited rows, at most ``evidence.MAX_CITED``).
    """
    from profan.app.drill import evidence_rows

    item = find_item(report, finding_id, where)
    base = base_dir(data_root)
    check_sizes(base, report.source.get("file_bytes"), {ev.file for ev in item.evidence})
    items = evidence_rows(data_root, item)
    for row in items:
        if limit is not None:
            row["rows"] = row["rows"][:limit]
        row["cited"] = len(row.get("lines") or row.get("events") or row.get("pointers") or [])
        if "lines" in row:
            row["header"] = read_lines(base / row["file"], [1]).get(1, "").lstrip("\ufeff")
    return clean({"schema": EVIDENCE_SCHEMA, **_item_fields(report, item), "root": str(data_root), "evidence": items})


# ---------------------------------------------------------------------------------------------- rules


def rules_doc(extra: list[Path] | None = None, ident: str | None = None) -> dict[str, Any]:
    """The rule pack as data (``ident`` None) or one rule/check; an unknown id is a one-line input error."""
    from profan.rulepack.pack import BucketRule, load

    pack = load(extra or [])

    def rule(r: BucketRule) -> dict[str, Any]:
        return {
            "kind": "bucket-rule",
            "id": r.id,
            "name": r.name,
            "bucket": r.bucket,
            "match": r.match,
            "why": r.why,
            "example": r.example,
            "applies_to": r.applies_to,
            "source": r.source,
        }

    def check(c: Any) -> dict[str, Any]:
        # a check that can be a cause says what to change, how to verify it and what else could explain the data
        # (templates: a report fills in the cause's numbers)
        cause = c.params.get("cause") if isinstance(c.params.get("cause"), dict) else {}
        return {
            "kind": "check",
            "id": c.id,
            "name": c.name,
            "detects": c.detects,
            "why": c.why,
            "params": c.params,
            "source": c.source,
            **{k: cause[k] for k in ("action", "verify", "alternatives") if k in cause},
        }

    if ident:
        item = pack.find(ident)
        if item is None:
            raise ProfanInputError(None, f"no rule or check {ident!r}; run 'profan rules' for the list")
        return clean({"schema": RULES_SCHEMA, "item": rule(item) if isinstance(item, BucketRule) else check(item)})
    return clean(
        {
            "schema": RULES_SCHEMA,
            "files": pack.files,
            "rules": [rule(r) for r in pack.rules],
            "checks": [check(c) for c in pack.checks.values()],
        }
    )
