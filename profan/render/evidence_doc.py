"""The evidence document: the raw source rows behind one cause, finding or group member, read back from the files
(or, ``limit=0``, only its message, metrics and locators).

Shared by the CLI (``profan evidence``, ``evidence --format json``) and the MCP server, so both quote the same rows
in the same shape; held to a byte cap by the ladder of forms of `profan.render.byte_cap`, and where the cap takes
rows away, the document says which (``left_out``) and the call that gets them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from profan import trust
from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.findings import Finding
from profan.model.report import Report, clean
from profan.render.byte_cap import (
    IDS_LISTED,
    LOCATORS_PER_ITEM,
    ByteCap,
    Size,
    below_floor,
    clip,
    fit,
    json_bytes,
    list_ids,
)
from profan.sources.common.readback import check_sizes, read_lines
from profan.sources.discovery.discover import base_dir

EVIDENCE_SCHEMA = "profan.evidence/1"


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
    return doc if fits else below_floor(doc, "evidence document", max_bytes, size)


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
            list_ids(doc, key, doc[key])
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
        doc["alternatives"] = [clip(a, 160) for a in doc["alternatives"][:1]]
        yield doc
    for keys, n in ((("assumption", "verify"), 160), (("message", "action"), 400), (("title",), 160)):
        for key in keys:
            if key in doc:
                doc[key] = clip(doc[key], n)
        yield doc
