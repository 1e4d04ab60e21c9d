"""Markdown for a ``profan compare`` report (two sides, deltas); the JSON form is the generic report document."""

from __future__ import annotations

from pathlib import Path

from profan.model.report import Report
from profan.render.markdown import environment


def render_compare_markdown(report: Report, out: Path | None = None) -> str | None:
    text = environment().get_template("compare.md.j2").render(r=report.to_dict())
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text
