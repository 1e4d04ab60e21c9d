"""JSON renderer: the `profan.report/1` document (schema in docs/report-schema.md)."""

from __future__ import annotations

import json
from pathlib import Path

from profan.report import Report


def render_json(report: Report, out: Path | None = None) -> str | None:
    text = json.dumps(report.to_dict(), indent=1, ensure_ascii=False)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
        return None
    return text
