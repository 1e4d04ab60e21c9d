"""Ascend trace_view.json: Overlap Analysis lanes by thread_name agree with step_trace_time.csv (within 0.1%),
HCCL Group/Plane lanes with their args, and the cross-check finding cites the lane events."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import analysed

from profan.sources.common.readback import read_back
from profan.sources.trace import ascend_view as trace_view

ROOT = Path(__file__).resolve().parents[2]
ALEXNET = ROOT / "fixtures" / "ascend" / "msinsight-alexnet-2rank-2025"
CASES = [(level, rank) for level in ("level1", "level2") for rank in (0, 1)]
LANES = {
    "computing_us": "Computing",
    "comm_not_overlapped_us": "Communication(Not Overlapped)",
    "free_us": "Free",
    "communication_us": "Communication",
}


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFAN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def out_dir(level: str, rank: int) -> Path:
    return ALEXNET / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


def step_trace_rows(path: Path) -> dict[int, dict[str, float]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return {
            int(r["Step"]): {k: float(v.strip()) for k, v in r.items() if k != "Step" and v.strip()}
            for r in csv.DictReader(fh)
        }


@pytest.mark.parametrize(("level", "rank"), CASES)
def test_overlap_lanes_match_step_trace_time(level, rank):
    _, steps, split, _, _ = trace_view.load(out_dir(level, rank) / "trace_view.json")
    csv_rows = step_trace_rows(out_dir(level, rank) / "step_trace_time.csv")
    assert steps["step"].to_list() == sorted(csv_rows) == [50]
    for row in split.iter_rows(named=True):
        want = csv_rows[row["step"]]
        for col, header in LANES.items():
            assert row[col] == pytest.approx(want[header], rel=1e-3), (level, rank, header)
        assert row["overlapped_us"] == pytest.approx(want["Overlapped"], rel=1e-3)


def test_lanes_are_found_by_thread_name_not_tid(tmp_path):
    """Renumber the Overlap Analysis tids (the 2026 msprof order): the split must not change."""
    src = out_dir("level2", 0) / "trace_view.json"
    events = json.loads(src.read_text(encoding="utf-8"))
    pid = next(
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "process_name" and e["args"]["name"] == "Overlap Analysis"
    )
    names = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }
    order = ["Communication", "Communication(Not Overlapped)", "Computing", "Free"]
    remap = {tid: order.index(name) for tid, name in names.items()}
    for e in events:
        if e.get("pid") == pid and "tid" in e:
            e["tid"] = remap.get(e["tid"], e["tid"])
            if e.get("ph") == "X":
                e["name"] = "lane"  # lane events are found by their thread, not their own name
    out = tmp_path / "trace_view.json"
    out.write_text(json.dumps(events))
    _, _, moved, _, _ = trace_view.load(out)
    _, _, orig, _, _ = trace_view.load(src)
    cols = list(LANES)
    assert moved.select(cols).rows() == orig.select(cols).rows()


def _synth_trace(tmp_path) -> Path:
    """A generated rank's trace_view.json: its plane tasks repeat equal durations, the ties real files lack."""
    from profan.synth import generate

    generate(tmp_path / "c", ranks=2, layers=2, seed=5)
    return sorted((tmp_path / "c").rglob("trace_view.json"))[0]


@pytest.mark.parametrize("source", ["level2", "synthetic"])
def test_hccl_group_ops_and_plane_links(source, tmp_path):
    path = out_dir("level2", 0) / "trace_view.json" if source == "level2" else _synth_trace(tmp_path)
    events = json.loads(path.read_text(encoding="utf-8"))
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    hccl = [(i, e) for i, e in enumerate(events) if e.get("ph") == "X" and procs.get(e["pid"]) == "HCCL"]
    ops = [i for i, e in hccl if threads[(e["pid"], e["tid"])].startswith("Group ")]
    tasks = [e for _, e in hccl if threads[(e["pid"], e["tid"])].startswith("Plane ")]
    task_idx = [i for i, e in hccl if threads[(e["pid"], e["tid"])].startswith("Plane ")]
    _, _, _, got_ops, links = trace_view.load(path)
    assert got_ops["event_idx"].to_list() == sorted(ops, key=lambda i: float(events[i]["ts"]))
    assert all(events[i]["name"].startswith("hcom_") for i in ops)
    assert got_ops["count"].to_list()[0] == str(events[got_ops["event_idx"][0]]["args"]["count"])
    assert links["tasks"].sum() == len(tasks)
    for (plane, link), g in links.group_by(["plane", "link_type"]):
        want = [e for e in tasks if threads[(e["pid"], e["tid"])] == plane and e["args"]["link type"] == link]
        assert g["bytes"].sum() == pytest.approx(sum(e["args"]["size(Byte)"] for e in want))
        assert g["time_us"].sum() == pytest.approx(sum(e["dur"] for e in want))
    # the cited tasks of each link: its longest, longest first, ties by the earlier event
    for row in links.iter_rows(named=True):
        mine = [
            i
            for i in task_idx
            if threads[(events[i]["pid"], events[i]["tid"])] == row["plane"]
            and events[i]["args"].get("transport type") == row["transport_type"]
            and events[i]["args"]["link type"] == row["link_type"]
        ]
        assert mine and row["top_events"] == sorted(mine, key=lambda i: (-float(events[i]["dur"]), i))[:5]


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_cross_check_finding_cites_lane_events(level):
    rep = analysed(ALEXNET / level)
    tab = rep.tables["trace_vs_step_trace"]
    assert sorted(tab["rank"].unique().to_list()) == [0, 1]
    assert tab["rel_diff"].max() <= 1e-3
    found = [f for f in rep.ungrouped() if f.check == "trace-vs-step-trace"]
    assert len(found) == 2 and all(f.severity == "info" and f.step == 50 for f in found)
    for f in found:
        csv_ev, tv_ev = f.evidence
        assert csv_ev.file.endswith("step_trace_time.csv") and csv_ev.lines == (2,)
        events = json.loads((ALEXNET / level / tv_ev.file).read_text(encoding="utf-8"))
        procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
        lane_events = [e for e in events if e.get("ph") == "X" and procs.get(e["pid"]) == "Overlap Analysis"]
        assert tv_ev.row_count == len(lane_events)
        cited = [json.loads(t) for _, t in read_back(ALEXNET / level, tv_ev)]
        assert all(procs[e["pid"]] == "Overlap Analysis" for e in cited)
        assert [e["dur"] for e in cited] == sorted((e["dur"] for e in lane_events), reverse=True)[: len(cited)]
    # level2 also reads trace_view.json into the HCCL link table
    if level == "level2":
        assert set(rep.tables["hccl_links"]["link_type"].to_list()) >= {"HCCS", "ON_CHIP"}
        assert rep.tables["trace_steps"].filter(pl.col("source") == "overlap_analysis").height == 2


def test_the_loader_time_before_each_step_holds_when_a_step_number_repeats(tmp_path):
    """Two captures of step 50 in one file (the real AlexNet rank 0 trace, its events appended again 10 s later):
    each step's time inside the data loader before its first task is its own loader span's (3332.4 µs in the raw
    file), read per ProfilerStep event — not every step 50 against every other, which grew as the square of the
    repeats (a 770 MB file of 366 copies took 1.5 s and 8 M rows here)."""
    events = json.loads((out_dir("level1", 0) / "trace_view.json").read_text())
    shifted = [{**e, "ts": f"{float(e['ts']) + 10_000_000:.3f}"} if "ts" in e else e for e in events]
    (tmp_path / "trace_view.json").write_text(json.dumps([*events, *shifted]))
    _, steps, split, _, _ = trace_view._load(tmp_path / "trace_view.json", r"^enumerate\(DataLoader\)#")[:5]
    assert steps["step"].to_list() == [50, 50] and split.height == 2
    (span,) = [e for e in events if str(e.get("name", "")).startswith("enumerate(DataLoader)#")]
    assert split["loading_before_us"].to_list() == pytest.approx([float(span["dur"])] * 2, abs=0.2)
