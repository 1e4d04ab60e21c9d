"""Compact JSON views of a report for programs with a small reading budget (an LLM's context window, a CI bot).

A full ``profan.report/1`` document carries every table and runs to hundreds of KB; a caller that only needs to
know *what is wrong and where to look* should not have to read it. The views here are shared by the CLI
(``analyze --brief``, ``evidence --format json``, ``rules --format json``) and the MCP server, so both give the
same answer in the same shape:

* ``brief``         — summary counts, where the time went, and the top findings, each with a few evidence locators;
  capped in bytes, naming what it left out so the caller can ask for it;
* ``evidence_doc``  — the raw source rows behind one finding, read back from the original files;
* ``rules_doc``     — the rule pack (bucket rules and checks) or one entry of it.

They only select and trim what the Report already holds (plus one share per bucket); no analysis happens here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.evidence import check_sizes, read_lines
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import SCHEMA as REPORT_SCHEMA
from profan.model.report import Report, clean
from profan.sources.discover import base_dir

BRIEF_SCHEMA = "profan.brief/1"
EVIDENCE_SCHEMA = "profan.evidence/1"
RULES_SCHEMA = "profan.rules/1"

MAX_BYTES = 8000  # the brief's budget in UTF-8 bytes of compact JSON (an 8 KB context slice)
LOCATORS_PER_ITEM = 3  # the largest rows of each evidence item; `profan evidence` gives all cited rows
ITEMS_PER_FINDING = 2  # evidence items shown per finding; `evidence_items` says how many there are
TITLE_CHARS = 200
LIST_ITEMS = 4  # warnings / notes kept (each clipped), the rest counted


def dumps(doc: Any) -> str:
    """Compact JSON, the form the byte budget is measured in."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence_stub(f: Finding) -> list[dict[str, Any]]:
    out = []
    for ev in f.evidence[:ITEMS_PER_FINDING]:
        out.append({"file": ev.file, ev.kind: list(ev.locators[:LOCATORS_PER_ITEM]), "row_count": ev.row_count})
    return out


def finding_stub(f: Finding) -> dict[str, Any]:
    """One finding, cut down to what an agent needs to decide whether to drill into it."""
    stub: dict[str, Any] = {
        "id": f.id,
        "severity": f.severity,
        "check": f.check,
        "rank": f.rank,
        "step": f.step,
        "title": _clip(f.title, TITLE_CHARS),
        "evidence": _evidence_stub(f),
    }
    if len(f.evidence) > ITEMS_PER_FINDING:
        stub["evidence_items"] = len(f.evidence)
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


def brief(
    report: Report, *, max_bytes: int = MAX_BYTES, report_file: str | None = None, drill: str | None = None
) -> dict[str, Any]:
    """The compact view: as many findings (in report order: most severe first) as fit in ``max_bytes``.

    Findings that do not fit are listed under ``omitted`` (check -> ids) so nothing disappears silently.
    ``report_file``, when the full report was written too, is where ``profan evidence`` should look; ``drill``
    replaces the hint on how to get a finding's rows (the MCP server points at its own tool).
    """
    counts = {s: sum(f.severity == s for f in report.findings) for s in SEVERITIES}
    target = report_file or report.source.get("root_abs") or report.source.get("root", "")
    doc: dict[str, Any] = {
        "schema": BRIEF_SCHEMA,
        "report_schema": REPORT_SCHEMA,
        "source": {
            "root": report.source.get("root"),
            "root_abs": report.source.get("root_abs"),
            "format": report.source.get("format"),
            "ranks": [r.get("rank") for r in report.source.get("ranks", [])],
        },
        "report_file": report_file,
        "summary": {
            "findings": len(report.findings),
            **counts,
            "worst": report.worst_severity,
            "time_by_bucket": bucket_shares(report),
        },
        "findings": [],
        "omitted": {},
        "warnings": _clipped_list(report.warnings),
        "notes": _clipped_list(report.notes),
        "drill": drill or f"profan evidence {shlex.quote(str(target))} FINDING_ID --format json",
    }
    doc = clean(doc)
    order = _priority(report.findings)
    stubs = {f.id: finding_stub(f) for f in report.findings}
    lo, hi = 0, len(order)  # the largest prefix of `order` that fits; size grows with the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fill(doc, report, stubs, order[:mid]) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    kept = lo
    _fill(doc, report, stubs, order[:kept])
    return doc


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


def _fill(doc: dict[str, Any], report: Report, stubs: dict[str, dict[str, Any]], kept: list[Finding]) -> int:
    """Put `kept` (shown in report order) and the rest (as check -> ids) into `doc`; return its size in bytes."""
    ids = {f.id for f in kept}
    doc["findings"] = clean([stubs[f.id] for f in report.findings if f.id in ids])
    omitted: dict[str, list[str]] = {}
    for f in report.findings:
        if f.id not in ids:
            omitted.setdefault(f.check, []).append(f.id)
    doc["omitted"] = omitted
    return len(dumps(doc).encode())


# ---------------------------------------------------------------------------------------------- evidence


def find_finding(report: Report, finding_id: str, where: str | Path | None) -> Finding:
    """The finding, or the one-line input error the CLI and the MCP server both show."""
    try:
        return report.finding(finding_id)
    except KeyError:
        ids = ", ".join(f.id for f in report.findings[:12]) or "none"
        more = "…" if len(report.findings) > 12 else ""
        raise ProfanInputError(where, f"no finding {finding_id} (report has {ids}{more})") from None


def evidence_doc(
    report: Report, data_root: Path, finding_id: str, *, where: str | Path | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The rows behind one finding: per evidence item, the raw text at each cited locator (verbatim, as
    ``profan.model.evidence.read_back`` returns it) and, for CSV files, the header so the cells can be named.

    ``limit`` caps the rows read back per item (None: all cited rows, at most ``evidence.MAX_CITED``).
    """
    from profan.app.drill import evidence_rows

    finding = find_finding(report, finding_id, where)
    base = base_dir(data_root)
    check_sizes(base, report.source.get("file_bytes"), {ev.file for ev in finding.evidence})
    items = evidence_rows(data_root, finding)
    for item in items:
        if limit is not None:
            item["rows"] = item["rows"][:limit]
        item["cited"] = len(item.get("lines") or item.get("events") or item.get("pointers") or [])
        if "lines" in item:
            item["header"] = read_lines(base / item["file"], [1]).get(1, "").lstrip("\ufeff")
    return clean(
        {
            "schema": EVIDENCE_SCHEMA,
            "id": finding.id,
            "check": finding.check,
            "severity": finding.severity,
            "rank": finding.rank,
            "step": finding.step,
            "title": finding.title,
            "message": finding.message,
            "metrics": finding.metrics,
            "root": str(data_root),
            "evidence": items,
        }
    )


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
        return {
            "kind": "check",
            "id": c.id,
            "name": c.name,
            "detects": c.detects,
            "why": c.why,
            "params": c.params,
            "source": c.source,
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
