"""Kernels replayed from a HIP graph (SGLang decode on MI300X): the capture trace beside the replay gives each
replayed kernel the op and module that launched it at capture; the busy time is TraceLens's; the idle advice does
not suggest graphs to a trace that replays them. Every expected value is read from the raw traces here."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
from collections import Counter

import polars as pl
import pytest
from conftest import TORCH

import profan
from profan.rulepack.pack import load as load_pack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.discovery.discover import discover
from profan.sources.trace import graph_replay, kineto

SGLANG = TORCH / "sglang_qwen3-8b_decode_mi300x_graph"
REPLAY = SGLANG / "sglang_Qwen3-8B_decode.json.gz"
CAPTURE = SGLANG / "capture_traces" / "bs_32_rank0.json.gz"
MODULE = re.compile(r"^nn\.Module: (.+)$")


def _events(path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


@pytest.fixture(scope="module")
def replay() -> list[dict]:
    return _events(REPLAY)


@pytest.fixture(scope="module")
def capture() -> list[dict]:
    return _events(CAPTURE)


@pytest.fixture(scope="module")
def report() -> profan.Report:
    return profan.analyze(SGLANG)


def _replayed(replay: list[dict]) -> list[tuple[int, dict]]:
    """(event index, event) of the kernels whose correlation id is a hipGraphLaunch's, in time order."""
    graph = {e["args"]["correlation"] for e in replay if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]}
    out = [(i, e) for i, e in enumerate(replay) if e.get("cat") == "kernel" and e["args"]["correlation"] in graph]
    return sorted(out, key=lambda p: (p[1]["ts"], p[0]))


def _captured(capture: list[dict]) -> list[dict]:
    """What the capture says of each graph node, in capture order: the kernel its launch names, the cpu_op of its
    External id, and the innermost nn.Module Python frame around the launch."""
    rt = sorted((e for e in capture if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
    begin = next(e["ts"] for e in rt if e["name"].endswith("StreamBeginCapture"))
    end = next(e["ts"] for e in rt if e["name"].endswith("StreamEndCapture"))
    ops = {e["args"]["External id"]: e["name"] for e in capture if e.get("cat") == "cpu_op"}
    frames = [e for e in capture if e.get("cat") == "python_function" and MODULE.match(e["name"])]
    nodes = []
    for e in rt:
        if begin <= e["ts"] <= end and "kernel" in e["args"]:
            around = [f for f in frames if f["tid"] == e["tid"] and f["ts"] <= e["ts"] <= f["ts"] + f["dur"]]
            inner = max(around, key=lambda f: f["ts"]) if around else None
            nodes.append(
                {
                    "kernel": e["args"]["kernel"],
                    "op": ops.get(e["args"].get("External id")),
                    "module": MODULE.match(inner["name"]).group(1) if inner else None,
                }
            )
    return nodes


def _expected(replay: list[dict], capture: list[dict]) -> dict[int, dict]:
    """Event index -> the capture node of the same name and occurrence (the graph has the replay's node count)."""
    nodes, kernels = _captured(capture), _replayed(replay)
    assert len(nodes) == len(kernels)
    by_key, seen = {}, Counter()
    for n in nodes:
        by_key[(n["kernel"], seen[n["kernel"]])] = n
        seen[n["kernel"]] += 1
    out, seen = {}, Counter()
    for i, e in kernels:
        if (e["name"], seen[e["name"]]) in by_key:
            out[i] = by_key[(e["name"], seen[e["name"]])]
        seen[e["name"]] += 1
    return out


def test_the_capture_folder_belongs_to_the_trace_beside_it():
    disc = discover(SGLANG)
    assert len(disc.ranks) == 1
    assert disc.ranks[0].files == {"kineto_trace": REPLAY, "graph_capture_0": CAPTURE}


def test_replayed_kernels_take_op_and_module_from_the_capture(replay, capture, report):
    """Every replayed kernel the capture pairs (same name, same occurrence) gets that launch's cpu_op and module;
    the report says how many were mapped and how many not."""
    want = _expected(replay, capture)
    kt = kineto.load(REPLAY)
    replayed, mapped = graph_replay.apply(kt, [CAPTURE], default_roles())
    assert replayed == len(_replayed(replay)) and mapped == len(want) and mapped
    got = kt.device.filter(pl.col("graph")).select("event_idx", "context", "module").rows()
    assert {i: (c, m) for i, c, m in got} == {i: (n["op"], n["module"]) for i, n in want.items()}
    assert any(f"{replayed:,} kernels replayed" in n and f"{mapped:,} took" in n for n in report.notes)


def test_without_its_capture_a_replayed_kernel_has_no_op_and_that_is_said(replay, tmp_path):
    """The op around the graph launch launched the graph, not each kernel: alone, the replay's graph kernels keep
    no context, and a warning counts them."""
    shutil.copy(REPLAY, tmp_path / REPLAY.name)
    kt = kineto.load(tmp_path / REPLAY.name)
    assert kt.device.filter(pl.col("graph"))["context"].null_count() == len(_replayed(replay))
    rep = profan.analyze(tmp_path)
    n = len(_replayed(replay))
    assert any(f"{n:,} of {n:,} kernels replayed" in w for w in rep.warnings)


def test_a_capture_of_another_graph_maps_nothing(capture, replay, tmp_path):
    """A capture whose graph has another node count (one launch removed) pairs no kernel, and the report says so."""
    end = next(e["ts"] for e in capture if e.get("name", "").endswith("StreamEndCapture"))
    cut = max(
        (e for e in capture if e.get("cat") == "cuda_runtime" and "kernel" in e["args"] and e["ts"] < end),
        key=lambda e: e["ts"],
    )
    (tmp_path / "capture_traces").mkdir()
    with gzip.open(tmp_path / "capture_traces" / CAPTURE.name, "wt", encoding="utf-8") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": [e for e in capture if e is not cut]}, fh)
    shutil.copy(REPLAY, tmp_path / REPLAY.name)
    rep = profan.analyze(tmp_path)
    n = len(_replayed(replay))
    assert any(f"{n:,} kernels replayed" in m and "0 took" in m for m in rep.notes)
    assert any(f"{n:,} of {n:,} kernels replayed" in w for w in rep.warnings)


def test_busy_and_idle_match_tracelens(report):
    """Busy, idle and total time of the decode trace equal TraceLens's GPU timeline of it."""
    with open(SGLANG / "tracelens_gpu_timeline.csv", newline="", encoding="utf-8") as fh:
        ms = {r["type"]: float(r["time ms"]) for r in csv.DictReader(fh)}
    row = report.tables["trace_steps"].filter(pl.col("scope") == "trace").row(0, named=True)
    assert row["busy_us"] / 1000 == pytest.approx(ms["busy_time"], rel=1e-9)
    assert row["free_us"] / 1000 == pytest.approx(ms["idle_time"], rel=1e-9)
    assert row["step_us"] / 1000 == pytest.approx(ms["total_time"], rel=1e-9)


def test_idle_inside_a_replayed_graph_is_not_the_hosts(replay, report):
    """The host part of the idle split, recomputed: in each gap before a device event, the time from the gap's
    start to the event's launch call. A replayed kernel's launch is the graph launch, before the gaps inside the
    graph: those gaps are not the host's."""
    launch = {e["args"]["correlation"]: e["ts"] for e in replay if e.get("cat") == "cuda_runtime"}
    dev = sorted(
        ((i, e) for i, e in enumerate(replay) if e.get("cat") in ("kernel", "gpu_memcpy")), key=lambda p: p[1]["ts"]
    )
    graph = [i for i, _ in _replayed(replay)]
    host, end, inside = 0.0, None, 0.0
    for i, e in dev:
        if end is not None and e["ts"] > end:
            part = min(max(launch[e["args"]["correlation"]] - end, 0.0), e["ts"] - end)
            host += part
            inside += part if i in graph[1:] else 0.0  # a gap before a graph kernel but the graph's first
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    row = report.tables["trace_steps"].filter(pl.col("scope") == "trace").row(0, named=True)
    assert row["idle_host_us"] == pytest.approx(host)
    assert row["graph_events"] == len(graph)
    assert inside == 0.0 < host


def test_the_idle_action_does_not_advise_graphs_to_a_graph_replay(replay, report, tmp_path):
    """Most of this capture's idle time is one blocking copy (the ``blocked`` case, tests/analyses/test_host_during.py),
    whose action advises no graph either; with that case set aside (a team's rules file), the general idle action
    is the one for a job that already replays graphs."""
    rule = load_pack().check("device-idle").cause
    idle = next(c for c in report.causes if c.check == "device-idle")
    assert idle.action.startswith("Find out what hipMemcpyWithStream waits for") and "CUDA graphs" not in idle.action
    rules = tmp_path / "rules.toml"
    rules.write_text('[[check]]\nid = "device-idle"\nblocked_share = 2.0\n')
    unblocked = next(c for c in profan.analyze(SGLANG, rules=[rules]).causes if c.check == "device-idle")
    longest = " The longest idle stretch: rank 0, 463.3 ms; the host meanwhile in aten::copy_ (463.0 ms), blocked in "
    expected = rule["graph_action"].format(
        graph_events=len(_replayed(replay)), longest_gap=longest + "hipMemcpyWithStream (463.0 ms)."
    )
    assert unblocked.action == expected and unblocked.action != rule["action"]


def test_a_capture_that_cannot_be_read_is_one_warning_not_a_failed_rank(replay, tmp_path):
    """A truncated capture trace is named in one warning; the replay is analysed all the same, its graph kernels
    counted as not mapped."""
    (tmp_path / "capture_traces").mkdir()
    data = gzip.decompress(CAPTURE.read_bytes())
    bad = tmp_path / "capture_traces" / CAPTURE.name
    bad.write_bytes(gzip.compress(data[: len(data) // 2]))
    shutil.copy(REPLAY, tmp_path / REPLAY.name)
    rep = profan.analyze(tmp_path)
    n = len(_replayed(replay))
    assert any(f"capture_traces/{CAPTURE.name}: " in w and "capture is not used" in w for w in rep.warnings)
    assert any(f"{n:,} kernels replayed" in m and "0 took" in m for m in rep.notes)
    assert rep.tables["trace_steps"].filter(pl.col("scope") == "trace")["graph_events"].item() == n
