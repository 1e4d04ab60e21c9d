"""Memory analysis: each rank's peak, what holds it and the imbalance of peaks, checked against the raw rows — the
Ascend text export (memory_record.csv / operator_memory.csv / npu_module_mem.csv of the AlexNet sample, level0)
and the real 2-rank Kineto traces with memory events (fixtures/torch/memory_gloo_2rank, bench/memory_trace.py).

Ground truth is computed here with the csv / json modules from the files, never from profan's tables."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict

import pytest
from conftest import ASCEND, TORCH, fnum, raw_rows, run_cli

import profan
from profan.figures.memory import memory as memory_chart
from profan.render import render

ALEXNET = ASCEND / "msinsight-alexnet-2rank-2025" / "level0"
KINETO = TORCH / "memory_gloo_2rank"
MB = float(1 << 20)


@pytest.fixture(scope="module")
def alexnet():
    return profan.analyze(ALEXNET)


@pytest.fixture(scope="module")
def kineto():
    return profan.analyze(KINETO)


def _out(rank: int) -> str:
    return f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _ascend_truth(rank: int) -> dict:
    """The PTA+GE curve's peak (the first row of the largest Total Allocated, in time order), the reserved peak,
    the APP component's peak, and the operator_memory.csv allocations live at the peak, grouped by Name."""
    _, rows = raw_rows(ALEXNET / _out(rank) / "memory_record.csv")
    curve = sorted(
        (fnum(r["Timestamp(us)"]), n, fnum(r["Total Allocated(MB)"]), fnum(r["Total Reserved(MB)"]))
        for n, r in rows.items()
        if r["Component"] == "PTA+GE"
    )
    top = max(c[2] for c in curve)
    t, line, alloc, reserved = next(c for c in curve if c[2] == top)
    app = [(fnum(r["Total Reserved(MB)"]), n) for n, r in rows.items() if r["Component"] == "APP"]
    _, ops = raw_rows(ALEXNET / _out(rank) / "operator_memory.csv")
    live: dict[str, float] = defaultdict(float)
    live_lines = []
    for n, r in ops.items():
        rel = r["Release Time(us)"].strip()
        if fnum(r["Allocation Time(us)"]) <= t and (not rel or fnum(rel) > t):
            live[r["Name"]] += fnum(r["Size(KB)"]) / 1024
            live_lines.append(n)
    return {
        "t": t,
        "line": line,
        "allocated": alloc,
        "reserved_at_peak": reserved,
        "peak_reserved": max(c[3] for c in curve),
        "app": max(app)[0],
        "live": dict(live),
        "live_lines": set(live_lines),
    }


@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_peak_equals_the_raw_maximum(alexnet, rank):
    truth = _ascend_truth(rank)
    row = alexnet.tables["memory_peaks"].filter(rank=rank).row(0, named=True)
    assert row["peak_allocated_mb"] == pytest.approx(truth["allocated"])
    assert row["loc"] == truth["line"]
    assert row["reserved_at_peak_mb"] == pytest.approx(truth["reserved_at_peak"])
    assert row["unallocated_at_peak_mb"] == pytest.approx(truth["reserved_at_peak"] - truth["allocated"])
    assert row["peak_reserved_mb"] == pytest.approx(truth["peak_reserved"])
    assert row["process_reserved_mb"] == pytest.approx(truth["app"])
    assert row["live_mb"] == pytest.approx(sum(truth["live"].values()))
    assert row["capacity_mb"] is None  # a text export records no capacity: said, not guessed
    # the step: the one whose kernels (kernel_details.csv, start to start + duration) span the peak's time
    _, kernels = raw_rows(ALEXNET / _out(rank) / "kernel_details.csv")
    spans: dict[int, list[float]] = defaultdict(list)
    for k in kernels.values():
        start = fnum(k["Start Time(us)"])
        spans[int(k["Step Id"])] += [start, start + fnum(k["Duration(us)"])]
    (step,) = [s for s, ts in spans.items() if min(ts) <= truth["t"] <= max(ts)]
    assert row["step"] == step
    assert any("headroom is unknown" in n for n in alexnet.notes)


@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_holders_at_the_peak(alexnet, rank):
    """The named holders are the operator_memory.csv rows live at the peak, summed by Name, largest first."""
    truth = _ascend_truth(rank)
    h = alexnet.tables["memory_holders"].filter(rank=rank)
    expected = sorted(truth["live"].items(), key=lambda kv: (-kv[1], kv[0]))[: h.height]
    assert h["name"].to_list() == [k for k, _ in expected]
    assert h["live_mb"].to_list() == pytest.approx([v for _, v in expected])
    assert expected[0][0] == "aten::_foreach_add"  # the optimizer's foreach update holds the most at the peak
    member = next(m for m in alexnet.ungrouped() if m.check == "memory-peak" and m.rank == rank)
    held = next(e for e in member.evidence if "live_at_us" in e.select)
    assert held.row_count == len(truth["live_lines"]) and set(held.lines) <= truth["live_lines"]


def test_ascend_npu_modules(alexnet):
    _, rows = raw_rows(ALEXNET / _out(0) / "npu_module_mem.csv")
    hccl = max(fnum(r["Total Reserved(MB)"]) for r in rows.values() if r["Component"] == "HCCL")
    mods = alexnet.tables["memory_modules"].filter(rank=0)
    assert mods.filter(component="HCCL")["reserved_mb"][0] == pytest.approx(hccl)
    assert mods["reserved_mb"].min() > 0


def test_ascend_evidence_reads_back_the_raw_lines(tmp_path):
    """`profan evidence` prints exactly the memory_record.csv / operator_memory.csv lines each memory finding
    cites, and the peak's line holds the peak."""
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(ALEXNET), "-f", "json", "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    members = [m for f in doc["findings"] if f["check"].startswith("memory-") for m in (f["members"] or [f])]
    assert {m["rank"] for m in members if m["check"] == "memory-peak"} == {0, 1}
    for m in members:
        res = run_cli("evidence", str(out), m["id"], "--format", "json")
        assert res.returncode == 0, res.stderr
        for ev, item in zip(m["evidence"], json.loads(res.stdout)["evidence"], strict=True):
            raw = (ALEXNET / ev["file"]).read_bytes().decode().splitlines()
            assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in ev["lines"]]
        peak = m["evidence"][0]
        truth = _ascend_truth(m["rank"])
        assert peak["lines"] == [truth["line"]]
        assert peak["values"]["allocated_mb"] == pytest.approx(truth["allocated"])


# --------------------------------------------------------------------------------------------- Kineto


def _events(rank: int) -> list[dict]:
    with gzip.open(KINETO / f"rank{rank}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def _around(ops: list[dict], tid, t: float) -> list[dict]:
    return [o for o in ops if o["tid"] == tid and o["ts"] <= t <= o["ts"] + o["dur"]]


def _kineto_truth(rank: int) -> dict:
    """The peak of Total Allocated over the memory events (first in time), and what is live then: allocations
    and frees paired by Addr, each allocation named by the innermost cpu_op of its thread around it."""
    ev = _events(rank)
    mem = sorted(
        ((e["ts"], i, e) for i, e in enumerate(ev) if e.get("ph") == "i" and e.get("name") == "[memory]"),
        key=lambda x: (x[0], x[1]),
    )
    top = max(e["args"]["Total Allocated"] for _, _, e in mem)
    t, idx, peak = next(m for m in mem if m[2]["args"]["Total Allocated"] == top)
    live: dict[int, tuple[int, int]] = {}
    for _, i, e in mem:
        if (e["ts"], i) > (t, idx):
            break
        a = e["args"]
        if a["Bytes"] > 0:
            live[a["Addr"]] = (a["Bytes"], i)
        else:
            live.pop(a["Addr"], None)
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    held: dict[str, float] = defaultdict(float)
    for size, i in live.values():
        around = _around(ops, ev[i]["tid"], ev[i]["ts"])
        held[max(around, key=lambda o: o["ts"])["name"] if around else ""] += size / MB
    notes = [e for e in ev if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    (step,) = [e for e in _around(notes, peak["tid"], t) if e["name"].startswith("ProfilerStep#")]
    backward = [o for o in _around(ops, peak["tid"], t) if o["name"].startswith("autograd::engine::evaluate_function")]
    return {
        "t": t,
        "idx": idx,
        "peak_mb": top / MB,
        "held": dict(held),
        "live_idx": {i for _, i in live.values()},
        "step": int(step["name"].split("#")[1]),
        "backward": bool(backward),
    }


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_peak_step_and_phase(kineto, rank):
    truth = _kineto_truth(rank)
    row = kineto.tables["memory_peaks"].filter(rank=rank).row(0, named=True)
    assert row["peak_allocated_mb"] == pytest.approx(truth["peak_mb"])
    assert row["loc"] == truth["idx"]
    assert row["step"] == truth["step"]
    assert truth["backward"] and row["phase"] == "backward"
    assert row["device"] == "CPU" and row["reserved_at_peak_mb"] is None  # the CPU allocator reserves nothing
    assert row["live_mb"] == pytest.approx(sum(truth["held"].values()))


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_holders_are_the_live_allocations_by_op(kineto, rank):
    truth = _kineto_truth(rank)
    h = kineto.tables["memory_holders"].filter(rank=rank)
    expected = sorted(truth["held"].items(), key=lambda kv: (-kv[1], kv[0]))[: h.height]
    assert h["name"].to_list() == [k for k, _ in expected]
    assert h["live_mb"].to_list() == pytest.approx([v for _, v in expected])
    member = next(m for m in kineto.ungrouped() if m.check == "memory-peak" and m.rank == rank)
    held = next(e for e in member.evidence if "live_at_us" in e.select)
    assert held.row_count == len(truth["live_idx"]) and set(held.events) <= truth["live_idx"]


def test_kineto_peaks_differ_and_the_imbalance_is_named(kineto):
    """Rank 1 trains on twice rank 0's tokens (bench/memory_trace.py): its peak is higher, and the imbalance
    finding names it with the ratio to the other rank (of two, the median of both would halve the gap),
    computed from the raw events."""
    peaks = {r: _kineto_truth(r)["peak_mb"] for r in (0, 1)}
    assert peaks[1] > peaks[0]
    (f,) = [f for f in kineto.findings if f.check == "memory-imbalance"]
    assert f.metrics["max_rank"] == 1 and f.metrics["min_rank"] == 0
    assert f.metrics["ratio"] == pytest.approx(peaks[1] / peaks[0], rel=1e-4)
    assert f.title.startswith(f"Rank 1 peaks at {peaks[1] / peaks[0]:.2f}× rank 0's memory")
    events = {r: _events(r) for r in (0, 1)}
    for ev in f.evidence:
        rank = int(ev.file[4])
        (i,) = ev.events
        assert events[rank][i]["args"]["Total Allocated"] / MB == pytest.approx(peaks[rank])


def test_kineto_evidence_command_prints_the_cited_events(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(KINETO), "-f", "json", "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    members = [m for f in doc["findings"] if f["check"].startswith("memory-") for m in (f["members"] or [f])]
    assert members
    for m in members:
        res = run_cli("evidence", str(out), m["id"], "--format", "json")
        assert res.returncode == 0, res.stderr
        for item, ev in zip(json.loads(res.stdout)["evidence"], m["evidence"], strict=True):
            rank = int(ev["file"][4])
            assert [json.loads(r["text"]) for r in item["rows"]] == [_events(rank)[i] for i in ev["events"]]


# --------------------------------------------------------------------------------------------- the chart


def _chart_data(page: str) -> dict:
    start = page.index('id="chart-data">') + len('id="chart-data">')
    return json.loads(page[start : page.index("</script>", start)])


def test_html_has_the_memory_chart_with_each_peak(kineto, alexnet):
    for report in (kineto, alexnet):
        page = render(report, "html")
        assert 'id="chart-memory"' in page
        spec = _chart_data(page)["memory_peaks"]
        peaks = report.tables["memory_peaks"]
        marks = [t for t in spec["data"] if t.get("mode") == "markers"]
        expected = [peaks.filter(rank=r)["peak_allocated_mb"][0] for r in (0, 1)]
        assert [m["y"][0] for m in marks] == pytest.approx(expected)
        for r in (0, 1):  # the bounded curve keeps each rank's peak exactly
            curve = report.tables["memory_curve"].filter(rank=r)
            assert curve["allocated_mb"].max() == pytest.approx(expected[r])


def test_curve_is_bounded_and_keeps_the_peak(tmp_path):
    rules = tmp_path / "few.toml"
    rules.write_text('[[check]]\nid = "memory-peak"\ncurve_points = 30\n', encoding="utf-8")
    report = profan.analyze(ALEXNET, rules=[rules])
    for r in (0, 1):
        curve = report.tables["memory_curve"].filter(rank=r)
        assert curve.height <= 30
        assert curve["allocated_mb"].max() == pytest.approx(_ascend_truth(r)["allocated"])


def _copy_rank(tmp_path):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(ALEXNET / "rank0_ascend_pt", dst)
    for p in (dst / "ASCEND_PROFILER_OUTPUT").iterdir():
        p.chmod(0o644)
    return dst, dst / "ASCEND_PROFILER_OUTPUT"


def test_op_names_are_escaped_in_the_chart(tmp_path):
    """An op name is untrusted text: the hover of the peak shows it entity-escaped."""
    dst, out = _copy_rank(tmp_path)
    ops = out / "operator_memory.csv"
    ops.write_bytes(ops.read_bytes().replace(b"aten::_foreach_add", b"<b>x</b>"))
    report = profan.analyze(dst)
    assert report.tables["memory_peaks"]["peak_op"][0] == "<b>x</b>"
    hover = next(t.hovertext[0] for t in memory_chart(report).data if t.mode == "markers")
    assert "allocated by &lt;b&gt;x&lt;/b&gt;" in hover and "<b>x</b>" not in hover


# --------------------------------------------------------------------------------------------- bad input


def test_unreadable_rows_are_counted_not_dropped_silently(tmp_path):
    dst, out = _copy_rank(tmp_path)
    rec = out / "memory_record.csv"
    lines = rec.read_bytes().split(b"\r\n")
    n = next(i for i, line in enumerate(lines) if line.startswith(b"PTA,"))
    lines[n] = b"PTA,not-a-time" + lines[n][lines[n].index(b",", 4) :]
    rec.write_bytes(b"\r\n".join(lines))
    report = profan.analyze(dst)
    (w,) = [w for w in report.warnings if "memory_record.csv" in w]
    assert "skipped 1 of 1003 rows" in w


def test_a_memory_file_that_cannot_be_read_is_a_warning_not_the_end(tmp_path):
    """A memory file without a column the reader needs is one warning naming the file and the column; the rest of
    the rank is analysed as before, without memory tables."""
    dst, out = _copy_rank(tmp_path)
    rec = out / "memory_record.csv"
    rec.write_bytes(rec.read_bytes().replace(b"Total Reserved(MB)", b"Reserved", 1))
    res = run_cli("analyze", str(dst), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    (w,) = [w for w in doc["warnings"] if "memory_record.csv" in w]
    assert "missing column(s) Total Reserved(MB)" in w and "memory not analysed" in w
    assert w.startswith("rank 0: ASCEND_PROFILER_OUTPUT/memory_record.csv") and "\n" not in w
    assert not [t for t in doc["tables"] if t.startswith("memory_")] and doc["breakdown"]


def test_kineto_memory_events_without_a_total_are_counted(tmp_path):
    for rank in (0, 1):
        with gzip.open(KINETO / f"rank{rank}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
        if rank == 1:
            mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
            for e in mem[:3]:
                del e["args"]["Total Allocated"]
        with gzip.open(tmp_path / f"rank{rank}.pt.trace.json.gz", "wt", encoding="utf-8") as fh:
            json.dump(doc, fh)
    report = profan.analyze(tmp_path)
    (w,) = [w for w in report.warnings if "memory event" in w]
    assert w.startswith("rank 1: rank1.pt.trace.json.gz: skipped 3 memory event(s)")
    assert report.tables["memory_peaks"].height == 2


def test_a_trace_without_memory_events_has_no_memory_tables():
    report = profan.analyze(TORCH / "gloo_moe_cpu_4rank" / "none")
    assert not [t for t in report.tables if t.startswith("memory_")]
    assert not [f for f in report.findings if f.check.startswith("memory-")]


def test_headroom_against_the_recorded_capacity(tmp_path):
    """Where the trace records the device's memory (deviceProperties totalGlobalMem of the device the events are
    on), the peak is graded by its share of it. The real traces, moved onto "CUDA device 0" with 280 MB."""
    capacity = 280 * MB
    for rank in (0, 1):
        with gzip.open(KINETO / f"rank{rank}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
        for e in doc["traceEvents"]:
            if e.get("name") == "[memory]":
                e["args"].update({"Device Type": 1, "Device Id": 0})
        doc["deviceProperties"] = [{"id": 0, "name": "test device", "totalGlobalMem": int(capacity)}]
        with gzip.open(tmp_path / f"rank{rank}.pt.trace.json.gz", "wt", encoding="utf-8") as fh:
            json.dump(doc, fh)
    report = profan.analyze(tmp_path)
    peaks = report.tables["memory_peaks"]
    assert peaks["device"].to_list() == ["CUDA:0", "CUDA:0"] and peaks["capacity_mb"].to_list() == [280.0, 280.0]
    members = {m.rank: m for m in report.ungrouped() if m.check == "memory-peak"}
    for rank in (0, 1):
        share = _kineto_truth(rank)["peak_mb"] / 280.0
        assert members[rank].metrics["capacity_share"] == pytest.approx(share, rel=1e-4)
        assert peaks.filter(rank=rank)["headroom_mb"][0] == pytest.approx(280.0 - _kineto_truth(rank)["peak_mb"])
    assert members[1].severity == "warning" and members[0].severity == "info"  # 0.92 and 0.46 of 280 MB
    assert not any("headroom is unknown" in n for n in report.notes)
    (line,) = memory_chart(report).layout.shapes  # the capacity, drawn: the peaks come near it
    assert line.y0 == pytest.approx(280.0)


def test_gpu_trace_reads_the_gpu_and_its_capacity():
    """A real H100 inference trace holds CPU and CUDA memory events: the GPU's are analysed, against the capacity
    its deviceProperties record (totalGlobalMem of device 0)."""
    (path,) = (TORCH / "qwen1.5-0.5b_h100_1rank").glob("*.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    mem = [
        (e["ts"], i, e["args"])
        for i, e in enumerate(doc["traceEvents"])
        if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1
    ]
    assert len(mem) < sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]")  # CPU events too
    top = max(a["Total Allocated"] for _, _, a in mem)
    _, idx, args = min((t, i, a) for t, i, a in mem if a["Total Allocated"] == top)
    (props,) = [p for p in doc["deviceProperties"] if p["id"] == args["Device Id"]]
    row = profan.analyze(path).tables["memory_peaks"].row(0, named=True)
    assert row["device"] == f"CUDA:{args['Device Id']}" and row["loc"] == idx
    assert row["peak_allocated_mb"] == pytest.approx(top / MB)
    assert row["reserved_at_peak_mb"] == pytest.approx(args["Total Reserved"] / MB)
    assert row["capacity_mb"] == pytest.approx(props["totalGlobalMem"] / MB)
    reserved = max(a["Total Reserved"] for _, _, a in mem) / MB
    assert row["headroom_mb"] == pytest.approx(props["totalGlobalMem"] / MB - reserved)


def test_a_mapped_trace_reads_the_memory_events_a_read_one_does(monkeypatch, tmp_path):
    """A big uncompressed trace is mapped, not copied into a flattened buffer (`chunks.trace_text`): its memory
    events and spans are the same, also pretty-printed with CRLF line breaks inside the events."""
    from profan.sources.trace import kineto_memory

    plain = tmp_path / "rank0.pt.trace.json"
    doc = {"traceEvents": _events(0)}
    plain.write_text(json.dumps(doc, indent=1).replace("\n", "\r\n"))
    args = ("[memory]", ("cpu_op", "user_annotation"))
    read = kineto_memory.read(plain, *args)
    monkeypatch.setattr("profan.sources.trace.chunks.MAP_FROM", 0)
    mapped = kineto_memory.read(plain, *args)
    assert read.events.height == sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]") - read.skipped
    assert mapped.events.equals(read.events) and mapped.spans.equals(read.spans)
    assert (mapped.meta, mapped.skipped) == (read.meta, read.skipped)
