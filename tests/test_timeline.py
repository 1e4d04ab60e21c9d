"""The timeline of one step, on real data: Qwen3 (a slow pipeline stage, ranks 2 and 3), DLRM (rank 7 arrives last
at the collectives) and a 64-rank synthetic job with a host-gap straggler on rank 37. The figure is checked
against the report's own tables (where each block sits, what waits for whom), the cause's lanes and windows are
marked, the page embeds the same figure, and the browser draws it (a screenshot is kept in the test's tmp dir)."""

from __future__ import annotations

import dataclasses
import json
import re

import polars as pl
import pytest
from conftest import QWEN3, TORCH
from test_browser import Page, _html, browser  # noqa: F401  (browser: the Chromium fixture)

import profan
from profan import figures
from profan.render.html import build_html

DLRM = TORCH / "dlrm_v100_8rank"


@pytest.fixture(scope="module")
def qwen3():
    return profan.analyze(QWEN3)


@pytest.fixture(scope="module")
def dlrm():
    return profan.analyze(DLRM)


@pytest.fixture(scope="module")
def synth64(tmp_path_factory):
    from profan.synth import generate

    out = tmp_path_factory.mktemp("synth64")
    truth = generate(out, ranks=64, straggler_rank=37, straggler_kind="host_gap")
    assert truth["straggler"]["rank"] == 37
    return profan.analyze(out)


def _bars(fig) -> dict[str, list[tuple[str, float, float, list]]]:
    """Bar traces by name: (lane, start ms, length ms, customdata) per bar."""
    out = {}
    for t in fig.data:
        if t.type == "bar":
            out[t.name] = list(zip(t.y, t.base, t.x, t.customdata, strict=True))
    return out


def _shapes(fig, name: str) -> list:
    return [s for s in fig.layout.shapes if s.name == name]


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(round(a, 6), round(b, 6)) for a, b in out]


# ------------------------------------------------------------------------------------------ Qwen3


def test_qwen3_slow_stage_lanes_are_marked(qwen3):
    fig = figures.timeline(qwen3)
    meta = fig.layout.meta
    assert (meta["step"], meta["why"], meta["cause"]) == (13, "the step of C1", "C1")
    assert meta["cause_ranks"] == [2, 3] and meta["ranks"] == [0, 1, 2, 3]
    lanes = meta["lanes"]
    assert lanes == [
        "rank 0",
        "rank 0 · comm",
        "rank 1",
        "rank 1 · comm",
        "rank 2 · C1",
        "rank 2 · comm",
        "rank 3 · C1",
        "rank 3 · comm",
    ]
    for rank in (2, 3):
        (band,) = _shapes(fig, f"C1 rank {rank}")
        assert (band.y0, band.y1) == (lanes.index(f"rank {rank} · C1") - 0.5, lanes.index(f"rank {rank} · comm") + 0.5)
        assert (band.xref, band.x0, band.x1) == ("paper", 0, 1)
    assert not _shapes(fig, "C1 rank 0") and not _shapes(fig, "C1 rank 1")
    ticks = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext, strict=True))
    assert ticks["rank 2 · C1"] == f'<span style="color:{figures.HIGHLIGHT}"><b>rank 2 · C1</b></span>'
    assert ticks["rank 0"] == "rank 0"
    assert [a.text for a in fig.layout.annotations] == ["<b>C1</b>", "<b>C1</b>"]


def test_qwen3_split_lanes_are_the_step_cost_rows(qwen3):
    """The upper lane of each rank holds exactly step_cost's compute, exposed transfer, exposed waiting and idle
    time, end to end from x = 0 (communication.json has no step start), each citing its step_trace_time.csv line."""
    bars = _bars(figures.timeline(qwen3))
    cost = qwen3.tables["step_cost"].filter(pl.col("step") == 13)
    parts = {"Compute": "compute_us", "Exposed transfer": "exposed_transfer_us", "Exposed waiting": "exposed_wait_us"}
    parts["Idle"] = "idle_us"
    for rec in cost.iter_rows(named=True):
        lane = f"rank {rec['rank']}" + (" · C1" if rec["rank"] in (2, 3) else "")
        segs = [(name, *b) for name in parts for b in bars[name] if b[0] == lane]
        assert [s[0] for s in segs] == list(parts)
        for (name, _, start, length, cd), nxt in zip(segs, [*segs[1:], None], strict=True):
            assert length == pytest.approx(rec[parts[name]] / 1000)
            assert cd[1] == f"{rec['file']}:{rec['line']}"
            if nxt:
                assert nxt[2] == pytest.approx(start + length)
        assert segs[0][2] == 0.0
    # rank 2 computes 1.73x rank 0: the lane says so
    compute = {b[0]: b[2] for b in bars["Compute"]}
    assert compute["rank 2 · C1"] / compute["rank 0"] == pytest.approx(400448.26 / 231290.1, rel=1e-6)


def test_qwen3_collectives_sit_where_communication_json_puts_them(qwen3):
    """Each op of communication.json is one block on its rank's comm lane at its start (ms from the step's first
    op), its length the op's elapsed time, split where the last rank arrives; rank 0's wait for stage 1 in the
    PP send/receive is the profiler's own Wait Time to within 0.5 ms."""
    fig = figures.timeline(qwen3)
    bars = _bars(fig)
    ops = qwen3.tables["communication"].filter(pl.col("step") == 13)
    t0 = ops["start_us"].min()
    blocks: dict[tuple[int, str], float] = {}
    for name in ("Collective: waiting for the last rank", "Collective"):
        for lane, start, length, cd in bars[name]:
            rank = int(re.match(r"rank (\d+) · comm", lane).group(1))
            pointer = cd[4].split(" ", 1)[1]
            blocks[(rank, pointer)] = blocks.get((rank, pointer), 0.0) + length
            if name != "Collective":
                continue
            op = ops.filter((pl.col("rank") == rank) & (pl.col("pointer") == pointer)).row(0, named=True)
            assert start + length == pytest.approx((op["start_us"] - t0) / 1000 + op["elapse_ms"], abs=1e-6)
    assert len(blocks) == ops.height == 76
    for rec in ops.iter_rows(named=True):
        assert blocks[(rec["rank"], rec["pointer"])] == pytest.approx(rec["elapse_ms"], abs=1e-6)
    (wait,) = [
        b
        for b in bars["Collective: waiting for the last rank"]
        if b[0] == "rank 0 · comm" and "hcom_batchSendRecv__128_4_1@" in b[3][4]
    ]
    recorded = ops.filter((pl.col("rank") == 0) & pl.col("op_name").str.contains("128_4_1"))["wait_ms"].item()
    assert wait[2] == pytest.approx(recorded, abs=0.5) and wait[2] > 150
    said = re.fullmatch(r"waits ([\d.]+) ms for rank 2 to arrive", wait[3][3])
    assert said and float(said.group(1)) == pytest.approx(wait[2], abs=0.001)
    assert wait[3][-1] == "C1"  # C1 cites this op: a click opens C1


def test_qwen3_windows_are_the_cited_waits(qwen3):
    """The dotted windows: for each communication.json op C1 cites, from the first member rank's start to the last
    one's — the time a stage waits for the other — overlapping spans merged."""
    fig = figures.timeline(qwen3)
    ops = qwen3.tables["communication"].filter(pl.col("step") == 13)
    t0 = ops["start_us"].min()
    cited = {p for ev in qwen3.causes[0].evidence if ev.file.endswith("communication.json") for p in ev.pointers}
    assert len(cited) == 6
    spans = []
    for (_ptr,), g in ops.filter(pl.col("pointer").is_in(list(cited))).group_by("pointer"):
        both = ops.filter(pl.col("pointer") == g["pointer"][0])  # the op on every rank that has it
        assert both.height == 2  # a PP send/receive: two ranks
        spans.append(((both["start_us"].min() - t0) / 1000, (both["start_us"].max() - t0) / 1000))
    want = _union(spans)
    assert fig.layout.meta["windows"] == [list(w) for w in want]
    drawn = [(s.x0, s.x1) for s in _shapes(fig, "C1 window")]
    assert drawn == want and len(want) == 3
    assert all(s.yref == "paper" and (s.y0, s.y1) == (0, 1) for s in _shapes(fig, "C1 window"))
    assert want[1][1] - want[1][0] > 150  # stage 0 waits ~158 ms in the second send/receive


def test_collectives_are_linked_across_ranks(qwen3):
    """One line per collective joins its arrivals on each rank's comm lane; C1's in its colour."""
    fig = figures.timeline(qwen3)
    links = {t.name: t for t in fig.data if t.type == "scatter"}
    hot = links["Same collective, arrivals (cited by the cause)"]
    assert hot.line.color == figures.HIGHLIGHT
    groups, cur = [], []
    for x, y in zip(hot.x, hot.y, strict=True):
        if x is None:
            groups.append(cur)
            cur = []
        else:
            cur.append((y, x))
    assert len(groups) == 6  # the three cited PP send/receives of each of the two stage pairs
    assert sorted(y for y, _ in groups[0]) in (["rank 0 · comm", "rank 2 · comm"], ["rank 1 · comm", "rank 3 · comm"])


def test_the_page_embeds_the_same_figure(qwen3):
    """One way to build each chart: the page's timeline data is the figure a notebook gets."""
    doc = build_html(qwen3)
    m = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', doc, flags=re.S)
    spec = json.loads(m.group(1))["timeline"]
    fig = json.loads(figures.timeline(qwen3).to_json())
    assert spec["data"] == fig["data"] and spec["layout"] == fig["layout"]
    assert spec["id"] == "chart-timeline" and spec["note"] == fig["layout"]["meta"]["note"]
    assert '<section id="timeline" class="card">' in doc and '<a href="#timeline">Timeline</a>' in doc
    for name in ("breakdown", "rank_comparison", "boundness", "comm_bandwidth"):
        made = json.loads(figures.FIGURES[name](qwen3).to_json())
        assert json.loads(m.group(1))[name]["data"] == made["data"]


def test_trace_text_is_escaped(qwen3):
    """An op name from a trace is text in the figure, never markup, in the labels and in the hover."""
    ops = qwen3.tables["communication"]
    evil = "<img src=x onerror=alert(1)>"
    bad = ops.with_columns(
        pl.when(pl.col("op_name") == "hcom_allReduce__612_4_1").then(pl.lit(evil)).otherwise("op_name").alias("op_name")
    )
    report = dataclasses.replace(qwen3, tables={**qwen3.tables, "communication": bad})
    text = figures.timeline(report).to_json()
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<img src=x" not in build_html(report).split('id="chart-data">', 1)[1].split("</script>", 1)[0]


def test_step_choice_and_missing_steps(qwen3):
    assert figures.timeline(qwen3, step=13).layout.meta["why"] == "step 13"
    with pytest.raises(ValueError, match="step 99"):
        figures.timeline(qwen3, step=99)
    from profan.compare import compare

    assert figures.timeline(compare(QWEN3, None, ranks=(0, 2))) is None


# ------------------------------------------------------------------------------------------ DLRM


def test_dlrm_straggler_lanes_and_windows(dlrm):
    """Rank 7 starts step 10 7.6 ms after rank 1 and arrives last at the first five collectives: its lanes are
    shaded, its step lane starts at its trace step start, and the first window runs from the earliest arrival at
    the first SendRecv to rank 7's."""
    fig = figures.timeline(dlrm)
    meta = fig.layout.meta
    assert (meta["step"], meta["cause"], meta["cause_ranks"]) == (10, "C1", [7])
    assert meta["lanes"][-2:] == ["rank 7 · C1", "rank 7 · comm"] and len(meta["lanes"]) == 16
    (band,) = _shapes(fig, "C1 rank 7")
    assert (band.y0, band.y1) == (13.5, 15.5)
    steps = dlrm.tables["trace_steps"].filter((pl.col("scope") == "step") & (pl.col("step") == 10))
    t0 = steps["start_us"].min()
    start7 = (steps.filter(pl.col("rank") == 7)["start_us"].item() - t0) / 1000
    first = next(b for b in _bars(fig)["Compute"] if b[0] == "rank 7 · C1")
    assert first[1] == pytest.approx(start7) and start7 > 7.5
    kernels = dlrm.tables["trace_communication"].filter(pl.col("source") == "kernel")
    seq0 = kernels.sort("ts_us").group_by("rank", maintain_order=True).first()
    want = ((seq0["ts_us"].min() - t0) / 1000, (seq0.filter(pl.col("rank") == 7)["ts_us"].item() - t0) / 1000)
    assert meta["windows"][0] == pytest.approx(list(want))
    assert len(_shapes(fig, "C1 window")) == len(meta["windows"]) == 5


def test_dlrm_last_arrivals_agree_with_collective_arrivals(dlrm):
    """The alignment the lanes use is the straggler analysis's: at every aligned collective the rank that arrives
    last is collective_arrivals' last_rank, and the others' waiting bars end at its arrival."""
    fig = figures.timeline(dlrm)
    arrivals = dlrm.tables["collective_arrivals"].sort("seq")
    waits = _bars(fig)["Collective: waiting for the last rank"]
    ends = {}
    for _lane, start, length, cd in waits:
        last = int(re.search(r"for rank (\d+) to arrive", cd[3]).group(1))
        ends.setdefault(round(start + length, 6), set()).add(last)
    assert all(len(v) == 1 for v in ends.values())
    assert sorted({next(iter(v)) for v in ends.values()}) == sorted(set(arrivals["last_rank"].to_list()))
    rows = figures._comm_rows(dlrm, 10, figures._step_windows(dlrm, 10))
    last = rows.group_by("seq").agg(pl.col("rank").sort_by("start_us").last()).sort("seq")
    assert last["rank"].to_list() == arrivals["last_rank"].to_list() == [7, 7, 7, 7, 7, 5, 5, 4]
    rest = _bars(fig)["Collective"]
    hover = next(b[3] for b in rest if b[0] == "rank 7 · comm" and b[3][3] == "the last to arrive")
    assert re.fullmatch(r"worker7_step_12\.\d+\.pt\.trace\.json event \d+", hover[4])


def test_aggregated_lanes_keep_the_cause_and_representatives(dlrm):
    """Above max_ranks, the lanes are the cause's rank, its comparison rank and the shortest/median/longest step,
    under one lane spanning every rank's arrivals."""
    fig = figures.timeline(dlrm, max_ranks=4)
    meta = fig.layout.meta
    cost = dlrm.tables["step_cost"].with_columns(
        (pl.col("compute_us") + pl.col("exposed_unsplit_us") + pl.col("idle_us")).alias("t")
    )
    order = cost.sort("t", "rank")["rank"].to_list()
    assert meta["ranks"] == sorted({7, 0, order[0], order[len(order) // 2], order[-1]})
    assert meta["lanes"][0] == "all 8 ranks · arrivals" and meta["total_ranks"] == 8
    assert [lane for lane in meta["lanes"] if lane.startswith("rank 7 · C1")] and "rank 0 · typical" in meta["lanes"]
    spread = _bars(fig)["Arrival spread over all ranks"]
    assert len(spread) == 8  # one bar per aligned collective
    widest = max(spread, key=lambda b: b[2])
    assert widest[3][1].startswith("8 ranks; rank ") and ", rank 7 last, " in widest[3][1]


# ------------------------------------------------------------------------------------------ 64 ranks


def test_64_ranks_stay_readable(synth64):
    fig = figures.timeline(synth64)
    meta = fig.layout.meta
    assert meta["total_ranks"] == 64 and meta["cause"] == "C1" and meta["cause_ranks"] == [37]
    assert 37 in meta["ranks"] and len(meta["ranks"]) <= figures.CAUSE_LANES + 4
    assert len(meta["lanes"]) == 2 * len(meta["ranks"]) + 1
    assert meta["lanes"][0] == "all 64 ranks · arrivals"
    (band,) = _shapes(fig, "C1 rank 37")
    assert meta["lanes"][int(band.y0 + 0.5)] == "rank 37 · C1"
    # the injected 5 ms host gap: rank 37 reaches one all-gather 5 ms after the others, who wait for it
    ops = synth64.tables["communication"].filter(pl.col("step") == 1)
    gather = ops.filter(pl.col("op_name") == "hcom_allGather__812_7_1")
    t0 = synth64.tables["trace_steps"].filter((pl.col("scope") == "step") & (pl.col("step") == 1))["start_us"].min()
    want = (
        (gather["start_us"].min() - t0) / 1000,
        (gather.filter(pl.col("rank") == 37)["start_us"].item() - t0) / 1000,
    )
    assert list(want) in [pytest.approx(w) for w in meta["windows"]]
    assert 4.9 < want[1] - want[0] < 5.1
    spread = _bars(fig)["Arrival spread over all ranks"]
    widest = max(spread, key=lambda b: b[2])
    assert widest[2] == pytest.approx(want[1] - want[0]) and "64 ranks; rank " in widest[3][1]
    assert ", rank 37 last, " in widest[3][1] and widest[3][-1] == "C1"
    # bounded: a few hundred bars, not 64 ranks' worth
    assert sum(len(t.x) for t in fig.data if t.type == "bar") < 600
    assert len(fig.to_json()) < 300_000


# ------------------------------------------------------------------------------------------ in the browser


def _widest_cited(fig, cause: str) -> tuple[int, int, float]:
    """(bar trace index among the bar traces, point index, length) of the widest block citing the cause."""
    best = (-1, -1, 0.0)
    for ti, t in enumerate(tr for tr in fig.data if tr.type == "bar"):
        for pi, (x, cd) in enumerate(zip(t.x, t.customdata, strict=True)):
            if cd[-1] == cause and x > best[2]:
                best = (ti, pi, x)
    return best


@pytest.mark.parametrize("name", ["qwen3", "dlrm", "synth64"])
def test_timeline_in_browser(browser, tmp_path, request, name):  # noqa: F811
    report = request.getfixturevalue(name)
    fig = figures.timeline(report)
    cause = fig.layout.meta["cause"]
    pg = Page(browser, _html(report, tmp_path, name))
    page = pg.page
    chart = page.locator("#chart-timeline")
    assert chart.get_attribute("data-rendered") == "1"
    bars = sum(len(t.x) for t in fig.data if t.type == "bar")
    assert chart.locator("g.trace.bars g.point path").count() == bars
    assert chart.locator(".shapelayer path").count() == len(fig.layout.shapes)
    # the cause's lanes: labelled in its colour, tagged with its id
    for rank in fig.layout.meta["cause_ranks"]:
        tick = chart.locator(".ytick text", has_text=f"rank {rank} · {cause}")
        assert tick.count() == 1
        assert tick.locator("tspan").first.evaluate("e => getComputedStyle(e).fill") == "rgb(122, 0, 25)"
    assert chart.locator(".annotation-text", has_text=cause).count() == len(fig.layout.meta["cause_ranks"])
    # hovering a block shows its source row; clicking it opens the cause that cites it
    ti, pi, _ = _widest_cited(fig, cause)
    page.eval_on_selector("#chart-timeline", "e => e.scrollIntoView({block: 'center'})")
    box = chart.locator("g.trace.bars").nth(ti).locator("g.point path").nth(pi).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.wait_for_timeout(200)
    hover = chart.locator(".hoverlayer").text_content()
    cd = [t for t in fig.data if t.type == "bar"][ti].customdata[pi]
    assert html_unescape(cd[-3]) in hover and f"click: {cause}" in hover  # the block's file and line / event
    shot = tmp_path / f"timeline-{name}.png"
    page.locator("#timeline").screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    page.mouse.click(x, y)
    page.wait_for_timeout(200)
    assert page.evaluate("window.location.hash") == f"#{cause}"
    assert page.eval_on_selector(f"#{cause}", "e => e.open") is True
    pg.requests = [u for u in pg.requests if not u.startswith(pg.url + "#")]
    pg.assert_clean()
    pg.close()


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)
