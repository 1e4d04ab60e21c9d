"""Renderers turn one Report into text or a file. They format; they never compute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profan.model.report import Report

FORMATS = ("md", "json", "html", "xlsx")


def render(report: Report, fmt: str, out: Path | None = None) -> str | None:
    """Render to `out` (required for binary formats) or return the text."""
    renderer = _renderer(fmt)
    return renderer(report, out)


def _renderer(fmt: str) -> Callable[[Report, Path | None], str | None]:
    if fmt == "json":
        from profan.render.json_report import render_json

        return render_json
    if fmt == "md":
        from profan.render.markdown import render_markdown

        return render_markdown
    if fmt == "html":
        from profan.render.html import render_html

        return render_html
    if fmt == "xlsx":
        from profan.render.xlsx import render_xlsx

        return render_xlsx
    raise ValueError(f"unknown format {fmt!r} (use one of {', '.join(FORMATS)})")
