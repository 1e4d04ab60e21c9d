"""Markdown renderer: the plain-text twin of the HTML report, also what an agent reads.

A job of more than `FULL_RANKS` ranks is rendered for its verdict and findings, so the document stays a few tens of
KB at 64 and at 1,000 ranks: what was read is summarised per file kind (with the ranks the verdict names and the
ranks with skipped rows in full), the per-rank tables show the rows of the ranks the diagnosis names plus a summary
per class of every row (`json_report.cut_tables`), a finding lists the sources and members of those ranks first,
and long rank lists in notes read as runs. One note says what was cut and where every row is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jinja2
import markupsafe
import polars as pl

from profan.diagnosis.step import step_summary
from profan.model.report import Report, clean
from profan.model.rl_ledger import ledger_summary
from profan.model.textfmt import (
    FILTERS,
    column_kind,
    column_label,
    drill_target,
    fmt_cell,
    fmt_ranks,
    selected,
    source_mark,
    visible,
)
from profan.render.json_report import CLASSES, cut_tables, named_ranks
from profan.render.table_text import text_table
from profan.render.verdict import cause_view, drill_ids, findings_by_cause, share_of, verdict
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
RANKS_AT_SCALE = 4  # named ranks whose rows of the tables listed in full are shown at scale
SOURCES_AT_SCALE = 4  # evidence lines of a finding at scale (those of the named ranks first)
CLASSES_AT_SCALE = 6  # rows of a class summary at scale (the classes whose extremes are named ranks, then others)
NONE_NAMED = "no cause or headline finding names a few ranks"
RANK_LIST = re.compile(r"\b\d+(?:, \d+){7,}\b")  # eight or more numbers in a row: a list of ranks in a note


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
    more there are, so only those rows become Python values: a 64-rank job's link tables hold tens of thousands.
    A job of more than FULL_RANKS ranks is cut further (`scale_context`)."""
    at_scale = len(report.source.get("ranks") or ()) > FULL_RANKS
    context = scale_context(report) if at_scale else small_context(report)
    shown, extra = trim_findings(context.pop("report")) if at_scale else (context.pop("report"), {})
    doc = shown.to_dict()
    if "rl_ledger" in doc:  # summed over every row, not the rows the Markdown shows
        doc["rl_ledger"] = clean(ledger_summary(report.tables))
    as_dict = {f["id"]: {**f, **extra.get(f["id"], {})} for f in doc["findings"]}
    grouped, unexplained = findings_by_cause(report)
    per = share_of(step_summary(report.tables, report.causes))
    text = (
        environment()
        .get_template("report.md.j2")
        .render(
            r=doc,
            v=verdict(report),
            groups=[(cause_view(c, per), [as_dict[f.id] for f in fs]) for c, fs in grouped],
            unexplained=[as_dict[f.id] for f in unexplained],
            sizes={name: value.height for name, value in report.tables.items()},
            texts={
                name: text_table(value, context["limit"], origin_of=report.tables[name])
                for name, value in shown.tables.items()
                if name not in FULL_TABLES and not value.is_empty()
            },
            full=FULL_TABLES,
            drill=markupsafe.Markup(drill_target(report.source)),  # shell-quoted, no backtick: a code span holds it
            drill_ids=drill_ids(report),
            mark=markupsafe.Markup(source_mark(report.source)),
            **context,
        )
    )
    text = re.sub(r"\n{3,}", "\n\n", text)  # the templates' blocks meet with blank lines of their own
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text


def small_context(report: Report) -> dict:
    """A job of a few ranks: every rank read, the tables with a section of their own in full, the first TABLE_ROWS
    rows of the others, the first MEMBER_ROWS members of a group."""
    tables = {name: value if name in FULL_TABLES else value.head(TABLE_ROWS) for name, value in report.tables.items()}
    return {
        "report": replace(report, tables=tables),
        "limit": TABLE_ROWS,
        "member_rows": MEMBER_ROWS,
        "read": None,
        "cuts": {},
        "summaries": {},
    }


def scale_context(report: Report) -> dict:
    """A job of many ranks: the tables cut (`scale_tables`), what was read summarised (`read_summary`), rank lists
    in notes as runs, and one note saying what was cut and where every row is."""
    ranks = report.source.get("ranks") or []
    keep = listed_ranks(report)
    tables, cuts, summaries = scale_tables(report, keep)
    notes = [RANK_LIST.sub(_as_runs, note) for note in report.notes] + [scale_note(len(ranks), keep)]
    warnings = [RANK_LIST.sub(_as_runs, warning) for warning in report.warnings]
    return {
        "report": replace(report, tables=tables, notes=notes, warnings=warnings),
        "limit": ROWS_AT_SCALE,
        "member_rows": ROWS_AT_SCALE,
        "read": read_summary(report, set(keep)),
        "cuts": cuts,
        "summaries": summaries,
    }


def scale_tables(report: Report, keep: list[int]) -> tuple[dict[str, pl.DataFrame], dict[str, dict], dict[str, dict]]:
    """The tables with a section of their own cut to the ranks in ``keep`` (the named ranks and the first rank);
    every other per-rank table of more than ROWS_AT_SCALE rows to its first rows among those `json_report.cut_tables`
    keeps (the named ranks, the links findings name; the first rows of all when no rank is named), with a summary
    per class of every row. Returns the tables, what was cut of each, and the summaries."""
    named = named_ranks(report)
    cut = cut_tables(report, limit=0)
    tables: dict[str, pl.DataFrame] = {}
    cuts: dict[str, dict] = {}
    for name, value in report.tables.items():
        if name in FULL_TABLES and "rank" in value.columns:
            tables[name] = value.filter(pl.col("rank").is_in(keep))
            continue
        if name not in cut.meta.get("tables_cut", {}) or value.height <= ROWS_AT_SCALE:
            tables[name] = value.head(ROWS_AT_SCALE)
            continue
        rows = cut.tables[name]
        if rows.is_empty():  # no rank named, or none of its rows is of one: its first rows, for the columns
            tables[name] = value.head(ROWS_AT_SCALE)
            why = f"rank{'s' if len(named) > 1 else ''} {fmt_ranks(named)}: no rows" if named else NONE_NAMED
            cuts[name] = {"kept": 0, "ranks": "", "links": False, "why": why}
            continue
        tables[name] = rows.head(ROWS_AT_SCALE)
        links = rows.filter(~pl.col("rank").is_in(named)).height > 0  # rows of the links findings name
        cuts[name] = {"kept": rows.height, "ranks": fmt_ranks(named), "links": links, "why": ""}
    summaries = {
        name: class_rows(cut.tables[f"{name}_by_class"], CLASSES[name], set(named))
        for name in cuts
        if f"{name}_by_class" in cut.tables
    }
    return tables, cuts, summaries


def listed_ranks(report: Report) -> list[int]:
    """The ranks whose step, breakdown and top-kernel rows are listed at scale: the first rank, for comparison,
    and the ranks the diagnosis names (`json_report.named_ranks`) in the order of the verdict, RANKS_AT_SCALE of
    them — several causes each naming a few ranks would otherwise list forty rows of top kernels per rank."""
    named = set(named_ranks(report))
    ordered: list[int] = []
    for item in report.headline:
        ordered += [r for r in item.ranks or () if r in named and r not in ordered]
    return sorted({min(r["rank"] for r in report.source["ranks"]), *ordered[:RANKS_AT_SCALE]})


def scale_note(n_ranks: int, keep: list[int]) -> str:
    """The one note that says what this Markdown leaves out and where every row is."""
    return (
        f"{n_ranks} ranks: this Markdown lists the step, breakdown and top-kernel rows of rank"
        f"{'s' if len(keep) > 1 else ''} {fmt_ranks(keep)} only (the first rank, for comparison, and up to "
        f"{RANKS_AT_SCALE} ranks the verdict names), the other per-rank tables' rows of the named ranks with a "
        "summary per class of every row, what was read per file kind, and a finding's first sources and members. "
        "The JSON report and the xlsx workbook keep more (meta.tables_cut and the sheet Tables cut say what they "
        "cut); profan analyze DIR --tables OUT_DIR writes every table in full as Parquet."
    )


def _as_runs(match: re.Match) -> str:
    """A list of ascending numbers as runs (0–255, 300); any other list as it was."""
    values = [int(v) for v in match[0].split(", ")]
    return fmt_ranks(values) if values == sorted(set(values)) else match[0]


def class_rows(summary: pl.DataFrame, classes: tuple[list[str], list[str]], named: set[int]) -> dict:
    """A `json_report.by_class` summary as Markdown rows: the class's columns, its rows and ranks, and per value
    one cell 'min (rank) · median · max (rank)'. The classes whose extremes are named ranks are picked first,
    then the first of the others, CLASSES_AT_SCALE in all, shown in the summary's order."""
    keys = [k for k in classes[0] if k in summary.columns]
    values = [value for value in classes[1] if f"{value}_min" in summary.columns]
    rank_cols = [f"{value}_{end}_rank" for value in values for end in ("min", "max")]
    records = summary.to_dicts()
    first = [index for index, rec in enumerate(records) if named.intersection(rec[rank_col] for rank_col in rank_cols)]
    picked = _first(first, len(records), CLASSES_AT_SCALE)
    rows = []
    for rec in (records[index] for index in picked):
        row = {k: rec[k] for k in keys} | {"rows": rec["rows"], "ranks": rec["ranks"]}
        for value in values:
            kind = column_kind(value, str(summary.schema[f"{value}_min"]))
            low, mid, high = (fmt_cell(rec[f"{value}_{s}"], kind) for s in ("min", "median", "max"))
            row[column_label(value, kind, ms_for_us=True)] = (
                f"{low} (rank {rec[f'{value}_min_rank']}) · {mid} · {high} (rank {rec[f'{value}_max_rank']})"
            )
        rows.append(row)
    return {"rows": rows, "total": summary.height}


def read_summary(report: Report, keep: set[int]) -> dict:
    """What was read, for many ranks: per file kind the ranks, rows read (all, and the least and most of a rank)
    and rows skipped; the ranks grouped by where their rank id came from and by profiler; in full only the ranks
    in ``keep`` and those with skipped rows (ROWS_AT_SCALE of them)."""
    ranks = report.source.get("ranks") or []
    per_file: dict[str, list] = {}
    for rank in ranks:
        for kind, value in (rank.get("rows_read") or {}).items():
            per_file.setdefault(kind, []).append((rank["rank"], value, (rank.get("rows_skipped") or {}).get(kind, 0)))
    files = [
        {
            "file": kind,
            "ranks": len(got),
            "rows": sum(value for _r, value, _s in got),
            "least": min(value for _r, value, _s in got),
            "most": max(value for _r, value, _s in got),
            "skipped": sum(s for _r, _n, s in got),
        }
        for kind, got in per_file.items()
    ]
    skipped = [rank["rank"] for rank in ranks if sum((rank.get("rows_skipped") or {}).values())]
    shown = [rank for rank in ranks if rank["rank"] in keep or rank["rank"] in skipped[:ROWS_AT_SCALE]]
    return {
        "files": files,
        "origins": _groups(ranks, lambda rank: re.sub(r"\d+", "N", str(rank.get("rank_origin") or "unknown"))),
        "profilers": _groups(ranks, _profiler),
        "skipped": fmt_ranks(skipped),
        "shown": shown,
    }


def _profiler(rank: dict) -> str:
    """The profiler a rank was captured with (its info without the rank id): ranks captured alike group."""
    info = {
        key: value for key, value in (rank.get("info") or {}).items() if value not in (None, "") and key != "rank_id"
    }
    return ", ".join(f"{key} {value}" for key, value in info.items()) or "not recorded"


def _groups(ranks: list[dict], key: Callable[[dict], str]) -> list[tuple[str, str, int]]:
    """Ranks grouped by ``key``: (the key, its ranks as runs, how many), the largest group first."""
    by: dict[str, list[int]] = {}
    for rank in ranks:
        by.setdefault(key(rank), []).append(rank["rank"])
    return sorted(((k, fmt_ranks(value), len(value)) for k, value in by.items()), key=lambda g: -g[2])


def trim_findings(report: Report) -> tuple[Report, dict[str, dict]]:
    """At scale, each finding's evidence and members cut to a few, those of the named ranks first (the others in
    the report's order), before the report becomes a document: a 1,000-rank job's groups hold thousands of members,
    each with its own evidence. Returns the trimmed report and, per finding, how many sources were left out and
    how many members it has (``profan evidence`` and the workbook have them all)."""
    named = set(named_ranks(report))
    folders = {rank["path"]: rank["rank"] for rank in report.source.get("ranks") or []}
    findings, extra = [], {}
    for finding in report.findings:
        on_named = [index for index, e in enumerate(finding.evidence) if _rank_of(e.file, folders) in named]
        evidence = tuple(finding.evidence[index] for index in _first(on_named, len(finding.evidence), SOURCES_AT_SCALE))
        on_named = [index for index, member in enumerate(finding.members) if member.rank in named]
        members = tuple(finding.members[index] for index in _first(on_named, len(finding.members), ROWS_AT_SCALE))
        extra[finding.id] = {
            "evidence_more": len(finding.evidence) - len(evidence),
            "members_total": len(finding.members),
        }
        findings.append(replace(finding, evidence=evidence, members=members))
    return replace(report, findings=findings), extra


def _first(preferred: list[int], n: int, limit: int) -> list[int]:
    """Up to ``limit`` of the indexes 0..n-1, in order: the ``preferred`` ones first, then the lowest."""
    picked = set(preferred[:limit])
    for index in range(n):
        if len(picked) >= limit:
            break
        picked.add(index)
    return sorted(picked)


def _rank_of(file: str, folders: dict[str, int]) -> int | None:
    """The rank whose folder holds ``file`` (a path relative to the analysed root)."""
    parts = file.split("/")
    for index in range(len(parts) - 1, 0, -1):
        got = folders.get("/".join(parts[:index]))
        if got is not None:
            return got
    return None
