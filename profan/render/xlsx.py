"""Excel renderer (openpyxl): the Report as a workbook people filter, sort and forward.

Sheets: Summary (the verdict first: the step, the causes by estimated gain with what to change, and the headline
findings no cause explains), Causes, Findings, Members (one row per member of a group finding), Breakdown (rank ×
step × bucket), Top kernels, Communication, one sheet per other report table, and Evidence — one row per cited
source row, read back from the files. Each cause's and finding's id links to its first evidence row.

A cluster's per-rank tables grow with ranks × ops × links, and a workbook costs time per cell however it is
written (openpyxl serialises each cell). Tables over `ROW_LIMIT` rows are therefore cut as the JSON report cuts its
own (`json_report.cut_tables`): the rows of the ranks the diagnosis names and the links findings name, plus a
``<table>_by_class`` sheet summarising every row. The limit is lower than the JSON's because a cell costs far more
to write than a JSON value, so a 64-rank cluster's link and kernel tables are cut here and not yet in the JSON.
The sheet "Tables cut" says what was cut, and the Summary says where the full tables are (``profan analyze DIR
--tables OUT_DIR`` writes them as Parquet).

Every string cell is written as text: a kernel name such as ``=HYPERLINK(...)`` or ``-1+2`` coming from a trace
must never become a formula, so cells starting with ``= + - @``, tab or CR are stored as strings with Excel's
quote prefix (the cell shows the text, and editing it keeps it text). Control characters are written as visible
escapes (``\\r``, ``\\x1b``), as in the other reports. Values stay in their source units; the
number formats show the unit (µs, ms, %).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import polars as pl
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import Cell
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.hyperlink import Hyperlink

from profan.diagnosis.step import step_summary
from profan.model.causes import Cause
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import Report
from profan.model.rl_ledger import ledger_grid
from profan.model.textfmt import column_kind, column_label, fmt_ranks, locators, visible
from profan.render.evidence_rows import NAME_COLUMNS, TYPE_COLUMNS, EvidenceTable, key_values, pick, read_evidence
from profan.render.html import data_root
from profan.render.json_report import MEMBER_LIMIT, cut_members, cut_tables, named_ranks
from profan.render.verdict import also_worth_a_look, compare_verdict, gain_text, opening, share_of, span_text

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MAX_CELL = 32767  # Excel's limit on characters in a cell
WIDTH_ROWS = 400  # rows a column's width is measured on
ROW_LIMIT = 2000  # a per-rank table over this many rows is cut in the workbook (`json_report.cut_tables`)
CUT_SHEET = "Tables cut"
NO_ROWS = "(no rows in this report)"
NONE_KEPT = (
    f"(cut: none of this table's rows is of a rank the verdict names; see the sheet {CUT_SHEET} for its summary "
    "per class, and profan analyze DIR --tables OUT_DIR for every row)"
)

NUMBER_FORMATS = {
    "us": '#,##0.0" µs"',
    "ms": '#,##0.000" ms"',
    "pct": "0.0%",
    "ratio": '0.00"×"',
    "mb": '#,##0.00" MB"',
    "int": "#,##0",
    "id": "0",
    "float": "#,##0.000",
    "timestamp": "0.0",
    "gain_ms": '#,##0.0" ms"',  # a cause's gain, one decimal as the texts write it (`textfmt.ms`)
}
HEADER_FONT = Font(bold=True, color="FFFFFF")
HEADER_FILL = PatternFill("solid", fgColor="1F2A3A")
SEVERITY_FILL = {
    "critical": PatternFill("solid", fgColor="FDECEA"),
    "warning": PatternFill("solid", fgColor="FFF4E0"),
    "info": PatternFill("solid", fgColor="EAF1FB"),
    "cause": PatternFill("solid", fgColor="F3E8FD"),
}
LINK_FONT = Font(color="2B5EA7", underline="single", bold=True)
RL_SHEET = "RL step ledger"
NAMED_SHEETS = {"breakdown": "Breakdown", "top_kernels": "Top kernels", "communication": "Communication"}


def render_xlsx(report: Report, out: Path | None = None) -> str | None:
    if out is None:
        raise ValueError("the xlsx format needs an output file (-o report.xlsx)")
    # saved in memory first: a write-only workbook whose save fails half way leaves its sheets' row writers open,
    # and they complain on stderr when collected; a target that cannot be written then fails on plain bytes
    buf = io.BytesIO()
    build_workbook(report).save(buf)
    Path(out).write_bytes(buf.getvalue())
    return None


def build_workbook(report: Report) -> Workbook:
    """The workbook in openpyxl's write-only mode: each sheet is a `Sheet` (cells filled in any order, rows
    streamed out at the end), so a cluster's tables never become a held-whole worksheet of cell objects
    (bench/README.md has the time and memory it saves). Tables over `ROW_LIMIT` rows are cut first."""
    owners: list[Cause | Finding] = [*report.causes, *report.findings]
    evidence = read_evidence(data_root(report), owners)
    tables = cut_tables(report, limit=ROW_LIMIT)
    cut: dict[str, dict] = tables.meta.get("tables_cut") or {}
    workbook = Workbook(write_only=True)
    summary, causes_ws, findings_ws = Sheet(workbook, "Summary"), Sheet(workbook, "Causes"), Sheet(workbook, "Findings")
    sheets = [summary, causes_ws, findings_ws, Sheet(workbook, "Members")]
    members_cut = members_sheet(sheets[-1], report)
    titles: dict[str, str] = dict.fromkeys(members_cut, "Members")  # table (or group's members) -> its sheet
    if (grid := ledger_grid(report.tables)) is not None:  # an RL job's ledger, phases in columns, before its tables
        sheets.append(Sheet(workbook, RL_SHEET))
        table_sheet(sheets[-1], grid)
    for name, title in NAMED_SHEETS.items():  # the sheets the issue promises exist even when empty
        sheets.append(Sheet(workbook, title))
        titles[name] = title
        table_sheet(sheets[-1], tables.tables.get(name, pl.DataFrame()), NONE_KEPT if name in cut else NO_ROWS)
    for name, value in tables.tables.items():
        if name not in NAMED_SHEETS:
            sheets.append(Sheet(workbook, sheet_name(name, [s.title for s in sheets])))
            titles[name] = sheets[-1].title
            table_sheet(sheets[-1], value, NONE_KEPT if name in cut else NO_ROWS)
    cut = {**cut, **members_cut}
    if cut:
        sheets.append(Sheet(workbook, CUT_SHEET))
        cut_sheet(sheets[-1], cut, titles)
    sheets.append(ev_ws := Sheet(workbook, "Evidence"))
    first_rows = evidence_sheet(ev_ws, owners, evidence)
    causes_sheet(causes_ws, report, first_rows)
    findings_sheet(findings_ws, report, first_rows)
    summary_sheet(summary, report, first_rows, cut)
    for sheet in sheets:
        sheet.flush()
    return workbook


class Sheet:
    """A write-only worksheet that is filled cell by cell, like a normal one, and streamed out in row order by
    `flush`. The verdict and findings sheets place cells as they go; `append` adds a table's rows after them
    without a cell object for each plain value."""

    def __init__(self, workbook: Workbook, title: str) -> None:
        self.ws = workbook.create_sheet(title)
        self.title = title
        self.column_dimensions = self.ws.column_dimensions
        self.cells: dict[int, dict[int, Cell]] = {}
        self.rows: list[list[Any]] = []  # appended after the placed cells
        self.tail: Iterator[list[Any]] = iter(())  # streamed after those (`stream`)
        self.max_row = self.max_column = 0
        self.freeze_panes: str | None = None
        self.filter: str | None = None

    def cell(self, row: int, column: int) -> Cell:
        line = self.cells.setdefault(row, {})
        if column not in line:
            line[column] = WriteOnlyCell(self.ws)
            line[column].row, line[column].column = row, column
            self.max_row, self.max_column = max(self.max_row, row), max(self.max_column, column)
        return line[column]

    def append(self, values: list[Any]) -> None:
        self.rows.append(values)
        self.max_row += 1
        self.max_column = max(self.max_column, len(values))

    def stream(self, rows: Iterator[list[Any]], n: int) -> None:
        """``n`` more rows, made only as `flush` writes them: a table's rows are never all held as cells."""
        self.tail = rows
        self.max_row += n

    def values(self, column: int, first: int, last: int) -> Iterator[Any]:
        """The values of ``column`` from row ``first`` to ``last`` (placed or appended rows, not streamed ones)."""
        placed = max(self.cells, default=0)
        last = min(last, placed + len(self.rows))
        for index in range(first, last + 1):
            if index <= placed:
                got = self.cells.get(index, {}).get(column)
                yield None if got is None else got.value
            else:
                row = self.rows[index - placed - 1]
                v = row[column - 1] if column <= len(row) else None
                yield v.value if isinstance(v, Cell) else v

    def flush(self) -> None:
        if self.freeze_panes:
            self.ws.freeze_panes = self.freeze_panes
        if self.filter:
            self.ws.auto_filter.ref = self.filter
        for r in range(1, max(self.cells, default=0) + 1):
            line = self.cells.get(r, {})
            self.ws.append([line.get(index) for index in range(1, max(line, default=0) + 1)])
        for row in self.rows:
            self.ws.append(row)
        for row in self.tail:
            self.ws.append(row)


# ------------------------------------------------------------------------------------------ cells


def safe_text(value: str) -> str:
    """Control characters as visible escapes (XML 1.0, and so xlsx, cannot hold most of them; the Markdown and
    HTML reports show the same escapes), cut to Excel's cell limit."""
    text = visible(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def link(cell: Cell, row: int | None, what: str) -> None:
    """Make ``cell`` (an id) a link to the first Evidence row of what it names."""
    if row:
        cell.hyperlink = Hyperlink(
            ref=cell.coordinate, location=f"'Evidence'!A{row}", tooltip=f"Evidence rows of {what}"
        )
        cell.font = LINK_FONT


def put(sheet: Sheet, row: int, col: int, value: Any, number_format: str | None = None) -> Cell:
    """Write one cell; strings are always text, never formulas."""
    cell = sheet.cell(row=row, column=col)
    value = plain(value)
    if isinstance(value, str):
        cell.value = safe_text(value)
        cell.data_type = "s"  # openpyxl would otherwise store '=…' as a formula
        if value.startswith(FORMULA_START):
            cell.quotePrefix = True
    else:
        cell.value = value
        if number_format and isinstance(value, int | float) and not isinstance(value, bool):
            cell.number_format = number_format
    return cell


def plain(value: Any) -> Any:
    """A value a cell can hold: lists joined, dicts as JSON, NaN empty."""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, float) and value != value:
        return None
    return value


def table_value(sheet: Sheet, value: Any, number_format: str | None) -> Any:
    """A table cell as `put` writes it, as a plain value where openpyxl writes that the same way: a cell object
    only for text that could read as a formula and for numbers with a format."""
    value = plain(value)
    if isinstance(value, str):
        if value.startswith(FORMULA_START):
            cell = WriteOnlyCell(sheet.ws, value=safe_text(value))
            cell.data_type, cell.quotePrefix = "s", True
            return cell
        return safe_text(value)
    if number_format and isinstance(value, int | float) and not isinstance(value, bool):
        cell = WriteOnlyCell(sheet.ws, value=value)
        cell.number_format = number_format
        return cell
    return value


def header(sheet: Sheet, labels: list[str], row: int = 1) -> None:
    for index, label in enumerate(labels, start=1):
        c = put(sheet, row, index, label)
        c.font, c.fill = HEADER_FONT, HEADER_FILL
        c.alignment = Alignment(vertical="center")


def finish(sheet: Sheet, header_row: int = 1, widths: dict[int, float] | None = None) -> None:
    """Frozen header, autofilter, column widths from the content (capped)."""
    sheet.freeze_panes = f"A{header_row + 1}"
    if sheet.max_row > header_row and sheet.max_column:
        sheet.filter = f"A{header_row}:{get_column_letter(sheet.max_column)}{sheet.max_row}"
    for col in range(1, sheet.max_column + 1):
        letter = get_column_letter(col)
        if widths and col in widths:
            sheet.column_dimensions[letter].width = widths[col]
            continue
        longest = 0
        for value in sheet.values(col, header_row, header_row + WIDTH_ROWS):
            if value is not None:
                longest = max(longest, len(str(value)) if not isinstance(value, float) else 12)
        sheet.column_dimensions[letter].width = max(8, min(60, longest + 2))


def sheet_name(name: str, taken: list[str]) -> str:
    base = re.sub(r"[\[\]:*?/\\]", " ", name.replace("_", " ")).strip().capitalize()[:31] or "Table"
    out, i = base, 2
    while out in taken:
        suffix = f" {i}"
        out, i = base[: 31 - len(suffix)] + suffix, i + 1
    return out


# ------------------------------------------------------------------------------------------ sheets


def table_sheet(sheet: Sheet, frame: pl.DataFrame, empty: str = NO_ROWS) -> None:
    """Any report table, with number formats from the column names; values keep their source units. ``empty``:
    what the sheet says when it has no rows."""
    if frame is None or frame.is_empty():
        put(sheet, 1, 1, empty)
        return
    columns = [table_column(key, str(value), sheet.title) for key, value in frame.schema.items()]
    header(sheet, [label for _kind, label in columns])
    formats = [NUMBER_FORMATS.get(kind) for kind, _label in columns]
    rows = ([table_value(sheet, v, f) for v, f in zip(rec, formats, strict=True)] for rec in frame.iter_rows())
    for row in islice(rows, WIDTH_ROWS):  # held: `finish` sizes the columns on them
        sheet.append(row)
    sheet.stream(rows, frame.height - min(frame.height, WIDTH_ROWS))
    finish(sheet)


SUMMARY_STATS = ("_min_rank", "_max_rank", "_median", "_min", "_max")  # the columns of `json_report.by_class`


def table_column(name: str, dtype: str, title: str) -> tuple[str, str]:
    """How a column is shown: its kind (number format) and header. A summary per class (``time_us_min``,
    ``time_us_min_rank``) is shown as the column it summarises (µs, %), the ranks as ids: "time min (µs)"."""
    stat = next((s for s in SUMMARY_STATS if name.endswith(s) and len(name) > len(s)), None)
    if stat is None or not title.endswith(" by class"):
        kind = column_kind(name, dtype)
        return kind, column_label(name, kind)
    base = name[: -len(stat)]
    kind = column_kind(base, dtype)
    label = column_label(base, kind)
    words = stat[1:].replace("_", " ")
    head, unit = (label[: label.rindex(" (")], label[label.rindex(" (") :]) if label.endswith(")") else (label, "")
    if stat.endswith("_rank"):
        return "id", f"{head} {words}"
    return kind, f"{head} {words}{unit}"


def cut_sheet(sheet: Sheet, cut: dict[str, dict], titles: dict[str, str]) -> None:
    """What the workbook left out of each cut table, the sheet holding what it kept and the summary of every
    row, and the command that writes the whole table."""
    header(
        sheet, ["Table", "Sheet", "Rows in the analysis", "Rows here", "Ranks kept", "Summary per class", "Full table"]
    )
    for index, (name, what) in enumerate(cut.items(), start=2):
        put(sheet, index, 1, name)
        sheet_link(put(sheet, index, 2, titles.get(name, "")), titles.get(name))
        put(sheet, index, 3, what["rows"], NUMBER_FORMATS["int"])
        put(sheet, index, 4, what["kept"], NUMBER_FORMATS["int"])
        ranks = what.get("ranks_kept") or []
        put(sheet, index, 5, fmt_ranks(ranks) if ranks else "none: no cause or headline finding names a few ranks")
        summary = titles.get(what.get("summary") or "")
        sheet_link(put(sheet, index, 6, summary or "(none)"), summary)
        put(sheet, index, 7, what.get("full", ""))
    finish(sheet, widths={1: 18, 2: 22, 3: 12, 4: 12, 5: 40, 6: 24, 7: 80})


def sheet_link(cell: Cell, title: str | None) -> None:
    """Make ``cell`` a link to the top of the sheet ``title``."""
    if title:
        location = "'" + title.replace("'", "''") + "'!A1"
        cell.hyperlink = Hyperlink(ref=cell.coordinate, location=location, tooltip=f"Sheet {title}")
        cell.font = LINK_FONT


def cut_text(cut: dict[str, dict]) -> str:
    """One line for the Summary: which tables and groups' members were cut, to what, and where they are in full."""
    ranks = next(iter(cut.values())).get("ranks_kept") or []
    which = fmt_ranks(ranks) if ranks else "none: no cause or headline finding names a few ranks"
    tables = [name for name in cut if not name.startswith("members of ")]
    groups = [name.removeprefix("members of ") for name in cut if name.startswith("members of ")]
    parts = []
    if tables:
        parts.append(
            f"{len(tables)} table{'s' if len(tables) > 1 else ''} over {ROW_LIMIT:,} rows ({', '.join(tables)}) keep "
            "the rows of the ranks the verdict names and of the links findings name, with a summary per class of "
            "every row; profan analyze DIR --tables OUT_DIR writes every table in full as Parquet"
        )
    if groups:
        parts.append(
            f"The group finding{'s' if len(groups) > 1 else ''} {', '.join(groups)} list their first "
            f"{MEMBER_LIMIT} members (the worst) and those of the named ranks; profan evidence DATA_DIR "
            f"{groups[0]}.N reads any member back"
        )
    return " ".join(
        [f"Ranks the verdict names: {which}.", *(f"{part}." for part in parts), f"See the sheet {CUT_SHEET}."]
    )


def summary_sheet(sheet: Sheet, report: Report, first_rows: dict[str, int], cut: dict[str, dict] | None = None) -> None:
    """The verdict first (the step, the causes, the headline findings no cause explains), then what was read and,
    when tables were cut (``cut``: `json_report.cut_tables`'s ``meta.tables_cut``), what and where they are whole."""
    put(sheet, 1, 1, "profan report").font = Font(bold=True, size=14)
    r = verdict_block(sheet, report, first_rows, 3) + 2
    src = report.source
    rows: list[tuple[str, Any]] = [
        ("Source", src.get("root", "")),
        ("Format", src.get("format", "")),
        ("Ranks", len(src.get("ranks", []))),
        *((f"Findings: {s}", sum(finding.severity == s for finding in report.findings)) for s in SEVERITIES),
        ("profan", report.meta.get("profan", "")),
        ("Rule files", report.meta.get("rule_files", [])),
    ]
    if cut:
        rows.append((CUT_SHEET, cut_text(cut)))
    for key, value in rows:
        put(sheet, r, 1, key).font = Font(bold=True)
        put(sheet, r, 2, value)
        r += 1
    if cut:
        sheet_link(sheet.cell(row=r - 1, column=2), CUT_SHEET)
        sheet.cell(row=r - 1, column=2).alignment = Alignment(wrap_text=True, vertical="top")
    r += 1
    header(sheet, ["Rank", "Folder", "Rank from", "Files", "Rows read", "Rows skipped", "Profiler"], row=r)
    for rank in src.get("ranks", []):
        r += 1
        put(sheet, r, 1, rank.get("rank"))
        put(sheet, r, 2, rank.get("path", ""))
        put(sheet, r, 3, rank.get("rank_origin", ""))
        put(sheet, r, 4, ", ".join(sorted((rank.get("files") or {}).keys())))
        put(sheet, r, 5, ", ".join(f"{key} {value}" for key, value in (rank.get("rows_read") or {}).items()))
        put(
            sheet,
            r,
            6,
            ", ".join(f"{key} {value}" for key, value in (rank.get("rows_skipped") or {}).items()) or "none",
        )
        put(
            sheet,
            r,
            7,
            ", ".join(f"{key} {value}" for key, value in (rank.get("info") or {}).items() if value not in (None, "")),
        )
    for title, items in (("Warnings", report.warnings), ("Notes", report.notes)):
        if items:
            r += 2
            put(sheet, r, 1, title).font = Font(bold=True)
            for item in items:
                r += 1
                put(sheet, r, 1, item)
    for col, width in zip("ABCDEFGHIJ", (22, 60, 16, 12, 70, 60, 60, 22, 22, 70), strict=True):
        sheet.column_dimensions[col].width = width


VERDICT_HEADER = [
    "Cause",
    "Title",
    "Gain per step",
    "Share of step",
    "Action",
    "Verify",
    "Competing explanations",
    "Explains",
    "Ranks and steps",
    "Assumption",
]


def verdict_block(sheet: Sheet, report: Report, first_rows: dict[str, int], r: int) -> int:
    """The verdict from row ``r``: the step, one row per cause (largest estimated gain first), the headline
    findings no cause explains (a comparison: its verdict lines). Returns the last row written."""
    if report.source.get("kind") == "compare":
        return compare_verdict_block(sheet, report, r)
    put(sheet, r, 1, "Verdict").font = Font(bold=True, size=12)
    step = step_summary(report.tables, report.causes)
    label, text = opening(report.tables, step)
    put(sheet, r + 1, 1, label).font = Font(bold=True)
    put(sheet, r + 1, 2, text)
    r += 3
    header(sheet, VERDICT_HEADER, row=r)
    for cause in report.causes:
        r += 1
        link(put(sheet, r, 1, cause.id), first_rows.get(cause.id), cause.id)
        put(sheet, r, 2, cause.title)
        if cause.impact_us is None:
            put(sheet, r, 3, gain_text(cause, share_of(step)))
        else:
            put(sheet, r, 3, cause.impact_us / 1000, NUMBER_FORMATS["gain_ms"])
        put(sheet, r, 4, cause.impact_share, NUMBER_FORMATS["pct"])
        for col, value in enumerate(
            (
                cause.action,
                cause.verify,
                "\n".join(cause.alternatives),
                ", ".join(cause.explains),
                span_text(cause.ranks, cause.steps),
            ),
            start=5,
        ):
            put(sheet, r, col, value)
        put(sheet, r, 10, cause.assumption)
        for col in (2, 3, 5, 6, 7, 10):
            sheet.cell(row=r, column=col).alignment = Alignment(wrap_text=True, vertical="top")
    if not report.causes:
        put(
            sheet,
            r + 1,
            1,
            "No cause found: no finding names a rank, stage, link or kind of time that holds the step back.",
        )
        r += 1
    r += 2
    put(sheet, r, 1, "Also worth a look").font = Font(bold=True)
    also = also_worth_a_look(report)
    for f in also:
        r += 1
        link(put(sheet, r, 1, f.id), first_rows.get(f.id), f.id)
        put(sheet, r, 2, f.title)
        put(sheet, r, 3, f.severity).fill = SEVERITY_FILL[f.severity]
    if not also:
        r += 1
        put(sheet, r, 1, "Nothing else at warning or critical.")
    return r


def compare_verdict_block(sheet: Sheet, report: Report, r: int) -> int:
    """A comparison's verdict from row ``r``: one line per cause that appeared, vanished or changed between the
    sides (B's gain first; both sides' gains on sheet Compare causes). Returns the last row written."""
    put(sheet, r, 1, "Verdict").font = Font(bold=True, size=12)
    lines = compare_verdict(report)
    for line in lines:
        r += 1
        put(sheet, r, 1, line["severity"]).fill = SEVERITY_FILL[line["severity"]]
        put(sheet, r, 2, line["sentence"])
    if not lines:
        r += 1
        put(
            sheet,
            r,
            1,
            "No cause on either side: each side diagnosed as profan analyze diagnoses it, and neither names one.",
        )
    return r


def causes_sheet(sheet: Sheet, report: Report, first_rows: dict[str, int]) -> None:
    """Every field of every cause; values in their source units (µs)."""
    cols = ["ID", "Check", "Title", "Gain per step", "Share of step", "Step", "Assumption", "Action", "Verify"]
    header(sheet, [*cols, "Competing explanations", "Explains", "Ranks", "Steps", "Message", "Rows in claim"])
    if not report.causes:
        put(sheet, 2, 1, "(no causes in this report)")
    for index, cause in enumerate(report.causes, start=2):
        link(put(sheet, index, 1, cause.id), first_rows.get(cause.id), cause.id)
        put(sheet, index, 2, cause.check)
        put(sheet, index, 3, cause.title)
        put(sheet, index, 4, cause.impact_us if cause.impact_us is not None else gain_text(cause), NUMBER_FORMATS["us"])
        put(sheet, index, 5, cause.impact_share, NUMBER_FORMATS["pct"])
        put(sheet, index, 6, cause.step_us, NUMBER_FORMATS["us"])
        for col, value in enumerate(
            (
                cause.assumption,
                cause.action,
                cause.verify,
                "\n".join(cause.alternatives),
                cause.explains,
                cause.ranks,
                cause.steps,
                cause.message,
            ),
            start=7,
        ):
            put(sheet, index, col, value)
        put(sheet, index, 15, sum(e.row_count for e in cause.evidence), NUMBER_FORMATS["int"])
        for col in (3, 7, 8, 9, 10, 14):
            sheet.cell(row=index, column=col).alignment = Alignment(wrap_text=True, vertical="top")
    finish(
        sheet,
        widths={1: 7, 2: 26, 3: 60, 4: 16, 5: 10, 6: 14, 7: 60, 8: 80, 9: 60, 10: 60, 11: 18, 12: 14, 13: 10, 14: 90},
    )


def members_sheet(sheet: Sheet, report: Report) -> dict[str, dict]:
    """One row per member of a group finding, with the first of its own cited rows (`profan evidence` prints
    all of them by the member's id). A group of more than MEMBER_LIMIT members (one per rank and step of a check
    measured everywhere) lists its first MEMBER_LIMIT, the worst, and those of the ranks the verdict names, as the
    JSON report does (`json_report.cut_members`); returns what was left out of each group, for the sheet Tables
    cut."""
    header(sheet, ["Group", "ID", "Severity", "Check", "Rank", "Step", "Title", "Message", "First source", "Locators"])
    bounded = cut_members(report, MEMBER_LIMIT)
    cut = {
        f"members of {group}": {
            "rows": left["members"],
            "kept": left["kept"],
            "ranks_kept": named_ranks(report),
            "summary": None,
            "full": left["full"],
        }
        for group, left in (bounded.meta.get("members_cut") or {}).items()
    }
    r = 1
    for finding in bounded.findings:
        for member in finding.members:
            r += 1
            put(sheet, r, 1, finding.id)
            put(sheet, r, 2, member.id)
            put(sheet, r, 3, member.severity).fill = SEVERITY_FILL[member.severity]
            put(sheet, r, 4, member.check)
            put(sheet, r, 5, member.rank)
            put(sheet, r, 6, member.step)
            put(sheet, r, 7, member.title)
            put(sheet, r, 8, member.message)
            put(sheet, r, 9, member.evidence[0].file)
            put(sheet, r, 10, locators(member.evidence[0].to_dict(), limit=20))
    if r == 1:
        put(sheet, 2, 1, "(no group findings in this report)")
    finish(sheet, widths={1: 8, 2: 8, 3: 10, 4: 26, 5: 6, 6: 6, 7: 60, 8: 90, 9: 60, 10: 60})
    return cut


def evidence_sheet(
    sheet: Sheet, owners: list[Cause | Finding], evidence: dict[str, list[EvidenceTable]]
) -> dict[str, int]:
    """One row per cited source row, the causes' first; returns the first row of each cause and finding (for the
    links to it)."""
    header(
        sheet, ["ID", "Severity", "Item", "File", "Locator", "Name", "Type", "Key values", "Rows in claim", "Raw row"]
    )
    first: dict[str, int] = {}
    r = 1
    for owner in owners:
        severity = getattr(owner, "severity", "cause")
        for t in evidence[owner.id]:
            ev = t.evidence
            rows = t.rows or [None]
            for row in rows:
                r += 1
                first.setdefault(owner.id, r)
                put(sheet, r, 1, owner.id)
                put(sheet, r, 2, severity).fill = SEVERITY_FILL[severity]
                put(sheet, r, 3, t.index)
                put(sheet, r, 4, ev.file)
                if row is None:
                    put(sheet, r, 5, ", ".join(str(locator) for locator in ev.locators))
                    put(sheet, r, 8, t.error or "(no rows read back)")
                else:
                    put(sheet, r, 5, row.locator)
                    name = pick(row, NAME_COLUMNS)
                    if not name and ev.kind == "pointers":  # communication.json: the op is the pointer's last key
                        name = row.locator.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
                    put(sheet, r, 6, name)
                    put(sheet, r, 7, pick(row, TYPE_COLUMNS))
                    put(sheet, r, 8, "; ".join(f"{k}={v}" for k, v in key_values(row, ev)))
                    put(sheet, r, 10, row.raw)
                put(sheet, r, 9, ev.row_count, NUMBER_FORMATS["int"])
    finish(sheet, widths={1: 9, 2: 10, 3: 6, 4: 58, 5: 16, 6: 48, 7: 20, 8: 80, 9: 12, 10: 100})
    return first


FINDING_COLUMNS = [
    "ID",
    "Severity",
    "Check",
    "Rank",
    "Step",
    "Title",
    "Message",
    "Evidence",
    "Rows cited",
    "Rows in claim",
    "First source",
    "Ranks",
    "Steps",
    "Explained by",
    "Members",
]


def findings_sheet(sheet: Sheet, report: Report, first_rows: dict[str, int]) -> None:
    header(sheet, FINDING_COLUMNS)
    for index, finding in enumerate(report.findings, start=2):
        target = first_rows.get(finding.id)
        link(put(sheet, index, 1, finding.id), target, finding.id)
        put(sheet, index, 2, finding.severity).fill = SEVERITY_FILL[finding.severity]
        put(sheet, index, 3, finding.check)
        put(sheet, index, 4, finding.rank)
        put(sheet, index, 5, finding.step)
        put(sheet, index, 6, finding.title)
        put(sheet, index, 7, finding.message)
        put(sheet, index, 8, f"{len(finding.evidence)} source(s) → Evidence row {target}" if target else "")
        put(sheet, index, 9, sum(len(e.locators) for e in finding.evidence), NUMBER_FORMATS["int"])
        put(sheet, index, 10, sum(e.row_count for e in finding.evidence), NUMBER_FORMATS["int"])
        put(sheet, index, 11, finding.evidence[0].file)
        put(sheet, index, 12, finding.ranks)
        put(sheet, index, 13, finding.steps)
        put(sheet, index, 14, finding.explained_by)
        put(sheet, index, 15, len(finding.members) or None, NUMBER_FORMATS["int"])
        sheet.cell(row=index, column=7).alignment = Alignment(wrap_text=True, vertical="top")
    widths = {1: 7, 2: 10, 3: 26, 4: 6, 5: 6, 6: 60, 7: 90, 8: 26, 9: 10, 10: 12, 11: 60, 12: 14, 13: 10, 14: 10}
    finish(sheet, widths={**widths, 15: 9})
