"""The HTML report on real data: self-contained, every finding with its cited rows read back from the files, charts
fed with the report's own numbers, and nothing from a trace able to become markup."""

from __future__ import annotations

import base64
import csv
import gzip
import html
import json
import re

import pytest
from conftest import ASCEND, QWEN3, ROOT, analysed, raw_rows

import profan
from profan.render.evidence_rows import KEY_SEP
from profan.render.html import ROW_BUDGET, build_html, item_caps
from profan.sources.common.readback import load_json_document, read_back, resolve_pointer

ALEXNET2 = ASCEND / "msinsight-alexnet-2rank-2025" / "level2"


@pytest.fixture(scope="module")
def qwen_html(qwen3_report) -> str:
    return build_html(qwen3_report)


def _block(doc: str, element_id: str) -> str:
    """The markup of the evidence item / element with this id (up to the next evidence item or finding)."""
    start = doc.index(f'id="{element_id}"')
    ends = [i for i in (doc.find('<div class="evidence"', start + 1), doc.find("<details", start + 1)) if i > 0]
    return doc[start : min(ends) if ends else len(doc)]


def _table_rows(block: str) -> list[list[str]]:
    """Rows of the evidence table: the locator header cell, then the data cells, unescaped."""
    body = block[block.index("<tbody>") : block.index("</tbody>")]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S):
        loc = re.findall(r'<th class="loc" scope="row">(.*?)</th>', tr, flags=re.S)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)
        rows.append([html.unescape(x) for x in loc + cells])
    return rows


def _columns(block: str) -> list[str]:
    head = block[block.index("<thead>") : block.index("</thead>")]
    return [html.unescape(x) for x in re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", head, flags=re.S)]


def _plotly_inlined(doc: str) -> str:
    """The Plotly library the page carries, unpacked as the page's script unpacks it (base64, then gzip)."""
    m = re.search(
        r'<script type="application/octet-stream" id="plotly-src" data-encoding="gzip\+base64">(.*?)</script>', doc
    )
    return gzip.decompress(base64.b64decode(m.group(1))).decode("utf-8")


def test_self_contained_no_external_references(qwen_html):
    from plotly.offline import get_plotlyjs

    assert qwen_html.startswith("<!DOCTYPE html>")
    assert _plotly_inlined(qwen_html) == get_plotlyjs()  # the library itself is inlined, once, whole
    assert qwen_html.count('id="plotly-src"') == 1
    assert not re.search(r"<script[^>]+src=", qwen_html)
    assert not re.search(r"<link[^>]+rel=\"stylesheet\"", qwen_html)
    assert [m for m in re.findall(r"<link[^>]*>", qwen_html)] == ['<link rel="icon" href="data:,">']
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', qwen_html).group(1)
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp
    assert re.search(r"script-src 'unsafe-inline' blob:;", csp)  # the page's own blob of Plotly, nothing fetched
    assert len(qwen_html.encode()) < 3_000_000  # Plotly packed: 1.9 MB of the page


def test_every_finding_has_an_anchor_and_its_evidence(qwen3_report, qwen_html):
    for f in qwen3_report.findings:
        assert f'<details class="finding sev-{f.severity}" id="{f.id}">' in qwen_html
        for i, _ev in enumerate(f.evidence, start=1):
            assert f'id="{f.id}-e{i}"' in qwen_html


def test_csv_evidence_rows_are_the_file_rows_under_the_header(qwen3_report, qwen_html):
    """F1 cites step_trace_time.csv line 2: the table shows that line split by the csv module under the header."""
    f = qwen3_report.findings[0]
    ev = f.evidence[0]
    assert ev.kind == "lines"
    block = _block(qwen_html, f"{f.id}-e1")
    header, rows = raw_rows(QWEN3 / ev.file)
    assert _columns(block) == ["line", *header]
    got = _table_rows(block)
    assert [r[0] for r in got] == [f"line {n}" for n in ev.lines]
    for n, row, (loc, text) in zip(ev.lines, got, read_back(QWEN3, ev), strict=True):
        assert row[1:] == [rows[n][h] for h in header]
        assert (loc, next(csv.reader([text]))) == (row[0], row[1:])


def test_truncated_evidence_says_how_many_rows(qwen3_report, qwen_html):
    caps = item_caps(qwen3_report.findings, ROW_BUDGET)
    checked = 0
    for f in qwen3_report.findings:
        for i, ev in enumerate(f.evidence, start=1):
            block = _block(qwen_html, f"{f.id}-e{i}")
            shown = len(_table_rows(block))
            assert shown == caps[(f.id, i)] == min(len(ev.locators), 20)
            if ev.row_count > shown:
                checked += 1
                assert f"Showing {shown} of {ev.row_count:,} rows" in block
                assert re.search(rf"profan evidence \S+ {re.escape(f.id)}</code>", block), block[-300:]
    assert checked >= 3  # qwen3 has aggregate findings over more rows than are cited


def test_json_pointer_evidence_shows_the_object_at_the_pointer(qwen3_report, qwen_html):
    f = next(f for f in qwen3_report.findings if f.evidence[0].kind == "pointers")
    ev = f.evidence[0]
    block = _block(qwen_html, f"{f.id}-e1")
    cols = _columns(block)
    rows = _table_rows(block)
    doc = load_json_document(QWEN3 / ev.file)
    elapse = "Communication Time Info" + KEY_SEP + "Elapse Time(ms)"
    assert elapse in cols
    for ptr, row in zip(ev.pointers, rows, strict=True):
        assert row[0] == ptr
        want = resolve_pointer(doc, ptr)["Communication Time Info"]["Elapse Time(ms)"]
        assert float(row[cols.index(elapse)]) == want


def _charts(doc: str) -> dict:
    m = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', doc, flags=re.S)
    return json.loads(m.group(1))


def test_charts_carry_the_report_tables(qwen3_report, qwen_html):
    charts = _charts(qwen_html)
    bd = qwen3_report.tables["breakdown"]
    traces = {t["name"]: t for t in charts["breakdown"]["data"]}
    assert set(traces) == set(bd["bucket"].to_list())
    for rec in bd.iter_rows(named=True):
        t = traces[rec["bucket"]]
        y = dict(zip(t["x"], t["y"], strict=True))[f"rank {rec['rank']}"]
        assert y == pytest.approx(rec["time_us"] / 1000)
    steps = qwen3_report.tables["steps"]
    comp = next(t for t in charts["rank_comparison"]["data"] if t["name"] == "Computing")
    assert comp["y"] == pytest.approx([v / 1000 for v in steps["computing_us"].to_list()])


def test_slow_stage_named_by_a_finding_is_highlighted(qwen3_report, qwen_html):
    stage = next(f for f in qwen3_report.findings if f.check == "pipeline-stage-imbalance")
    assert stage.metrics["slow_ranks"] == [2, 3]
    chart = _charts(qwen_html)["rank_comparison"]
    widths = chart["data"][0]["marker"]["line"]["width"]
    hot = {x for x, w in zip(chart["data"][0]["x"], widths, strict=True) if w > 0}
    assert hot == {"rank 2", "rank 3"}
    assert [a["name"] for a in chart["layout"]["annotations"]] == [stage.id, stage.id]
    for rank in (2, 3):
        assert re.search(
            rf'<strong>Rank {rank}</strong> is named as holding the job back by\s*<a href="#{stage.id}">', qwen_html
        )


def test_summary_lists_warnings_and_what_was_read(qwen3_report, qwen_html):
    for w in qwen3_report.warnings:
        assert f"<li>{html.escape(w)}</li>" in qwen_html
    for r in qwen3_report.source["ranks"]:
        assert html.escape(r["path"]) in qwen_html
    assert "kernel_details 2,463" in qwen_html  # rows read on rank 0


def test_budget_caps_evidence_rows_uniformly(qwen3_report):
    """Each shown table costs its rows plus a header row; one cap for all items while it fits the budget."""
    items = [(f.id, i, len(ev.locators)) for f in qwen3_report.findings for i, ev in enumerate(f.evidence, start=1)]
    budget = sum(min(n, 3) + 1 for _, _, n in items)
    caps = item_caps(qwen3_report.findings, budget)
    cap = max(caps.values())
    assert cap >= 3
    assert all(caps[(fid, i)] == min(n, cap) for fid, i, n in items)
    assert sum(c + 1 for c in caps.values() if c) <= budget
    tiny = item_caps(qwen3_report.findings, 7)  # room for three one-row tables, in report order
    assert [tiny[(fid, i)] for fid, i, _ in items[:4]] == [1, 1, 1, 0]
    assert sum(tiny.values()) == 3


def test_alexnet_level2_renders(tmp_path):
    report = analysed(ALEXNET2)
    out = tmp_path / "r.html"
    from profan.render import render

    render(report, "html", out)
    doc = out.read_text(encoding="utf-8")
    for f in report.findings:
        assert f'id="{f.id}"' in doc
    assert "breakdown" in _charts(doc)


def test_missing_data_is_said_not_crashed(qwen3_report, tmp_path):
    """A report rendered where the data no longer is: causes and findings stay, each evidence item (the causes'
    included) says it cannot be read."""
    from profan.model.report import from_dict

    d = qwen3_report.to_dict()
    d["source"] = {**d["source"], "root": str(tmp_path / "gone"), "root_abs": str(tmp_path / "gone")}
    doc = build_html(from_dict(d))
    owners = [*qwen3_report.causes, *qwen3_report.findings]
    assert doc.count("could not read") == sum(len(x.evidence) for x in owners)
    assert all(f'id="{c.id}"' in doc for c in qwen3_report.causes)


def test_trace_event_evidence_shows_the_cited_events(tmp_path):
    """Kineto traces: each cited event index is shown as that event of traceEvents, flattened into columns."""
    from profan.sources.common.readback import trace_events

    data = ROOT / "fixtures" / "torch" / "dlrm_v100_8rank"
    report = profan.analyze(data)
    doc = build_html(report)
    f = next(f for f in report.findings if f.evidence[0].kind == "events")
    ev = f.evidence[0]
    block = _block(doc, f"{f.id}-e1")
    cols, rows = _columns(block), _table_rows(block)
    events = trace_events(load_json_document(data / ev.file))
    assert len(rows) == min(len(ev.events), 20)
    for idx, row in zip(ev.events, rows, strict=False):
        e = events[idx]
        assert row[0] == f"event {idx}"
        assert row[cols.index("name")] == (e["name"] if len(e["name"]) <= 240 else e["name"][:239] + "…")
        assert row[cols.index("dur")] == json.dumps(e["dur"])
        assert row[cols.index("ts")] == json.dumps(e["ts"])


def test_compare_report_renders_both_sides(tmp_path):
    """`profan compare` results are a Report too: the same renderer shows both sides and the bucket deltas."""
    from profan.comparison.compare import compare

    report = compare(QWEN3, None, ranks=(0, 2))
    doc = build_html(report)
    assert "profan compare — " in doc
    buckets = report.tables["compare_buckets"]
    chart = _charts(doc)["compare_buckets"]
    a, b = chart["data"]
    assert a["x"] == buckets["bucket"].to_list()
    assert a["y"] == pytest.approx([v / 1000 for v in buckets["a_time_us"].to_list()])
    assert b["y"] == pytest.approx([v / 1000 for v in buckets["b_time_us"].to_list()])
    for f in report.findings:
        assert f'id="{f.id}-e1"' in doc


def test_chart_bars_link_to_the_findings_citing_their_rows(qwen3_report, qwen_html):
    """A bar of the rank chart leads to the first finding citing its step_trace_time.csv line (itself or through a
    member of its group); a breakdown bar to the step-breakdown finding whose member is its rank and step."""
    charts = _charts(qwen_html)
    steps = qwen3_report.tables["steps"]
    comp = charts["rank_comparison"]["data"][0]
    for rec, cd in zip(steps.iter_rows(named=True), comp["customdata"], strict=True):
        citing = [
            f.id
            for f in qwen3_report.findings
            if any(ev.file == rec["file"] and rec["src_line"] in ev.lines for m in (f, *f.members) for ev in m.evidence)
        ]
        assert citing and cd[-1] == citing[0]
        assert cd[0] == f"{rec['file']}:{rec['src_line']}"
    (group,) = [f for f in qwen3_report.findings if f.check == "step-breakdown"]
    by_rank = {(m.rank, m.step): group.id for m in group.members}
    assert set(by_rank) == {(0, 13), (2, 13)}  # one member per rank with kernels
    for trace in charts["breakdown"]["data"]:
        for x, cd in zip(trace["x"], trace["customdata"], strict=True):
            rank = int(x.split()[-1])
            assert cd[-1] == by_rank.get((rank, 13), "")
