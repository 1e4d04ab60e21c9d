"""Compact JSON views of a report for programs with a small reading budget (an LLM's context window, a CI bot).

A full ``profan.report/2`` document carries every table and runs to hundreds of KB; a caller that only needs to
know *what is wrong, what it costs and what to change* should not have to read it. The views here are shared by
the CLI (``analyze --brief``, ``evidence --format json``, ``rules --format json``) and the MCP server, so both give
the same answer in the same shape:

* ``brief``         — the causes first (estimated gain, action, how to verify, competing explanations, the findings
  each explains, its top evidence locators), then the findings no cause explains, summary counts and where the
  time went;
* ``evidence_doc``  — the raw source rows behind one cause, finding or group member, read back from the files, or
  (``limit=0``) only its message, metrics and locators;
* ``rules_doc``     — the rule pack (bucket rules and checks) or one entry of it.

Each can be held to a byte cap. A capped view is the first of a ladder of forms, richest first, each holding less
than the one before, that fits: so a larger cap never shows less, and a smaller one loses detail step by step (the
least important findings, rows, locators, the later causes' texts) instead of all at once. The size is measured by
the caller's ``size`` function: compact JSON for the CLI, the bytes of the whole response on the wire for the MCP
server. Below the smallest form, that form is returned with a ``note`` saying so.

They only select and trim what the Report already holds (plus one share per bucket); no analysis happens here.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from profan import trust
from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.evidence import Evidence
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import SCHEMA as REPORT_SCHEMA
from profan.model.report import Report, clean
from profan.model.rl_ledger import ledger_brief
from profan.sources.common.readback import check_sizes, read_lines
from profan.sources.discovery.discover import base_dir

BRIEF_SCHEMA = "profan.brief/2"
EVIDENCE_SCHEMA = "profan.evidence/1"
RULES_SCHEMA = "profan.rules/1"

MAX_BYTES = 8000  # the CLI brief's budget in UTF-8 bytes of compact JSON (an 8 KB context slice)
LOCATORS_PER_ITEM = 3  # the largest rows of each evidence item; `profan evidence` gives all cited rows
ITEMS_PER_FINDING = 2  # evidence items shown per finding; `evidence_items` says how many there are
TITLE_CHARS = 200
VERDICT_LINES = 8  # a comparison's verdict lines kept, the rest counted (`verdict_total`)
LIST_ITEMS = 4  # warnings / notes kept (each clipped), the rest counted
IDS_LISTED = 16  # ranks / steps listed per item; `ranks_total` / `steps_total` say how many there are
BUCKETS_BARE = 3  # time_by_bucket rows the barest briefs keep
# How much of each cause the brief shows, richest first: characters per text, competing explanations, evidence
# items and locators per item, and whether the assumption is kept. A cause never shrinks to nothing.
CAUSE_LEVELS = (
    {"chars": 1000, "alternatives": 4, "items": 2, "locators": 3, "assumption": True},
    {"chars": 320, "alternatives": 2, "items": 1, "locators": 2, "assumption": True},
    {"chars": 160, "alternatives": 1, "items": 1, "locators": 1, "assumption": False},
    {"chars": 100, "alternatives": 0, "items": 1, "locators": 1, "assumption": False},
)

Size = Callable[[dict[str, Any]], int]


def dumps(doc: Any) -> str:
    """Compact JSON, the form the CLI prints and measures its budget in."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def json_bytes(doc: Any) -> int:
    return len(dumps(doc).encode())


def fit(forms: Iterable[dict[str, Any]], max_bytes: int | None, size: Size = json_bytes) -> tuple[dict[str, Any], bool]:
    """The first of ``forms`` (richest first, each holding less than the one before) within ``max_bytes``, so a
    larger cap never shows less than a smaller one; if none fits, the last — the smallest form — and False.

    A form may be the same dict shrunk in place between yields: the first that fits is returned and the rest of
    the ladder is never built."""
    doc: dict[str, Any] = {}
    for doc in forms:
        if max_bytes is None or size(doc) <= max_bytes:
            return doc, True
    return doc, False


def _below_floor(doc: dict[str, Any], what: str, max_bytes: int | None, size: Size) -> dict[str, Any]:
    """The smallest form, saying that it is over the cap and by how much (its size counted with the note)."""
    n = size(doc)
    for _ in range(3):  # the note's own digits can change the size it states
        doc["note"] = f"max_bytes {max_bytes} is below the smallest {what} ({n} bytes); this is that form"
        n, stated = size(doc), n
        if n == stated:
            break
    return doc


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence_stub(evidence: tuple[Evidence, ...], items: int = ITEMS_PER_FINDING, per_item: int = LOCATORS_PER_ITEM):
    out = []
    for ev in evidence[:items]:
        out.append({"file": ev.file, ev.kind: list(ev.locators[:per_item]), "row_count": ev.row_count})
    return out


def _ids(stub: dict[str, Any], key: str, values: tuple[int, ...] | list[Any], listed: int = IDS_LISTED) -> None:
    """``values`` under ``key``: all of them, or the first ``listed`` and their count (a job of 1,270 steps)."""
    stub[key] = list(values[:listed])
    if len(values) > listed:
        stub[f"{key}_total"] = len(values)


def finding_stub(finding: Finding, lean: bool = False) -> dict[str, Any]:
    """One finding, cut down to what an agent needs to decide whether to drill into it; ``lean``: one evidence
    item with one locator (what a tight budget keeps)."""
    stub: dict[str, Any] = {
        "id": finding.id,
        "severity": finding.severity,
        "check": finding.check,
        "rank": finding.rank,
        "step": finding.step,
        "title": _clip(finding.title, TITLE_CHARS),
    }
    _ids(stub, "ranks", finding.ranks)
    _ids(stub, "steps", finding.steps)
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
        "title": _clip(cause.title, n),
        "impact_us": None if cause.impact_us is None else round(cause.impact_us, 3),
        "impact_share": None if share is None else round(share, 4),
        "step_us": None if cause.step_us is None else round(cause.step_us, 3),
        "severity": cause.severity,
    }
    if cause.impact_us is None and cause.bound_us is not None:
        stub["bound_us"] = round(cause.bound_us, 3)  # no estimate: the most it could save, ordered by
    if lv["assumption"]:
        stub["assumption"] = _clip(cause.assumption, n)
    stub["action"] = _clip(cause.action, n)
    stub["verify"] = _clip(cause.verify, n)
    stub["alternatives"] = [_clip(alternative, n) for alternative in cause.alternatives[: lv["alternatives"]]]
    stub["explains"] = list(cause.explains)
    _ids(stub, "ranks", cause.ranks)
    _ids(stub, "steps", cause.steps)
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
            {"severity": line["severity"], "sentence": _clip(line["sentence"], 240)} for line in compare_verdict(report)
        ]
    }


def _clipped_list(items: list[str], keep: int = LIST_ITEMS) -> dict[str, Any]:
    return {"count": len(items), "first": [_clip(item, 240) for item in items[:keep]]}


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
    return doc if fits else _below_floor(doc, "brief", max_bytes, size)


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


# ---------------------------------------------------------------------------------------------- evidence


def find_item(report: Report, ident: str, where: str | Path | None) -> Cause | Finding:
    """The cause (C1), finding (F3) or member of a group (F3.2), or the one-line input error the CLI and the MCP
    server both show."""
    try:
        return report.cause(ident) if ident.startswith("C") else report.finding(ident)
    except KeyError:
        group = (report.meta.get("members_cut") or {}).get(ident.partition(".")[0])
        if group is not None and "." in ident:
            raise ProfanInputError(
                where,
                f"{ident} is one of the members this JSON report left out (it keeps {group['kept']} of "
                f"{group['members']}); run profan evidence on the data directory to read it back",
            ) from None
        ids = ", ".join(finding.id for finding in report.findings[:12]) or "none"
        more = "…" if len(report.findings) > 12 else ""
        causes = f"; causes {', '.join(cause.id for cause in report.causes)}" if report.causes else ""
        what = "cause" if ident.startswith("C") else "finding"
        raise ProfanInputError(where, f"no {what} {ident} (report has {ids}{more}{causes})") from None


def _severity(report: Report, item: Cause | Finding) -> str:
    """A finding's severity, or a cause's: its own, from what removing it saves (`profan.diagnosis.severity`)."""
    return item.severity


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
        fields.update(explained_by=item.explained_by, members=[member.id for member in item.members])
    return fields


@dataclass(frozen=True)
class ByteCap:
    """A document's byte cap and how its size is measured: compact JSON for the CLI, the bytes of the whole
    response on the wire for the MCP server."""

    max_bytes: int | None
    size: Size = json_bytes


def evidence_doc(
    report: Report,
    data_root: Path,
    finding_id: str,
    *,
    where: str | Path | None = None,
    limit: int | None = None,
    cap: ByteCap | None = None,
) -> dict[str, Any]:
    """The rows behind one cause, finding or group member: per evidence item, the raw text at each cited locator
    (verbatim, as ``sources.common.readback.read_back`` returns it) and, for CSV files, the header so the cells can be
    named.

    ``limit`` caps the rows read back per item (None: all cited rows, at most ``evidence.MAX_CITED``; 0: none, so
    a caller can read the claim's message, metrics and locators cheaply — the files are then only checked, not
    read). ``cap`` holds the document to its bytes by `_evidence_forms`.
    """
    max_bytes, size = (cap.max_bytes, cap.size) if cap is not None else (None, json_bytes)
    from profan.sources.common.readback import evidence_rows

    item = find_item(report, finding_id, where)
    base = base_dir(data_root)
    check_sizes(
        base, report.source.get("file_bytes"), {evidence.file for evidence in item.evidence}, trust.vouched(report)
    )
    items = evidence_rows(data_root, item, limit)
    for row in items:
        row["cited"] = len(row.get("lines") or row.get("events") or row.get("pointers") or [])
        if "lines" in row and row["rows"]:
            row["header"] = read_lines(base / row["file"], [1]).get(1, "").lstrip("\ufeff")
    doc = clean({"schema": EVIDENCE_SCHEMA, **_item_fields(report, item), "root": str(data_root), "evidence": items})
    full, with_rows = size(doc), [index for index, row in enumerate(items) if row.get("rows")]
    # room for the note that names what the cap leaves out (`_say_left_out`), kept at every cap alike
    room = None if max_bytes is None else max(max_bytes - LEFT_OUT_BYTES, 0)
    doc, fits = fit(_evidence_forms(doc), room, size)
    doc = _say_left_out(doc, with_rows, full, max_bytes, size)
    # under the smallest form too: what it lacks is said, beside the note that it is over the cap
    return doc if fits else _below_floor(doc, "evidence document", max_bytes, size)


def _say_left_out(doc: dict, with_rows: list[int], full: int, max_bytes: int | None, size: Size) -> dict[str, Any]:
    """``doc`` with ``left_out``, where the cap took rows or items away: which items' rows (by index) and how many
    later items went, and the call that gets them (a cap the whole document fits, or one item at a time), so an
    item never comes back empty without saying so, even in a form over its cap (it then says so too)."""
    kept = doc["evidence"]
    emptied = [with_row for with_row in with_rows if with_row >= len(kept) or not kept[with_row].get("rows")]
    if not emptied:
        return doc
    gone = doc.get("evidence_items", len(kept)) - len(kept)
    doc["left_out"] = {"rows_of_items": emptied, "items_after_first": gone, "how": f"max_bytes={full + 512}"}
    return doc


LOCATOR_KINDS = ("lines", "events", "pointers")
LEFT_OUT_BYTES = 120  # the left_out note at its longest for up to ~16 items


def _evidence_forms(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The forms of an evidence document, richest first, each holding less than the one before (``doc`` shrunk in
    place): fewer rows per item, then the later items' rows go, the locator lists are cut, then the rank, step
    and member lists, the later items go (counted in ``evidence_items``), then the first item's rows (a caller
    who asked for rows wants one quoted before the other items' locators), the texts are shortened, and last the
    nested metrics and the selects are left out. The claim's id, title, message, scalar metrics and its first
    item's file and first locator always stay."""
    yield doc
    items = doc["evidence"]
    for index in range(max((len(item["rows"]) for item in items), default=0) - 1, 0, -1):
        for item in items:
            item["rows"] = item["rows"][:index]
        yield doc
    for item in reversed(items[1:]):
        if item["rows"]:
            _no_rows(item)
            yield doc
    for index in (LOCATORS_PER_ITEM, 1):
        for item in items:
            for kind in LOCATOR_KINDS:
                if kind in item:
                    item[kind] = item[kind][:index]
        yield doc
    for key in ("ranks", "steps", "members"):
        if len(doc.get(key, ())) > IDS_LISTED:
            _ids(doc, key, doc[key])
            yield doc
    total = len(items)
    while len(items) > 1:
        items.pop()
        doc["evidence_items"] = total
        yield doc
    if items[0]["rows"]:
        _no_rows(items[0])
        yield doc
    yield from _shorter_texts(doc)
    nested = [k for k, value in doc["metrics"].items() if isinstance(value, dict | list)]
    if nested:
        doc["metrics"] = {k: value for k, value in doc["metrics"].items() if k not in nested}
        doc["metrics_omitted"] = nested
        yield doc
    for item in items:
        item["select"] = {}
    yield doc


def _no_rows(item: dict[str, Any]) -> None:
    item["rows"] = []
    item.pop("header", None)


def _shorter_texts(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A claim's texts, shortened: the competing explanations to the first, then the assumption and the way to
    verify, then the message, title and action."""
    if doc.get("alternatives"):
        doc["alternatives"] = [_clip(a, 160) for a in doc["alternatives"][:1]]
        yield doc
    for keys, n in ((("assumption", "verify"), 160), (("message", "action"), 400), (("title",), 160)):
        for key in keys:
            if key in doc:
                doc[key] = _clip(doc[key], n)
        yield doc


# ---------------------------------------------------------------------------------------------- rules


def rules_doc(
    extra: list[Path] | None = None,
    ident: str | None = None,
    *,
    max_bytes: int | None = None,
    size: Size = json_bytes,
) -> dict[str, Any]:
    """The rule pack as data (``ident`` None) or one rule/check, held to ``max_bytes`` by `_rule_forms`; an
    unknown id is a one-line input error."""
    from profan.rulepack.pack import BucketRule, load

    pack = load(extra or [])
    if ident:
        item = pack.find(ident)
        if item is None:
            raise ProfanInputError(None, f"no rule or check {ident!r}; run 'profan rules' for the list")
        entry = _rule_entry(item) if isinstance(item, BucketRule) else _check_entry(item)
        doc = clean({"schema": RULES_SCHEMA, "item": entry})
    else:
        doc = clean(
            {
                "schema": RULES_SCHEMA,
                "files": pack.files,
                "rules": [_rule_entry(rule) for rule in pack.rules],
                "checks": [_check_entry(check) for check in pack.checks.values()],
            }
        )
    doc, fits = fit(_rule_forms(doc), max_bytes, size)
    return doc if fits else _below_floor(doc, "rules document", max_bytes, size)


def _rule_entry(r: Any) -> dict[str, Any]:
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


def _check_entry(c: Any) -> dict[str, Any]:
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


RULE_DETAILS = ("params", "match", "example")  # what `rules ID` shows of one entry
RULE_TEXTS = ("why", "action", "verify", "alternatives", "applies_to", "source")


def _rule_forms(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The forms of a rules document, richest first, each holding less than the one before (``doc`` shrunk in
    place). The listing becomes an index: the entries' thresholds, patterns and examples go, then their texts,
    then what each check detects; then entries from the end, bucket rules before checks (counted in
    ``rules_total`` / ``checks_total``). One entry: its texts are shortened, then its example goes."""
    yield doc
    if "item" in doc:
        item = doc["item"]
        for n in (320, 120):
            for key in ("why", "detects", "action", "verify"):
                if key in item:
                    item[key] = _clip(item[key], n)
            if "alternatives" in item:
                item["alternatives"] = [_clip(a, n) for a in item["alternatives"]]
            yield doc
        item.pop("example", None)
        yield doc
        return
    entries = [*doc["checks"], *doc["rules"]]
    for keys in (RULE_DETAILS, RULE_TEXTS, ("detects",)):
        for entry in entries:
            for key in keys:
                entry.pop(key, None)
        yield doc
    for key, keep in (("rules", 0), ("checks", 1)):
        total = len(doc[key])
        while len(doc[key]) > keep:
            doc[key].pop()
            doc[f"{key}_total"] = total
            yield doc
