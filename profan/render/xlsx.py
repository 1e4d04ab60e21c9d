"""Excel renderer (openpyxl): the Report as a workbook people filter, sort and forward.

Sheets: Summary, Findings, Breakdown (rank × step × bucket), Top kernels, Communication, one sheet per other
report table, and Evidence — one row per cited source row, read back from the files. Each finding's id links to
its first evidence row.

Every string cell is written as text: a kernel name such as ``=HYPERLINK(...)`` or ``-1+2`` coming from a trace
must never become a formula, so cells starting with ``= + - @``, tab or CR are stored as strings with Excel's
quote prefix (the cell shows the text, and editing it keeps it text). Control characters are written as visible
escapes (``\\r``, ``\\x1b``), as in the other reports. Values stay in their source units; the
number formats show the unit (µs, ms, %).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
from openpyxl import Workbook
from openpyxl.cell.cell import Cell
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.hyperlink import Hyperlink
from openpyxl.worksheet.worksheet import Worksheet

from profan.model.findings import SEVERITIES
from profan.model.report import Report
from profan.render.evidence_rows import NAME_COLUMNS, TYPE_COLUMNS, EvidenceTable, key_values, pick, read_evidence
from profan.render.html import data_root
from profan.render.textfmt import column_kind, column_label, visible

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MAX_CELL = 32767  # Excel's limit on characters in a cell

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
}
HEADER_FONT = Font(bold=True, color="FFFFFF")
HEADER_FILL = PatternFill("solid", fgColor="1F2A3A")
SEVERITY_FILL = {
    "critical": PatternFill("solid", fgColor="FDECEA"),
    "warning": PatternFill("solid", fgColor="FFF4E0"),
    "info": PatternFill("solid", fgColor="EAF1FB"),
}
LINK_FONT = Font(color="2B5EA7", underline="single", bold=True)
NAMED_SHEETS = {"breakdown": "Breakdown", "top_kernels": "Top kernels", "communication": "Communication"}


def render_xlsx(report: Report, out: Path | None = None) -> str | None:
    if out is None:
        raise ValueError("the xlsx format needs an output file (-o report.xlsx)")
    build_workbook(report).save(out)
    return None


def build_workbook(report: Report) -> Workbook:
    evidence = read_evidence(data_root(report), report.findings)
    wb = Workbook()
    summary = wb.active
    summary.title = "Summary"
    findings_ws = wb.create_sheet("Findings")
    for name, title in NAMED_SHEETS.items():  # the sheets the issue promises exist even when empty
        table_sheet(wb.create_sheet(title), report.tables.get(name, pl.DataFrame()))
    for name, df in report.tables.items():
        if name not in NAMED_SHEETS:
            table_sheet(wb.create_sheet(sheet_name(name, wb.sheetnames)), df)
    ev_ws = wb.create_sheet("Evidence")
    first_rows = evidence_sheet(ev_ws, report, evidence)
    findings_sheet(findings_ws, report, first_rows)
    summary_sheet(summary, report)
    return wb


# ------------------------------------------------------------------------------------------ cells


def safe_text(value: str) -> str:
    """Control characters as visible escapes (XML 1.0, and so xlsx, cannot hold most of them; the Markdown and
    HTML reports show the same escapes), cut to Excel's cell limit."""
    text = visible(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def put(ws: Worksheet, row: int, col: int, value: Any, number_format: str | None = None) -> Cell:
    """Write one cell; strings are always text, never formulas."""
    if isinstance(value, list | tuple):
        value = ", ".join(str(v) for v in value)
    elif isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False, default=str)
    elif isinstance(value, float) and value != value:
        value = None
    cell = ws.cell(row=row, column=col)
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


def header(ws: Worksheet, labels: list[str], row: int = 1) -> None:
    for i, label in enumerate(labels, start=1):
        c = put(ws, row, i, label)
        c.font, c.fill = HEADER_FONT, HEADER_FILL
        c.alignment = Alignment(vertical="center")


def finish(ws: Worksheet, header_row: int = 1, widths: dict[int, float] | None = None) -> None:
    """Frozen header, autofilter, column widths from the content (capped)."""
    ws.freeze_panes = ws.cell(row=header_row + 1, column=1).coordinate
    if ws.max_row > header_row and ws.max_column:
        ws.auto_filter.ref = f"A{header_row}:{get_column_letter(ws.max_column)}{ws.max_row}"
    for col in range(1, ws.max_column + 1):
        letter = get_column_letter(col)
        if widths and col in widths:
            ws.column_dimensions[letter].width = widths[col]
            continue
        longest = 0
        for (value,) in ws.iter_rows(
            min_row=header_row, max_row=min(ws.max_row, header_row + 400), min_col=col, max_col=col, values_only=True
        ):
            if value is not None:
                longest = max(longest, len(str(value)) if not isinstance(value, float) else 12)
        ws.column_dimensions[letter].width = max(8, min(60, longest + 2))


def sheet_name(name: str, taken: list[str]) -> str:
    base = re.sub(r"[\[\]:*?/\\]", " ", name.replace("_", " ")).strip().capitalize()[:31] or "Table"
    out, i = base, 2
    while out in taken:
        suffix = f" {i}"
        out, i = base[: 31 - len(suffix)] + suffix, i + 1
    return out


# ------------------------------------------------------------------------------------------ sheets


def table_sheet(ws: Worksheet, df: pl.DataFrame) -> None:
    """Any report table, with number formats from the column names; values keep their source units."""
    if df is None or df.is_empty():
        put(ws, 1, 1, "(no rows in this report)")
        return
    kinds = [column_kind(c, str(dt)) for c, dt in df.schema.items()]
    header(ws, [column_label(c, k) for c, k in zip(df.columns, kinds, strict=True)])
    for r, rec in enumerate(df.iter_rows(), start=2):
        for c, (v, kind) in enumerate(zip(rec, kinds, strict=True), start=1):
            put(ws, r, c, v, NUMBER_FORMATS.get(kind))
    finish(ws)


def summary_sheet(ws: Worksheet, report: Report) -> None:
    src = report.source
    rows: list[tuple[str, Any]] = [
        ("Source", src.get("root", "")),
        ("Format", src.get("format", "")),
        ("Ranks", len(src.get("ranks", []))),
        *((f"Findings: {s}", sum(f.severity == s for f in report.findings)) for s in SEVERITIES),
        ("profan", report.meta.get("profan", "")),
        ("Rule files", report.meta.get("rule_files", [])),
    ]
    put(ws, 1, 1, "profan report").font = Font(bold=True, size=14)
    r = 3
    for k, v in rows:
        put(ws, r, 1, k).font = Font(bold=True)
        put(ws, r, 2, v)
        r += 1
    r += 1
    header(ws, ["Rank", "Folder", "Rank from", "Files", "Rows read", "Rows skipped", "Profiler"], row=r)
    for rk in src.get("ranks", []):
        r += 1
        put(ws, r, 1, rk.get("rank"))
        put(ws, r, 2, rk.get("path", ""))
        put(ws, r, 3, rk.get("rank_origin", ""))
        put(ws, r, 4, ", ".join(sorted((rk.get("files") or {}).keys())))
        put(ws, r, 5, ", ".join(f"{k} {v}" for k, v in (rk.get("rows_read") or {}).items()))
        put(ws, r, 6, ", ".join(f"{k} {v}" for k, v in (rk.get("rows_skipped") or {}).items()) or "none")
        put(ws, r, 7, ", ".join(f"{k} {v}" for k, v in (rk.get("info") or {}).items() if v not in (None, "")))
    for title, items in (("Warnings", report.warnings), ("Notes", report.notes)):
        if items:
            r += 2
            put(ws, r, 1, title).font = Font(bold=True)
            for w in items:
                r += 1
                put(ws, r, 1, w)
    for col, width in zip("ABCDEFG", (22, 34, 30, 60, 50, 18, 60), strict=True):
        ws.column_dimensions[col].width = width


def evidence_sheet(ws: Worksheet, report: Report, evidence: dict[str, list[EvidenceTable]]) -> dict[str, int]:
    """One row per cited source row; returns the first row of each finding (for the Findings links)."""
    header(
        ws, ["Finding", "Severity", "Item", "File", "Locator", "Name", "Type", "Key values", "Rows in claim", "Raw row"]
    )
    first: dict[str, int] = {}
    r = 1
    for f in report.findings:
        for t in evidence[f.id]:
            ev = t.evidence
            rows = t.rows or [None]
            for sr in rows:
                r += 1
                first.setdefault(f.id, r)
                put(ws, r, 1, f.id)
                put(ws, r, 2, f.severity).fill = SEVERITY_FILL[f.severity]
                put(ws, r, 3, t.index)
                put(ws, r, 4, ev.file)
                if sr is None:
                    put(ws, r, 5, ", ".join(str(x) for x in ev.locators))
                    put(ws, r, 8, t.error or "(no rows read back)")
                else:
                    put(ws, r, 5, sr.locator)
                    name = pick(sr, NAME_COLUMNS)
                    if not name and ev.kind == "pointers":  # communication.json: the op is the pointer's last key
                        name = sr.locator.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
                    put(ws, r, 6, name)
                    put(ws, r, 7, pick(sr, TYPE_COLUMNS))
                    put(ws, r, 8, "; ".join(f"{k}={v}" for k, v in key_values(sr, ev)))
                    put(ws, r, 10, sr.raw)
                put(ws, r, 9, ev.row_count, NUMBER_FORMATS["int"])
    finish(ws, widths={1: 9, 2: 10, 3: 6, 4: 58, 5: 16, 6: 48, 7: 20, 8: 80, 9: 12, 10: 100})
    return first


def findings_sheet(ws: Worksheet, report: Report, first_rows: dict[str, int]) -> None:
    header(
        ws,
        [
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
        ],
    )
    for r, f in enumerate(report.findings, start=2):
        c = put(ws, r, 1, f.id)
        target = first_rows.get(f.id)
        if target:
            c.hyperlink = Hyperlink(
                ref=c.coordinate, location=f"'Evidence'!A{target}", tooltip=f"Evidence rows of {f.id}"
            )
            c.font = LINK_FONT
        put(ws, r, 2, f.severity).fill = SEVERITY_FILL[f.severity]
        put(ws, r, 3, f.check)
        put(ws, r, 4, f.rank)
        put(ws, r, 5, f.step)
        put(ws, r, 6, f.title)
        put(ws, r, 7, f.message)
        put(ws, r, 8, f"{len(f.evidence)} source(s) → Evidence row {target}" if target else "")
        put(ws, r, 9, sum(len(e.locators) for e in f.evidence), NUMBER_FORMATS["int"])
        put(ws, r, 10, sum(e.row_count for e in f.evidence), NUMBER_FORMATS["int"])
        put(ws, r, 11, f.evidence[0].file)
        ws.cell(row=r, column=7).alignment = Alignment(wrap_text=True, vertical="top")
    finish(ws, widths={1: 7, 2: 10, 3: 26, 4: 6, 5: 6, 6: 60, 7: 90, 8: 26, 9: 10, 10: 12, 11: 60})
