"""Drill-down: from a cause, a finding or a member of a group back to the raw rows in the original files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from profan.model.errors import TOO_DEEP, ProfanInputError
from profan.model.files import open_regular
from profan.model.report import Report, from_dict
from profan.rulepack import limits
from profan.rulepack.pack import require_known_checks
from profan.trust import inside, report_root

REPORT_HEAD = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"profan\.(report|compare)/')
# the line a Markdown or HTML report carries to name the data it was written from (`profan.model.textfmt`)
SOURCE_MARK = re.compile(r"<!-- profan-source: (.{1,4096}?) -->")
HEAD_BYTES = 4096
MARK_BYTES = 8 * 1024 * 1024  # a text report larger than this is read only this far for its source line


def kind_of(path: Path) -> str:
    """What a path holds, by its content, not its name: "report" (a profan JSON report), "text-report" (a
    Markdown or HTML report naming its data), else "data" (a folder, a trace — .json, .json.gz — or a CSV)."""
    try:
        if not path.is_file():
            return "data"
        with open_regular(path) as handle:
            head = handle.read(HEAD_BYTES)
            if head.startswith(b"\x1f\x8b"):
                return "data"  # gzip: a trace
            if REPORT_HEAD.match(head):
                return "report"
            if head.lstrip()[:1] in (b"{", b"["):
                return "data"
            text = (head + handle.read(MARK_BYTES)).decode("utf-8", "replace")
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    return "text-report" if SOURCE_MARK.search(text) else "data"


def text_report_data(path: Path) -> Path:
    """The data a Markdown or HTML report was written from (its source line), where it still lies inside the
    report's folder — the same rule as a JSON report's (`trust.report_root`): a report handed over cannot send
    the drill-down elsewhere. Else one line saying to name the data."""
    with open_regular(path, "report") as handle:
        found = SOURCE_MARK.search(handle.read(HEAD_BYTES + MARK_BYTES).decode("utf-8", "replace"))
    home = path.resolve().parent
    named = json.loads(found.group(1)) if found else {}
    for c in (named.get("root_abs"), named.get("root")) if isinstance(named, dict) else ():
        if isinstance(c, str) and c:
            for p in (Path(c), home / c):
                if p.exists() and inside(p, home):
                    return p
    raise ProfanInputError(
        path, "the data this report was written from is not in its folder any more; run profan evidence DATA ID"
    )


def load_report_or_analyze(path: Path, root: Path | None = None) -> tuple[Report, Path]:
    """A profan JSON report is loaded; a Markdown or HTML report's data, a directory or a trace file is analysed
    afresh — told apart by content (`kind_of`), so a one-file trace named trace.json is data. Returns (report,
    data root); the root of a loaded report is decided by `trust.report_root` (never by the report's text
    alone)."""
    kind = kind_of(path)
    if kind == "text-report":
        path = root or text_report_data(path)
    if kind == "report":
        try:
            with open_regular(path, "report") as handle:
                limits.check_size(path, os.fstat(handle.fileno()).st_size, "max_report_bytes", "a report")
                doc = json.loads(handle.read().decode("utf-8"))
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON {type(doc).__name__}, not an object")
            report = from_dict(doc)
            require_known_checks([*report.findings, *report.causes])
        except RecursionError:
            raise ProfanInputError(path, f"not a profan JSON report: it {TOO_DEEP}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProfanInputError(path, f"not a profan JSON report ({str(exc)[:200]})") from None
        return report, report_root(report, path, root)
    from profan.pipeline import analyze

    try:
        report = analyze(path)
    except ProfanInputError as exc:
        if not (path.is_file() and path.name.endswith(".json")):
            raise
        # a .json that is neither: say both, since the user may have meant either
        raise ProfanInputError(path, f"not a profan JSON report, nor a trace profan reads ({exc.problem})") from None
    return report, report_root(report, None, root)
