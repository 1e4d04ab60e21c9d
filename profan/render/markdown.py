"""Markdown renderer: the plain-text twin of the HTML report, also what an agent reads."""

from __future__ import annotations

from pathlib import Path

import jinja2

from profan.paths import templates_dir
from profan.render.textfmt import FILTERS
from profan.report import Report

TABLE_ROWS = 25  # rows per detail table in Markdown; the JSON report has them all


def environment(autoescape: bool = False) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    env.filters["mdcell"] = lambda s: "" if s is None else str(s).replace("|", "\\|").replace("\n", " ")
    return env


def render_markdown(report: Report, out: Path | None = None) -> str | None:
    doc = report.to_dict()
    text = environment().get_template("report.md.j2").render(r=doc, limit=TABLE_ROWS)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text
