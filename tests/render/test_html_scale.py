"""The HTML report of a 64-rank job (profan.synth, a compute straggler on rank 33) stays small and readable: the
per-rank charts are heatmaps with a column for every rank and the straggler labelled, the per-rank tables list the
ranks the verdict names under a summary across all ranks, and every cut says where the rest is. A small job's page
is unchanged (tests/render/test_html.py)."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import profan
from profan.figures import charts
from profan.render.html import (
    SCALE_ITEMS,
    SCALE_MEMBERS,
    SCALE_ROW_BUDGET,
    build_html,
    column_summary,
)

pytestmark = pytest.mark.slow  # large generated inputs or many examples: left out of the fast loop

STRAGGLER = 33


@pytest.fixture(scope="module")
def synth64(tmp_path_factory):
    from profan.synth import generate

    out = tmp_path_factory.mktemp("scale64")
    truth = generate(out, ranks=64, tp=8, layers=1, steps=2, seed=1, trace=False, straggler_rank=STRAGGLER)
    assert truth["straggler"]["rank"] == STRAGGLER
    return profan.analyze(out)


@pytest.fixture(scope="module")
def page64(synth64) -> str:
    return build_html(synth64)


def _charts(doc: str) -> dict:
    m = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', doc, flags=re.S)
    return json.loads(m.group(1))


def _section(doc: str, element_id: str) -> str:
    start = doc.index(f'<section id="{element_id}"')
    return doc[start : doc.index("</section>", start)]


def test_the_page_stays_small(synth64, page64):
    assert synth64.causes[0].ranks == (STRAGGLER,)
    assert len(page64.encode()) < 4_000_000  # the target is 8 MB; before, 7.7 MB at 64 ranks
    assert page64.count("<tr") < 1_500  # elements: was 93,000 in the browser, most of them table rows


def test_rank_comparison_is_a_heatmap_of_every_rank(synth64, page64):
    """One column per rank, a row per part and step, coloured by the deviation from the median rank: the
    straggler computes most and waits least, and is labelled with the cause."""
    chart = _charts(page64)["rank_comparison"]
    (heat,) = chart["data"]
    assert heat["type"] == "heatmap" and heat["x"] == list(range(64))
    steps = synth64.tables["steps"]
    for step in (1, 2):
        row = heat["y"].index(f"Computing · step {step}")
        ms = dict(zip(heat["x"], heat["customdata"][row], strict=True))
        want = steps.filter(pl.col("step") == step).select("rank", pl.col("computing_us") / 1000).rows()
        assert ms == {r: pytest.approx(v, abs=1e-3) for r, v in want}
        z = heat["z"][row]
        assert max(range(64), key=lambda r: z[r]) == STRAGGLER and z[STRAGGLER] > 0.5  # +130 %: red
        median = sorted(v for _, v in want)[31:33]
        assert z[0] == pytest.approx((ms[0] - sum(median) / 2) / (sum(median) / 2), abs=1e-3)
        wait = heat["z"][heat["y"].index(f"Communication (not overlapped) · step {step}")]
        assert min(range(64), key=lambda r: wait[r]) == STRAGGLER  # the others wait for it
    (label,) = chart["layout"]["annotations"]
    assert label["text"] == f"<b>r{STRAGGLER} · C1</b>" and label["name"] == "C1"
    assert chart["layout"]["meta"]["rank_links"]  # a click on a column opens the finding citing its rows


def test_breakdown_is_a_heatmap_largest_bucket_first(synth64, page64):
    (heat,) = _charts(page64)["breakdown"]["data"]
    bd = synth64.tables["breakdown"]
    assert heat["type"] == "heatmap" and heat["x"] == sorted(bd["rank"].unique().to_list())
    first = bd.group_by("bucket").agg(pl.col("time_us").sum()).sort("time_us", descending=True)["bucket"][0]
    assert heat["y"][:2] == [f"{first} · step 1", f"{first} · step 2"]
    row = heat["y"].index("attention · step 1")  # the straggler's extra FlashAttentionScore
    assert max(range(len(heat["x"])), key=lambda i: heat["z"][row][i]) == heat["x"].index(STRAGGLER)


def test_per_rank_tables_list_the_named_ranks_under_a_summary(synth64, page64):
    steps = _section(page64, "ranks")
    assert "128 rows over 64 ranks; listed: the 6 rows of ranks 0, 33" in steps
    listed = re.findall(r"<tbody>(.*?)</tbody>", steps, flags=re.S)[-1]
    assert sorted({int(r) for r in re.findall(r'<tr><td class="num">(\d+)</td>', listed)}) == [0, STRAGGLER, 41]
    # the summary across ranks names the straggler as the rank computing most
    row = re.search(r"<td>computing \(ms\)</td>(.*?)</tr>", steps, flags=re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    most = synth64.tables["steps"]["computing_us"].max() / 1000
    assert cells[3] == f"{most:,.2f}" and cells[4] == f"rank {STRAGGLER} · step 1"
    assert "--tables OUT_DIR (OUT_DIR/steps.parquet)" in steps


def test_group_findings_list_their_worst_members_and_the_named_ranks(synth64, page64):
    big = next(f for f in synth64.findings if len(f.members) > SCALE_MEMBERS + 10)
    block = page64[page64.index(f'id="{big.id}"') :]
    block = block[: block.index("</details>")]
    listed = re.findall(rf'<tr id="({re.escape(big.id)}\.\d+)">', block)
    want = [m.id for i, m in enumerate(big.members) if i < SCALE_MEMBERS or {0, STRAGGLER, 41} & set(m.ranks)]
    assert listed == want
    assert f"Showing {len(want)} of {len(big.members)} members: the {SCALE_MEMBERS} worst" in block


def test_evidence_is_bounded_and_says_where_the_rest_is(synth64, page64):
    rows = page64.count('<th class="loc" scope="row">')
    cited = sum(len(ev.locators) for f in [*synth64.causes, *synth64.findings] for ev in f.evidence)
    assert 0 < rows < cited and rows <= SCALE_ROW_BUDGET
    wide = next(f for f in synth64.findings if len(f.evidence) > SCALE_ITEMS + 4)  # one item per rank
    block = page64[page64.index(f'id="{wide.id}"') :]
    block = block[: block.index("</details>")]
    shown = len(re.findall(rf'<div class="evidence" id="{wide.id}-e\d+"', block))
    assert SCALE_ITEMS <= shown < len(wide.evidence)
    assert f"{len(wide.evidence) - shown:,} more sources" in block
    assert (
        f"data and {wide.id} (the command below) prints every cited row" in block
        and "profan evidence on this page" in block
    )


def test_column_summary_holds_min_median_max_and_their_ranks():
    df = pl.DataFrame({"rank": [0, 1, 2, 3], "step": [1, 1, 2, 2], "computing_us": [300.0, 900.0, 100.0, 400.0]})
    view = column_summary(df)
    (row,) = [[c["t"] for c in r] for r in view["rows"]]
    assert row == ["computing (ms)", "0.10", "rank 2 · step 2", "0.35", "0.90", "rank 1 · step 1"]


def test_a_crowded_bandwidth_chart_keeps_the_slowest_and_a_sample(synth64, monkeypatch):
    monkeypatch.setattr(charts, "SCATTER_POINTS", 200)
    fig = charts.bandwidth(synth64)
    rows = synth64.tables["comm_bandwidth"].filter(pl.col("bandwidth_gbps").is_not_null() & (pl.col("size_mb") > 0))
    drawn = sum(len(t.x) for t in fig.data)
    assert drawn < rows.height and f"{drawn:,} of {rows.height:,} transfers drawn" in fig.layout.meta["note"]
    for t in fig.data:  # each transport's slowest transfer is drawn
        slowest = rows.filter(pl.col("transport") == t.name)["bandwidth_gbps"].min()
        assert min(t.y) == slowest
