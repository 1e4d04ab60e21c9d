"""JSON renderer: the `profan.report/1` document (schema in docs/report-schema.md)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profan.report import Report


def render_json(report: Report, out: Path | None = None) -> str | None:
    # msgspec encodes a long report (thousands of breakdown rows) ~10x faster than the stdlib; same JSON
    text = msgspec.json.format(msgspec.json.encode(report.to_dict()), indent=1).decode("utf-8")
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
        return None
    return text
