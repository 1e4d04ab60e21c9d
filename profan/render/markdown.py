"""Markdown renderer: the plain-text twin of the HTML report, also what an agent reads."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import jinja2
import markupsafe
import polars as pl

from profan.analyses.common import fmt_ranks
from profan.model.report import Report
from profan.render.json_report import named_ranks
from profan.render.textfmt import FILTERS, selected, visible
from profan.render.verdict import cause_view, findings_by_cause, verdict
from profan.rulepack.paths import templates_dir

TABLE_ROWS = 25  # rows per detail table in Markdown; the JSON report has them all
MEMBER_ROWS = 50  # rows of a group finding's member table; the JSON report has every member
# tables with a section of their own, listed in full; every other table shows TABLE_ROWS rows
FULL_TABLES = ("breakdown", "steps", "top_kernels", "breakdown_all_steps")
# A job of more ranks than this is read for its verdict and findings: the tables listed in full show the ranks the
# diagnosis names (and the first rank, for comparison), member and detail tables their first ROWS_AT_SCALE rows; a
# note says where every row is. Listed in full, a 64-rank job's top kernels alone were 280 KB of Markdown.
FULL_RANKS = 8
ROWS_AT_SCALE = 10


_MD_PUNCT = re.compile(r"[\\`\[\]|]")  # one pass, backslashes included: one in the text cannot undo ours
_SCHEME = re.compile(r":(?=//)")  # http://…: a GFM viewer links a bare URL
_WWW = re.compile(r"\bwww\.")  # www.…: likewise


def md_escape(text: str) -> str:
    """Untrusted text (kernel names, shapes, paths, messages quoting them) as Markdown that reads as itself and
    forms nothing: no link, image, autolink, HTML element or code span, and no table cell boundary.

    Why: Markdown viewers render links, images and inline HTML — a kernel named ``![x](http://host/p.png)`` would
    make the viewer fetch that image, ``<img src=x onerror=…>`` would run. ``<``, ``>`` and ``&`` become entities
    (``void kernel<float>`` stays legible instead of vanishing as an unknown tag); ``[``, ``]``, backticks, ``|``
    and backslashes are backslash-escaped (no link text or image can open, no ``|`` ends a cell); the ``:`` of
    ``scheme://`` and the ``.`` of ``www.`` are escaped so GFM's bare-URL autolinks do not form. A line break would
    let the text start a block of its own (a heading, a link definition), so it reads as a space; control
    characters are visible escapes (``textfmt.visible``). Rendered, every escape shows the original character."""
    text = visible(text).replace("\n", " ")
    text = _MD_PUNCT.sub(r"\\\g<0>", text)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _WWW.sub(r"www\\.", _SCHEME.sub(r"\\:", text))


def md_text(value: object) -> object:
    """Every value a template prints, unless a filter marked it safe (`md_code`, `md_selected`): `md_escape`d.
    The templates hold the trusted Markdown; whatever a value holds is text."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return md_escape(value)
    return value


def md_cell(value: object) -> str:
    """Text for a table cell (``|`` and line breaks are taken care of by `md_text`, as everywhere): None is
    empty."""
    return "" if value is None else str(value)


def md_code(value: object, cell: bool = False) -> markupsafe.Markup:
    """A code span around untrusted text. Inside one nothing is interpreted, so nothing is escaped — but a
    backtick in the text would close the span early and let what follows be read as HTML, so the fence is made
    longer than any run of backticks in the text (CommonMark). ``cell``: the span is in a table cell, where GFM
    ends the cell at a ``|`` even inside a span unless it is written ``\\|`` (the backslash is not shown)."""
    text = "" if value is None else visible(str(value)).replace("\n", " ")
    if cell:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return markupsafe.Markup(f"{fence}{pad}{text}{pad}{fence}")


def md_selected(select: dict) -> markupsafe.Markup:
    """`textfmt.selected` with its values escaped and its own brackets kept as written (escaped brackets would
    read as noise in every evidence line of the raw Markdown an agent reads)."""
    text = selected(select)
    return markupsafe.Markup(f" [{md_escape(text[2:-1])}]" if text else "")


def md_anchor(ident: object) -> markupsafe.Markup:
    """An anchor a link in the document can jump to (``[F3](#F3)``). Ids come from the report, which may have
    been read from a file: only letters, digits, dots and dashes are kept, so an id cannot leave the attribute."""
    return markupsafe.Markup(f'<a id="{md_target(ident)}"></a>')


def md_target(ident: object) -> markupsafe.Markup:
    """The fragment of a link to `md_anchor` (the same characters kept)."""
    return markupsafe.Markup(re.sub(r"[^A-Za-z0-9.\-]", "", str(ident)))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=False,
        finalize=md_text,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    env.filters["mdcell"] = md_cell
    env.filters["mdcode"] = md_code
    env.filters["selected"] = md_selected
    env.filters["anchor"] = md_anchor
    env.filters["target"] = md_target
    env.filters["runs"] = fmt_ranks
    return env


def render_markdown(report: Report, out: Path | None = None) -> str | None:
    """The report as Markdown, the verdict first. Detail tables show their first TABLE_ROWS rows and say how many
    more there are, so only those rows become Python values: a 64-rank job's link tables hold tens of thousands."""
    sizes = {name: df.height for name, df in report.tables.items()}
    at_scale = len(report.source.get("ranks") or ()) > FULL_RANKS
    limit = ROWS_AT_SCALE if at_scale else TABLE_ROWS
    shown = replace(
        report, tables={name: df if name in FULL_TABLES else df.head(limit) for name, df in report.tables.items()}
    )
    if at_scale:
        shown = _named_ranks_only(shown)
    doc = shown.to_dict()
    as_dict = {f["id"]: f for f in doc["findings"]}
    grouped, unexplained = findings_by_cause(report)
    text = (
        environment()
        .get_template("report.md.j2")
        .render(
            r=doc,
            v=verdict(report),
            groups=[(cause_view(c), [as_dict[f.id] for f in fs]) for c, fs in grouped],
            unexplained=[as_dict[f.id] for f in unexplained],
            sizes=sizes,
            limit=limit,
            member_rows=ROWS_AT_SCALE if at_scale else MEMBER_ROWS,
            full=FULL_TABLES,
        )
    )
    text = re.sub(r"\n{3,}", "\n\n", text)  # the templates' blocks meet with blank lines of their own
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text


def _named_ranks_only(report: Report) -> Report:
    """The tables listed in full cut to the ranks the diagnosis names and the first rank, with a note saying so
    and where every row is (the JSON report's tables up to their size limit, the workbook, ``--tables DIR``)."""
    ranks = report.source.get("ranks") or []
    keep = sorted({*named_ranks(report), min(r["rank"] for r in ranks)})
    tables = dict(report.tables)
    for name in FULL_TABLES:
        if name in tables and "rank" in tables[name].columns:
            tables[name] = tables[name].filter(pl.col("rank").is_in(keep))
    note = (
        f"{len(ranks)} ranks: this Markdown lists the step, breakdown and top-kernel rows of rank"
        f"{'s' if len(keep) > 1 else ''} {fmt_ranks(keep)} only (the ranks the verdict names, and the first for "
        "comparison), the first rows of the other tables and the first members of each group finding. The JSON "
        "report has every member, and every table row up to its size limit (meta.tables_cut); the xlsx workbook "
        "and profan analyze DIR --tables OUT_DIR (Parquet) have every row."
    )
    return replace(report, tables=tables, notes=[*report.notes, note])
