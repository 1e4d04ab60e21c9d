"""The timeline of one step, on real data: Qwen3 (a slow pipeline stage, ranks 2 and 3), DLRM (rank 7 arrives last
at the collectives) and a 64-rank synthetic job with a host-gap straggler on rank 37. The blocks in time (table
step_blocks) are checked against the raw files read here with csv and json — kernel_details.csv rows, Kineto GPU
events, trace_view.json Overlap Analysis lanes — by plain interval union; the figure against those and the
report's own tables (where each block sits, what waits for whom); the cause's lanes and windows are marked, the
page embeds the same figure, and the browser draws it (screenshots are kept in tests/_artifacts/)."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import re
import shutil

import polars as pl
import pytest
from conftest import QWEN3, TORCH, analysed, merged_runs
from test_browser import ARTIFACTS, Page, _html, browser  # noqa: F401  (browser: the Chromium fixture)

import profan
from profan import figures
from profan.figures import timeline_layout
from profan.ranks import rankmap
from profan.render.html import build_html
from profan.sources.common import intervals

DLRM = TORCH / "dlrm_v100_8rank"


@pytest.fixture(scope="module")
def qwen3():
    return analysed(QWEN3)


@pytest.fixture(scope="module")
def dlrm():
    """DLRM with its straggler cause (rank 7 arrives last) first: the timeline draws the first cause, and these
    tests are about the straggler, whatever else the diagnosis ranks above it."""
    report = analysed(DLRM)
    straggler = next(c for c in report.causes if c.check == "straggler")
    return dataclasses.replace(report, causes=[straggler, *(c for c in report.causes if c is not straggler)])


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
    return [(round(a, 6), round(b, 6)) for a, b in merged_runs(spans)]


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


def _read_csv(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _union(spans))


def _split(events: list[tuple[float, float, bool]], w0: float, w1: float) -> dict[str, float]:
    """Compute / exposed communication / idle of a window from (start, end, is_comm) events, by plain interval
    union: compute is covered by a compute event, exposed communication by communication only, idle by none."""
    clipped = [(max(a, w0), min(b, w1), c) for a, b, c in events if min(b, w1) > max(a, w0)]
    compute = _length([(a, b) for a, b, c in clipped if not c])
    busy = _length([(a, b) for a, b, _ in clipped])
    return {"compute": compute, "comm": busy - compute, "idle": (w1 - w0) - busy}


def _qwen3_kernels(rank: int) -> list[tuple[float, float, bool]]:
    """Rank ``rank``'s step-13 kernels of kernel_details.csv, read with the csv module: (start, end, is HCCL)."""
    path = QWEN3 / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    out = []
    for row in _read_csv(path):
        assert row["Step Id"] == "13"
        start, dur = float(row["Start Time(us)"].strip()), float(row["Duration(us)"])
        out.append((start, start + dur, row["Accelerator Core"] == "COMMUNICATION"))
    return out


def _lane(fig, lane: str) -> list[tuple[str, float, float, list]]:
    """The upper lane's bars (compute, exposed communication, idle): (part, start ms, length ms, customdata)."""
    parts = ("Compute", "Exposed communication", "Idle", "Exposed transfer", "Exposed waiting")
    bars = [(name, b[1], b[2], b[3]) for name, bs in _bars(fig).items() if name in parts for b in bs if b[0] == lane]
    return sorted(bars, key=lambda b: b[1])


def _assert_tiles(bars: list, w0_ms: float, w1_ms: float) -> None:
    """The bars follow each other in time with no gap and no overlap, from the window's start to its end."""
    assert bars[0][1] == pytest.approx(w0_ms, abs=1e-6)
    for prev, nxt in itertools.pairwise(bars):
        assert nxt[1] == pytest.approx(prev[1] + prev[2], abs=1e-6)
    assert bars[-1][1] + bars[-1][2] == pytest.approx(w1_ms, abs=1e-6)


def _assert_blocks(blocks: pl.DataFrame, want: dict[str, float], w0: float, w1: float) -> None:
    """One rank-step of table step_blocks: in time order, end to end over the window, bounded, and its parts'
    exact times the independent split ``want``."""
    assert 0 < blocks.height <= intervals.STEP_BLOCKS
    starts, ends = blocks["start_us"].to_list(), blocks["end_us"].to_list()
    assert starts == sorted(starts) and starts[0] == w0 and ends[-1] == w1
    assert starts[1:] == ends[:-1]  # contiguous: every block starts where the previous one ends
    lengths = blocks["compute_us"] + blocks["comm_us"] + blocks["idle_us"]
    assert (lengths - (blocks["end_us"] - blocks["start_us"])).abs().max() < 1e-6
    for part in ("compute", "comm", "idle"):
        assert blocks[f"{part}_us"].sum() == pytest.approx(want[part], abs=1e-6)
    single = blocks.filter(pl.col("pieces") == 1)  # an unmerged block is all one part
    whole = single.select(
        pl.max_horizontal("compute_us", "comm_us", "idle_us") - (pl.col("end_us") - pl.col("start_us"))
    )
    assert whole.to_series().abs().max() < 1e-6


def test_qwen3_blocks_are_the_kernel_rows_in_time(qwen3):
    """Without trace_view.json, rank 0's and rank 2's blocks come from kernel_details.csv: the window runs from
    the step's first kernel to the end of its last (exactly step_trace_time.csv's Stage), and the blocks hold
    the union of the kernel rows read here with the csv module — compute within 0.01 % of Computing."""
    blocks = qwen3.tables["step_blocks"]
    assert sorted(blocks["rank"].unique().to_list()) == [0, 2]  # ranks 1 and 3 have no kernel_details.csv
    for rank in (0, 2):
        rows = _qwen3_kernels(rank)
        w0, w1 = min(a for a, _, _ in rows), max(b for _, b, _ in rows)
        want = _split(rows, w0, w1)
        mine = blocks.filter((pl.col("rank") == rank) & (pl.col("step") == 13))
        _assert_blocks(mine, want, w0, w1)
        assert set(mine["source"]) == {"kernel_details"}
        stt = _read_csv(QWEN3 / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")[0]
        assert w1 - w0 == pytest.approx(float(stt["Stage"]), abs=1e-6)
        assert want["compute"] == pytest.approx(float(stt["Computing"]), rel=1e-4)
        assert want["comm"] == pytest.approx(float(stt["Communication(Not Overlapped)"]), rel=1e-4)
        assert want["idle"] == pytest.approx(float(stt["Free"]), rel=1e-3)
        # thousands of kernels, at most STEP_BLOCKS blocks: the merged ones say how many stretches they hold
        assert mine["pieces"].sum() > 1000


def test_a_streamed_kernel_file_gives_the_same_blocks(qwen3, monkeypatch, tmp_path):
    """A kernel file too big for the kernel pass to keep its rows (made so here by lowering the sizes from which
    it streams and caches) gets its blocks, and its collectives' windows their rows, from the scan that groups it:
    the same blocks, the same windows as a second read of the file gives, and each file read once. The groups and
    blocks are cached for the next run, which reads each file once more, for the windows' rows alone."""
    from profan.ranks import kernel_pass
    from profan.rulepack.pack import load
    from profan.sources.ascend_text import kernels as ascend_kernels
    from profan.sources.discovery.discover import discover

    monkeypatch.setattr(kernel_pass, "CACHE_BYTES", 0)
    monkeypatch.setattr(ascend_kernels, "IN_MEMORY_BYTES", 0)
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    scans = []
    for name in ("scan_for_groups", "scan"):  # every read of a kernel file goes through one of the two
        real = getattr(ascend_kernels, name)
        monkeypatch.setattr(
            ascend_kernels, name, lambda kf, _real=real, **k: scans.append(kf.path.parent) or _real(kf, **k)
        )
    disc, pack = discover(QWEN3), load()
    ranks = rankmap.read_ranks(disc.ranks, disc.root, pack)
    assert sorted(p.parent.name for p in scans) == ["rank_0_ascend_pt", "rank_2_ascend_pt"]
    assert [r.windows is not None for r in ranks] == [True, False, True, False]
    streamed = profan.analyze(QWEN3).tables["step_blocks"]
    assert streamed.equals(qwen3.tables["step_blocks"])
    entries = list((tmp_path / "cache" / "tables").iterdir())
    assert len(entries) == 4  # each kernel file's groups and its blocks
    scans.clear()
    assert profan.analyze(QWEN3).tables["step_blocks"].equals(streamed)  # from the cache
    assert sorted(p.parent.name for p in scans) == ["rank_0_ascend_pt", "rank_2_ascend_pt"]
    # the windows of the rows the pass kept are those of the rows read again
    monkeypatch.setattr(kernel_pass, "_for_windows", lambda placed: None)
    again = rankmap.read_ranks(disc.ranks, disc.root, pack)
    for held, read in zip(ranks, again, strict=True):
        assert (held.windows is None and read.windows is None) or held.windows.equals(read.windows)
        assert held.collectives.equals(read.collectives)


def test_blocks_of_a_streamed_file_its_pass_did_not_cut(qwen3, monkeypatch, tmp_path):
    """A streamed kernel file whose pass was not asked for blocks (its rank was to take them from trace_view.json,
    which gave none) gets them from a scan of their own: the same table."""
    from profan.ranks import kernel_pass
    from profan.sources.ascend_text import kernels as ascend_kernels

    monkeypatch.setattr(kernel_pass, "CACHE_BYTES", 0)
    monkeypatch.setattr(ascend_kernels, "IN_MEMORY_BYTES", 0)
    monkeypatch.setenv("PROFAN_NO_CACHE", "1")
    real = kernel_pass.reduce_kernel_files
    unasked = lambda files, pack: real([dataclasses.replace(f, blocks=False) for f in files], pack)  # noqa: E731
    monkeypatch.setattr(rankmap, "reduce_kernel_files", unasked)
    assert profan.analyze(QWEN3).tables["step_blocks"].equals(qwen3.tables["step_blocks"])


def test_blocks_swept_a_few_windows_at_a_time_are_the_same(monkeypatch):
    """A kernel file's millions of intervals go through the sweep in chunks of windows (`intervals.SWEEP_ROWS`):
    with every window a chunk of its own, each rank's blocks of every step are those of one sweep."""
    root = TORCH / "memory_gloo_2rank"
    whole = analysed(root).tables["step_blocks"]
    assert whole.group_by("rank").agg(pl.col("step").n_unique())["step"].min() >= 3
    monkeypatch.setattr(intervals, "SWEEP_ROWS", 1)
    assert profan.analyze(root).tables["step_blocks"].equals(whole)


def test_rows_without_a_start_are_left_out_of_the_blocks_and_said(tmp_path):
    """A kernel row whose start is no number has no place in time: the blocks are the union of the other rows,
    and a warning counts the rows left out."""
    rank = tmp_path / "rank_0_ascend_pt"
    shutil.copytree(QWEN3 / "rank_0_ascend_pt", rank)
    kd = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_text(encoding="utf-8").split("\n")
    rows = _read_csv(kd)
    for i in (100, 1000, 2000):  # data row i is line i + 2
        start = rows[i]["Start Time(us)"]
        assert lines[i + 1].count(start) == 1
        lines[i + 1] = lines[i + 1].replace(start, "abc")
    kd.write_text("\n".join(lines), encoding="utf-8")
    report = profan.analyze(tmp_path)
    said = [w for w in report.warnings if "no start time" in w]
    assert said == [
        "rank 0: rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv: 3 rows have no start time (not a "
        "number): left out of the timeline's blocks in time, their durations still count"
    ]
    kept = [(float(r["Start Time(us)"].strip()), r) for r in _read_csv(kd) if r["Start Time(us)"] != "abc"]
    events = [(s, s + float(r["Duration(us)"]), r["Accelerator Core"] == "COMMUNICATION") for s, r in kept]
    w0, w1 = min(a for a, _, _ in events), max(b for _, b, _ in events)
    _assert_blocks(report.tables["step_blocks"], _split(events, w0, w1), w0, w1)


def test_blocks_stay_bounded_with_many_steps():
    """A rank with many steps keeps fewer blocks per step (RANK_BLOCKS over all of them), never fewer than
    MIN_STEP_BLOCKS, and always an odd number: the long stretches and the merged runs between them."""
    assert intervals.per_step_blocks(1) == intervals.STEP_BLOCKS == 31
    assert intervals.per_step_blocks(20) == 23  # 480 // 20 = 24, made odd
    assert intervals.per_step_blocks(1000) == intervals.MIN_STEP_BLOCKS == 5
    # DLRM-like: 1,000 alternating 1 µs kernels and 1 µs gaps over one step, 3 steps of one rank
    starts = [float(2 * i) for i in range(1000)]
    rows = pl.DataFrame(
        {
            "step": [s for s in (1, 2, 3) for _ in starts],
            "start_us": [s * 10_000 + t for s in (1, 2, 3) for t in starts],
            "dur_us": [1.0] * 3000,
            "core": ["AI_CORE"] * 3000,
        }
    )
    blocks = intervals.kernel_blocks(rows, pl.lit(False))
    per = blocks.group_by("step").agg(pl.len(), pl.col("compute_us", "idle_us").sum(), pl.col("pieces").sum())
    # equal stretches: the 15 "longest" are the first 15 (ties go to the earlier), the other 1,984 one block
    assert per.sort("step").rows() == [(s, 16, 1000.0, 999.0, 1999) for s in (1, 2, 3)]
    last = blocks.filter(pl.col("step") == 2).sort("start_us").row(-1, named=True)
    assert (last["part"], last["pieces"], last["compute_us"], last["idle_us"]) == ("compute", 1984, 992.0, 992.0)
    assert (last["start_us"], last["end_us"]) == (20_015.0, 21_999.0)  # after 15 stretches of 1 µs


def test_qwen3_lanes_place_the_blocks_in_time(qwen3):
    """Rank 0's and rank 2's upper lanes tile their step window on the common clock (x = 0 at the earliest step
    start), each part's bars adding up to the rank's exact time in it; ranks 1 and 3, which have no kernel rows,
    show step_cost's totals end to end from x = 0, citing their step_trace_time.csv line, and say so."""
    fig = figures.timeline(qwen3)
    rows = {r: _qwen3_kernels(r) for r in (0, 2)}
    t0 = min(a for r in rows.values() for a, _, _ in r)
    assert fig.layout.meta["in_time"] == [0, 2]
    for rank, lane in ((0, "rank 0"), (2, "rank 2 · C1")):
        w0, w1 = min(a for a, _, _ in rows[rank]), max(b for _, b, _ in rows[rank])
        want = _split(rows[rank], w0, w1)
        bars = _lane(fig, lane)
        _assert_tiles(bars, (w0 - t0) / 1000, (w1 - t0) / 1000)
        for part, key in (("Compute", "compute"), ("Exposed communication", "comm"), ("Idle", "idle")):
            assert sum(b[2] for b in bars if b[0] == part) == pytest.approx(want[key] / 1000, abs=1e-6)
        assert {b[3][3] for b in bars} == {f"rank_{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv:2"}
        assert all(b[3][2].endswith(f"rank_{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv") for b in bars)
    # the longest exposed communication of rank 0: the PP send/receive where stage 0 waits for stage 1
    longest = max((b for b in _lane(fig, "rank 0") if b[0] == "Exposed communication"), key=lambda b: b[2])
    recv = next(
        r
        for r in _read_csv(QWEN3 / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
        if r["Name"] == "hcom_batchSendRecv__128_4_1"
    )
    assert longest[1] == pytest.approx((float(recv["Start Time(us)"].strip()) - t0) / 1000, abs=1e-6)
    # its end is a timestamp near 1.76e15 µs, which a float holds to 0.25 µs
    assert longest[2] == pytest.approx(float(recv["Duration(us)"]) / 1000, abs=2.5e-4)
    cost = qwen3.tables["step_cost"].filter(pl.col("step") == 13)
    parts = {"Compute": "compute_us", "Exposed transfer": "exposed_transfer_us", "Exposed waiting": "exposed_wait_us"}
    parts["Idle"] = "idle_us"
    for rank, lane in ((1, "rank 1"), (3, "rank 3 · C1")):
        rec = cost.filter(pl.col("rank") == rank).row(0, named=True)
        bars = _lane(fig, lane)
        assert [b[0] for b in bars] == list(parts)
        _assert_tiles(bars, 0.0, sum(rec[c] for c in parts.values()) / 1000)
        for name, _, length, cd in bars:
            assert length == pytest.approx(rec[parts[name]] / 1000)
            assert cd[3] == f"{rec['file']}:{rec['line']}" and cd[2].startswith("a total, not placed in time")
    note = fig.layout.meta["note"]
    assert "ranks 1, 3: the step's totals end to end" in note
    merged = qwen3.tables["step_blocks"].filter(pl.col("pieces") > 1)
    assert f"{merged['pieces'].sum():,} short stretches are merged into {merged.height} blocks" in note


def test_qwen3_collectives_sit_where_communication_json_puts_them(qwen3):
    """Each op of communication.json is one block on its rank's comm lane at its start (ms from the step's first
    op), its length the op's elapsed time, split where the last rank arrives; rank 0's wait for stage 1 in the
    PP send/receive is the profiler's own Wait Time to within 0.5 ms."""
    fig = figures.timeline(qwen3)
    bars = _bars(fig)
    ops = qwen3.tables["communication"].filter(pl.col("step") == 13)
    t0 = min(a for r in (0, 2) for a, _, _ in _qwen3_kernels(r))  # x = 0: the earliest step start
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
    t0 = min(a for r in (0, 2) for a, _, _ in _qwen3_kernels(r))
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
    from profan.comparison.compare import compare

    assert figures.timeline(compare(QWEN3, None, ranks=(0, 2))) is None


# ------------------------------------------------------------------------------------------ DLRM


def test_dlrm_straggler_lanes_and_windows(dlrm):
    """Rank 7 starts step 10 7.6 ms after rank 1 and arrives last at the first five collectives: its lanes are
    shaded, its step lane starts at its trace step start, and the first window runs from the earliest arrival at
    the first SendRecv to rank 7's."""
    fig = figures.timeline(dlrm)
    meta, cid = fig.layout.meta, dlrm.causes[0].id
    assert (meta["step"], meta["cause"], meta["cause_ranks"]) == (10, cid, [7])
    assert meta["lanes"][-2:] == [f"rank 7 · {cid}", "rank 7 · comm"] and len(meta["lanes"]) == 16
    (band,) = _shapes(fig, f"{cid} rank 7")
    assert (band.y0, band.y1) == (13.5, 15.5)
    steps = dlrm.tables["trace_steps"].filter((pl.col("scope") == "step") & (pl.col("step") == 10))
    t0 = steps["start_us"].min()
    start7 = (steps.filter(pl.col("rank") == 7)["start_us"].item() - t0) / 1000
    first = _lane(fig, f"rank 7 · {cid}")[0]
    assert first[1] == pytest.approx(start7) and start7 > 7.5
    kernels = dlrm.tables["trace_communication"].filter(pl.col("source") == "kernel")
    seq0 = kernels.sort("ts_us").group_by("rank", maintain_order=True).first()
    want = ((seq0["ts_us"].min() - t0) / 1000, (seq0.filter(pl.col("rank") == 7)["ts_us"].item() - t0) / 1000)
    assert meta["windows"][0] == pytest.approx(list(want))
    assert len(_shapes(fig, f"{cid} window")) == len(meta["windows"]) == 5


def _dlrm_step(rank: int, step: int) -> tuple[float, float, list[tuple[float, float, bool]]]:
    """(window start, window end, device events) of one rank's step, read with json: the step's own events are
    the kernels and copies whose launch (the runtime event of the same correlation) falls in its ProfilerStep;
    the window runs from the first one's start to the last one's end, and every device event in it counts."""
    path = next(DLRM.glob(f"worker{rank}_*.json"))
    events = json.loads(path.read_text(encoding="utf-8"))["traceEvents"]
    marker = next(e for e in events if e.get("cat") == "user_annotation" and e["name"] == f"ProfilerStep#{step}")
    launches = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    own = [
        e
        for e in device
        if marker["ts"] <= launches.get(e["args"].get("correlation"), -1) < marker["ts"] + marker["dur"]
    ]
    w0, w1 = min(e["ts"] for e in own), max(e["ts"] + e["dur"] for e in own)
    return w0, w1, [(e["ts"], e["ts"] + e["dur"], "nccl" in e["name"].lower()) for e in device]


def test_dlrm_blocks_are_the_union_of_the_gpu_events(dlrm):
    """Every rank's blocks of step 10 hold the union of its GPU events read with json — compute, exposed
    communication (NCCL kernels no compute overlaps) and idle — and its lane tiles its step window, each part's
    bars adding up to that time; rank 7, the straggler, starts last."""
    fig = figures.timeline(dlrm)
    blocks = dlrm.tables["step_blocks"].filter(pl.col("step") == 10)
    windows = {r: _dlrm_step(r, 10) for r in range(8)}
    t0 = min(w[0] for w in windows.values())
    for rank, (w0, w1, events) in windows.items():
        want = _split(events, w0, w1)
        _assert_blocks(blocks.filter(pl.col("rank") == rank), want, w0, w1)
        bars = _lane(fig, f"rank {rank}" + (f" · {dlrm.causes[0].id}" if rank == 7 else ""))
        _assert_tiles(bars, (w0 - t0) / 1000, (w1 - t0) / 1000)
        for part, key in (("Compute", "compute"), ("Exposed communication", "comm"), ("Idle", "idle")):
            assert sum(b[2] for b in bars if b[0] == part) == pytest.approx(want[key] / 1000, abs=1e-6)
        assert all(re.fullmatch(rf"worker{rank}_step_12\.\d+\.pt\.trace\.json events \d+–\d+", b[3][3]) for b in bars)
    assert max(windows, key=lambda r: windows[r][0]) == 7
    assert fig.layout.meta["in_time"] == list(range(8))


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
    rows = timeline_layout._comm_rows(dlrm, 10, timeline_layout._step_windows(dlrm, 10))
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
    assert [
        lane for lane in meta["lanes"] if lane.startswith(f"rank 7 · {dlrm.causes[0].id}")
    ] and "rank 0 · typical" in meta["lanes"]
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


def _overlap_lanes(path, step: int) -> tuple[float, float, list[tuple[float, float, bool]], list[float]]:
    """(window start, end, Computing/Communication events, Free event lengths) of one step of a trace_view.json,
    read with json: the Overlap Analysis events whose start falls in the step's ProfilerStep span."""
    events = json.loads(path.read_text(encoding="utf-8"))
    events = events["traceEvents"] if isinstance(events, dict) else events
    meta = [e for e in events if e.get("ph") == "M"]
    pid = next(e["pid"] for e in meta if e["name"] == "process_name" and e["args"]["name"] == "Overlap Analysis")
    lanes = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == pid}
    marker = next(e for e in events if e.get("ph") == "X" and e.get("name") == f"ProfilerStep#{step}")
    s0 = float(marker["ts"])
    s1 = s0 + float(marker["dur"])
    mine = [
        (lanes[e["tid"]], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and e.get("pid") == pid and s0 <= float(e["ts"]) <= s1
    ]
    w0, w1 = min(a for _, a, _ in mine), max(b for _, _, b in mine)
    busy = [(a, b, lane == "Communication") for lane, a, b in mine if lane in ("Computing", "Communication")]
    return w0, w1, busy, [b - a for lane, a, b in mine if lane == "Free"]


def test_64_ranks_blocks_are_the_overlap_lanes(synth64):
    """With trace_view.json, a rank's blocks are its Overlap Analysis lanes in time: for the straggler (rank 37)
    and a typical rank, the union of the Computing and Communication events read with json, the idle time the
    Free lane's, and the straggler's lane tiles its window on the timeline."""
    fig = figures.timeline(synth64)
    root = synth64.read_root
    files = {r["rank"]: r["files"]["trace_view"] for r in synth64.source["ranks"]}
    blocks = synth64.tables["step_blocks"].filter(pl.col("step") == 1)
    assert set(blocks["source"]) == {"overlap_analysis"} and blocks["rank"].n_unique() == 64
    windows = {}
    for rank in (0, 37):
        w0, w1, busy, free = _overlap_lanes(root / files[rank], 1)
        want = _split(busy, w0, w1)
        _assert_blocks(blocks.filter(pl.col("rank") == rank), want, w0, w1)
        # timestamps near 1.76e15 µs hold 0.25 µs as floats: each Free event's ends may round that much
        assert want["idle"] == pytest.approx(sum(free), abs=0.5 * len(free))
        windows[rank] = (w0, w1, want)
    t0 = synth64.tables["step_blocks"].filter(pl.col("step") == 1)["start_us"].min()
    assert t0 == min(s for s in synth64.tables["trace_steps"].filter(pl.col("step") == 1)["start_us"])
    w0, w1, want = windows[37]
    bars = _lane(fig, "rank 37 · C1")
    _assert_tiles(bars, (w0 - t0) / 1000, (w1 - t0) / 1000)
    for part, key in (("Compute", "compute"), ("Exposed communication", "comm"), ("Idle", "idle")):
        assert sum(b[2] for b in bars if b[0] == part) == pytest.approx(want[key] / 1000, abs=1e-6)
    # the 5 ms host gap: rank 37's longest idle stretch, inside the window the cause marks
    gap = max((b for b in bars if b[0] == "Idle"), key=lambda b: b[2])
    said = re.fullmatch(r"([\d.]+) ms from ([\d.]+) ms", gap[3][1])
    assert 4.9 < gap[2] < 5.1 and said and float(said.group(2)) == pytest.approx(gap[1], abs=1e-3)
    assert any(x0 - 1e-6 <= gap[1] + gap[2] <= x1 + 1e-6 for x0, x1 in fig.layout.meta["windows"])


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
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"timeline-{name}.png"  # kept for a human to look at, as the other reports' screenshots
    page.locator("#timeline").screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    # the screenshot may scroll the section into view: find the block again before clicking it
    box = chart.locator("g.trace.bars").nth(ti).locator("g.point path").nth(pi).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.wait_for_timeout(200)
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
