"""The generic tables of the Markdown report read as the HTML report's do: durations in ms with the unit in the
header, shares as percentages, timestamps as ms from the table's t0 (stated under the table) — on real data,
never raw µs floats, 0.xx fractions under a share header or sixteen-digit clock values."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES, analysed

from profan.model.textfmt import fmt_ms
from profan.render.html import table_view
from profan.render.markdown import render_markdown

SLEEP = FIXTURES / "torch" / "gloo_gain_pairs" / "sleep"
_TABLE = re.compile(r"^## .*\(`(?P<name>\w+)`\)\n\n(?P<head>\|.*\|)\n(?P<rule>\|.*\|)\n(?P<body>(?:\|.*\n)+)", re.M)


def _md_tables(text: str) -> dict[str, tuple[list[str], list[bool], list[list[str]]]]:
    """Each generic table of a Markdown report: its headers, which columns are numeric (right-aligned), its rows."""
    out = {}
    for match in _TABLE.finditer(text):
        head = [cell.strip() for cell in match["head"].strip("|").split("|")]
        numeric = [rule.endswith(":") for rule in match["rule"].strip("|").split("|")]
        rows = [
            [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            for line in match["body"].splitlines()
        ]
        out[match["name"]] = (head, numeric, rows)
    return out


@pytest.fixture(scope="module")
def sleep_report():
    return analysed(SLEEP)


def test_timestamps_read_as_ms_from_the_tables_t0(sleep_report):
    """moe_ep_ops of the gloo sleep run: start shown as ms after the table's first start, dur in ms, and the note
    gives t0 as the trace wrote it."""
    text = render_markdown(sleep_report)
    head, _numeric, rows = _md_tables(text)["moe_ep_ops"]
    table = sleep_report.tables["moe_ep_ops"]
    origin = table["start_us"].min()
    assert origin > 5e12  # the trace's clock: epoch-like µs
    first = dict(zip(head, rows[0], strict=True))
    assert first["start (ms from t0)"] == fmt_ms(table["start_us"][0] - origin)
    assert first["dur (ms)"] == fmt_ms(table["dur_us"][0])
    assert float(first["start (ms from t0)"]) < 1000  # within the capture's seconds, not 5.78e12
    assert f"start: ms from t0 = {origin:,.1f} µs on the trace's clock" in text


def test_shares_read_as_percentages(sleep_report):
    head, _numeric, rows = _md_tables(render_markdown(sleep_report))["moe_parts"]
    share = sleep_report.tables["moe_parts"]["share"]
    cells = [row[head.index("share")] for row in rows]
    assert cells == [f"{100 * value:.1f}%" for value in share.head(len(rows))]
    assert head[head.index("share") - 1] == "time (ms)"


@pytest.mark.parametrize("which", ["qwen3", "sleep"])
def test_no_raw_numbers_in_any_generic_table(which, qwen3_report, sleep_report):
    """Every generic table of a real report: no header with a raw unit suffix, no numeric cell of 13+ digits or
    of more than 3 decimals, every share column in %."""
    report = qwen3_report if which == "qwen3" else sleep_report
    tables = _md_tables(render_markdown(report))
    assert len(tables) >= 10
    for name, (head, numeric, rows) in tables.items():
        assert not [h for h in head if h.endswith(("_us", "_ms", "_share"))], name
        for row in rows:
            for label, is_number, value in zip(head, numeric, row, strict=True):
                if not is_number or value == "—":
                    continue
                assert not re.search(r"\d{13}", value.replace(",", "")), (name, label, value)
                assert not re.search(r"\.\d{4,}$", value) or abs(float(value.replace(",", ""))) < 0.01, (name, value)
                if label == "share" or label.endswith(" share"):
                    assert value.endswith("%"), (name, label, value)


def test_html_and_markdown_print_the_same_cells(qwen3_report):
    """The shared helper: the communication table's first rows read the same in both text reports."""
    _head, _numeric, rows = _md_tables(render_markdown(qwen3_report))["communication"]
    table = qwen3_report.tables["communication"]
    view = table_view("communication", table, max_rows=len(rows), whole=table)
    assert [[cell["t"] for cell in row] for row in view["rows"]][:3] == [
        [value.replace("\\", "") for value in row] for row in rows[:3]
    ]
    labels = [column["label"] for column in view["columns"]]
    assert "start (ms from t0)" in labels and "elapse (ms)" in labels
