"""Markdown renderer: the plain-text twin of the HTML report, also what an agent reads."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import jinja2
import markupsafe

from profan.paths import templates_dir
from profan.render.textfmt import FILTERS
from profan.report import Report

TABLE_ROWS = 25  # rows per detail table in Markdown; the JSON report has them all
# tables with a section of their own, listed in full; every other table shows TABLE_ROWS rows
FULL_TABLES = ("breakdown", "steps", "top_kernels", "breakdown_all_steps")


def md_text(value: object) -> object:
    """Every value a template prints, unless a filter marked it safe: ``<``, ``>`` and ``&`` as entities.

    Why: kernel names, shapes and paths come from the traces, and Markdown viewers render inline HTML — a kernel
    named ``<img src=x onerror=…>`` must not run. The entities read back as the same characters
    (``void kernel<float>`` stays legible instead of vanishing as an unknown tag)."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return value


def md_cell(value: object) -> str:
    """Text for a table cell: a ``|`` would end the cell and a line break the row."""
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def md_code(value: object) -> markupsafe.Markup:
    """A code span around untrusted text. Inside one nothing is interpreted, so nothing is escaped — but a
    backtick in the text would close the span early and let what follows be read as HTML, so the fence is made
    longer than any run of backticks in the text (CommonMark)."""
    text = "" if value is None else str(value).replace("\n", " ")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return markupsafe.Markup(f"{fence}{pad}{text}{pad}{fence}")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=False,
                             finalize=md_text, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    env.filters["mdcell"] = md_cell
    env.filters["mdcode"] = md_code
    return env


def render_markdown(report: Report, out: Path | None = None) -> str | None:
    """The report as Markdown. Detail tables show their first TABLE_ROWS rows and say how many more there are,
    so only those rows become Python values: a 64-rank job's link tables hold tens of thousands."""
    sizes = {name: df.height for name, df in report.tables.items()}
    shown = replace(report, tables={name: df if name in FULL_TABLES else df.head(TABLE_ROWS)
                                    for name, df in report.tables.items()})
    text = environment().get_template("report.md.j2").render(r=shown.to_dict(), sizes=sizes, limit=TABLE_ROWS,
                                                              full=FULL_TABLES)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text
