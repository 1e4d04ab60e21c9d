"""`profan compare` renders to every report format; HTML and Excel carry the same findings as JSON."""

from __future__ import annotations

import html
import json

from conftest import FIXTURES, run_cli
from openpyxl import load_workbook

DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"
A = DLRM / "worker0_step_12.1694128201545.pt.trace.json"
B = DLRM / "worker7_step_12.1694128201553.pt.trace.json"


def test_compare_html_and_xlsx(tmp_path):
    js, page, book = tmp_path / "c.json", tmp_path / "c.html", tmp_path / "c.xlsx"
    for fmt, out in (("json", js), ("html", page), ("xlsx", book)):
        res = run_cli("compare", str(A), str(B), "-f", fmt, "-o", str(out), "-q")
        assert res.returncode == 0, res.stderr
    findings = json.loads(js.read_text())["findings"]
    assert findings
    text = page.read_text(encoding="utf-8")
    assert "<script src=" not in text  # self-contained: nothing fetched
    for f in findings:
        assert html.escape(f["title"], quote=False) in text
    ws = load_workbook(book)["Findings"]
    titles = {str(c.value) for row in ws.iter_rows() for c in row if c.value is not None}
    assert all(f["title"] in titles or f["id"] in titles for f in findings)


def test_compare_unknown_format():
    res = run_cli("compare", str(A), str(B), "-f", "pdf")
    assert res.returncode == 2 and "unknown format 'pdf'" in res.stderr
