"""Drill-down: from a finding back to the raw rows in the original files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profan.errors import ProfanInputError
from profan.evidence import read_back
from profan.findings import Finding
from profan.report import Report, from_dict


def load_report_or_analyze(path: Path, root: Path | None = None) -> tuple[Report, Path]:
    """A report.json is loaded; a directory is analysed afresh. Returns (report, data root)."""
    if path.is_file() and path.suffix == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            report = from_dict(doc)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProfanInputError(path, f"not a profan JSON report ({exc})") from None
        return report, root or _data_root(report, path)
    from profan.pipeline import analyze

    report = analyze(path)
    return report, root or Path(report.source["root_abs"])


def _data_root(report: Report, report_path: Path) -> Path:
    """Where the cited files are: the absolute root recorded at analysis, else relative to the report."""
    candidates = [report.source.get("root_abs"), report.source.get("root")]
    for c in candidates:
        if c and Path(c).exists():
            return Path(c)
    rel = report.source.get("root")
    if rel and (report_path.parent / rel).exists():
        return report_path.parent / rel
    raise ProfanInputError(report_path, f"the analysed data ({report.source.get('root_abs') or rel}) is not "
                                        "here any more; pass --root DIR")


def evidence_rows(root: Path, finding: Finding) -> list[dict[str, Any]]:
    base = root if root.is_dir() else root.parent
    out = []
    for ev in finding.evidence:
        rows = [{"locator": loc, "text": text} for loc, text in read_back(base, ev)]
        out.append({"file": ev.file, "row_count": ev.row_count, "select": ev.select, "rows": rows,
                    ev.kind: list(ev.locators)})
    return out
