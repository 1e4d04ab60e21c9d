"""The Excel report on real data: the promised sheets, formats, Findings → Evidence links that land on the right
rows, and kernel names from a trace that can never become formulas (nor markup in the HTML twin)."""

from __future__ import annotations

import csv
import html
import shutil

import markupsafe
import openpyxl
import pytest
from conftest import QWEN3, raw_rows

import profan
from profan.render import render
from profan.render.evidence_rows import locator_label

FORMULA = "=cmd|' /C calc'!A0"
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def qwen_book(qwen3_report, tmp_path_factory):
    out = tmp_path_factory.mktemp("xlsx") / "report.xlsx"
    render(qwen3_report, "xlsx", out)
    return openpyxl.load_workbook(out)


def _rows(ws) -> list[tuple]:
    return list(ws.iter_rows(values_only=True))


def test_sheets_formats_and_frozen_headers(qwen3_report, qwen_book):
    names = qwen_book.sheetnames
    assert names[:7] == ["Summary", "Causes", "Findings", "Members", "Breakdown", "Top kernels", "Communication"]
    assert names[-1] == "Evidence"
    bd = qwen_book["Breakdown"]
    head = [c.value for c in bd[1]]
    assert head == ["rank", "step", "bucket", "time (µs)", "share", "kernels"]
    table = qwen3_report.tables["breakdown"]
    assert bd.max_row == table.height + 1
    assert bd["D2"].value == table["time_us"][0] and bd["D2"].number_format == '#,##0.0" µs"'
    assert bd["E2"].value == table["share"][0] and bd["E2"].number_format == "0.0%"
    comm = qwen_book["Communication"]
    col = [c.value for c in comm[1]].index("elapse (ms)") + 1
    assert comm.cell(row=2, column=col).number_format == '#,##0.000" ms"'
    for name in names[1:]:
        ws = qwen_book[name]
        assert ws.freeze_panes == "A2", name
        assert ws.auto_filter.ref == f"A1:{openpyxl.utils.get_column_letter(ws.max_column)}{ws.max_row}", name
        assert ws.column_dimensions["A"].width >= 6


def test_every_finding_links_to_its_first_evidence_row(qwen3_report, qwen_book):
    """The Evidence sheet holds the causes' cited rows, then the findings'; each id on the Causes and Findings
    sheets links to the first row of its own."""
    ev = qwen_book["Evidence"]
    ev_head = [c.value for c in ev[1]]
    col = {h: i for i, h in enumerate(ev_head)}
    ev_rows = _rows(ev)
    owners = [*qwen3_report.causes, *qwen3_report.findings]
    assert len(ev_rows) - 1 == sum(len(e.locators) for f in owners for e in f.evidence)
    assert ev_rows[1][col["ID"]] == qwen3_report.causes[0].id
    rows = [("Causes", r, c) for r, c in enumerate(qwen3_report.causes, start=2)]
    rows += [("Findings", r, f) for r, f in enumerate(qwen3_report.findings, start=2)]
    for sheet, r, f in rows:
        cell = qwen_book[sheet].cell(row=r, column=1)
        assert cell.value == f.id
        sheet, ref = cell.hyperlink.location.split("!")
        assert sheet == "'Evidence'"
        target = int(ref[1:])
        row = ev_rows[target - 1]
        first = f.evidence[0]
        assert (row[col["ID"]], row[col["File"]], row[col["Locator"]]) == (
            f.id,
            first.file,
            locator_label(first.kind, first.locators[0]),
        )
        assert ev_rows[target - 2][col["ID"]] != f.id  # it is the first row of this finding


def test_evidence_rows_hold_the_raw_line_and_its_key_values(qwen3_report, qwen_book):
    ev = qwen_book["Evidence"]
    head = [c.value for c in ev[1]]
    f = next(f for f in qwen3_report.findings if f.check == "comm-exposed-split")  # step_trace_time.csv line 2
    e = f.evidence[0]
    assert e.file.endswith("step_trace_time.csv")
    row = next(r for r in _rows(ev)[1:] if r[0] == f.id)
    header, rows = raw_rows(QWEN3 / e.file)
    raw = rows[e.lines[0]]
    assert next(csv.reader([row[head.index("Raw row")]])) == [raw[h] for h in header]
    key_values = row[head.index("Key values")]
    assert f"Communication(Not Overlapped)={raw['Communication(Not Overlapped)']}" in key_values
    assert f"Computing={raw['Computing']}" in key_values


def _edit_name(path, line_no: int, new: str) -> str:
    lines = path.read_text(encoding="utf-8").split("\n")
    header = next(csv.reader([lines[0]]))
    old = next(csv.reader([lines[line_no - 1]]))[header.index("Name")]
    assert lines[line_no - 1].count(f",{old},") == 1
    lines[line_no - 1] = lines[line_no - 1].replace(f",{old},", f",{new},")
    path.write_text("\n".join(lines), encoding="utf-8")
    return old


def test_untrusted_kernel_names_stay_text(qwen3_report, tmp_path):
    """Copy the real job, name one kernel '=cmd…' and another '<script>…', and render both reports."""
    data = tmp_path / "job"
    shutil.copytree(QWEN3, data)
    finding = next(
        f
        for f in qwen3_report.findings
        if f.check == "kernel-boundness" and f.evidence[0].file.endswith("kernel_details.csv")
    )
    ev = finding.evidence[0]
    first, second = ev.lines[0], ev.lines[1]
    _edit_name(data / ev.file, first, FORMULA)
    _edit_name(data / ev.file, second, SCRIPT)

    report = profan.analyze(data)
    same = next(f for f in report.findings if f.title == finding.title)
    assert same.evidence[0].lines[:2] == (first, second)

    xlsx = tmp_path / "r.xlsx"
    render(report, "xlsx", xlsx)
    wb = openpyxl.load_workbook(xlsx)
    ws = wb["Evidence"]
    head = [c.value for c in ws[1]]
    hits = [r for r in ws.iter_rows(min_row=2) if r[head.index("Name")].value == FORMULA]
    # cited by the finding and by the cause it is the source of (whose evidence is the finding's)
    assert same.explained_by and report.cause(same.explained_by).evidence[0] == same.evidence[0]
    got = [(r[head.index("ID")].value, r[head.index("Locator")].value) for r in hits]
    assert got == [(same.explained_by, f"line {first}"), (same.id, f"line {first}")]
    cell = hits[0][head.index("Name")]
    assert cell.data_type == "s" and cell.quotePrefix
    assert not [c.coordinate for s in wb for row in s.iter_rows() for c in row if c.data_type == "f"]

    out = tmp_path / "r.html"
    render(report, "html", out)
    doc = out.read_text(encoding="utf-8")
    assert SCRIPT not in doc
    assert html.escape(SCRIPT, quote=False) in doc
    assert str(markupsafe.escape(FORMULA)) in doc
