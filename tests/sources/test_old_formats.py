"""Traces of other writers: the 2020-21 PyTorch profiler (categories Operator / Kernel / Runtime / Memcpy / Memset,
ProfilerStep#N as an Operator, ``external id`` on device and runtime events, string tids, a bare event array) and
Meta MTIA's device events (mtia_ccp_events / mtia_runtime). Every expected value is read from the raw trace here."""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest
from conftest import TORCH

import profan
from profan.model.errors import ProfanInputError
from profan.rulepack.pack import load as load_pack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.trace import kineto

RESNET = TORCH / "resnet50_gpu_2021_1rank"
TRACE = RESNET / "worker0.pt.trace.json.gz"
DEVICE = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}  # the old names and today's
STEP = re.compile(r"^ProfilerStep#(\d+)$")


@pytest.fixture(scope="module")
def raw() -> list[dict]:
    with gzip.open(TRACE, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


@pytest.fixture(scope="module")
def kt() -> kineto.KinetoTrace:
    return kineto.load(TRACE)


@pytest.fixture(scope="module")
def report() -> profan.Report:
    return profan.analyze(RESNET)


def _raw_steps(raw: list[dict]) -> list[tuple[int, int, float, float]]:
    """(event index, step number, start, end) of the ProfilerStep#N events, which this writer files as Operator."""
    return [
        (i, int(m.group(1)), e["ts"], e["ts"] + e["dur"])
        for i, e in enumerate(raw)
        if e.get("ph") == "X" and e.get("cat") == "Operator" and (m := STEP.match(e.get("name", "")))
    ]


def _raw_device(raw: list[dict]) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(raw) if e.get("ph") == "X" and e.get("cat") in DEVICE]


def test_steps_are_the_operator_profilersteps(raw, kt, report):
    """The steps are the ProfilerStep#N Operator events: their numbers, event indexes and CPU windows; the report's
    step rows cite them."""
    want = _raw_steps(raw)
    assert want, "the sample has ProfilerStep events"
    got = kt.steps.sort("start_us").select("event_idx", "step", "start_us", "end_us").rows()
    assert got == [(i, n, float(a), float(b)) for i, n, a, b in want]
    rows = report.tables["trace_steps"].filter(pl.col("scope") == "step").sort("step")
    assert rows["step"].to_list() == sorted(n for _, n, _, _ in want)
    assert dict(zip(rows["step"], rows["step_event"], strict=True)) == {n: i for i, n, _, _ in want}


def test_copies_and_fills_are_device_activity(raw, kt, report):
    """Memcpy and Memset events are counted as device time (as gpu_memcpy / gpu_memset), with their bytes; the
    breakdown sums every kernel, copy and fill of the trace."""
    device = _raw_device(raw)
    counts = kt.device.group_by("cat").len()
    want = {new: sum(e["cat"] == old for _, e in device) for old, new in DEVICE.items()}
    assert dict(counts.iter_rows()) == want and want["gpu_memcpy"] and want["gpu_memset"]
    copies = kt.device.filter(pl.col("cat") == "gpu_memcpy").sort("event_idx")
    assert copies["bytes"].to_list() == [e["args"]["bytes"] for _, e in device if e["cat"] == "Memcpy"]
    b = report.breakdown
    assert b["kernels"].sum() == len(device)
    assert b["time_us"].sum() == pytest.approx(sum(e["dur"] for _, e in device))


def test_launches_and_context_links(raw, kt):
    """A device event's launch is the Runtime event of its correlation id (time and step), and its context the
    Operator whose External id its ``external id`` names."""
    launch = {e["args"]["correlation"]: e["ts"] for e in raw if e.get("cat") == "Runtime"}
    ops = {e["args"]["External id"]: e["name"] for e in raw if e.get("cat") == "Operator"}
    dev = {r["event_idx"]: r for r in kt.device.iter_rows(named=True)}
    linked = 0
    for i, e in _raw_device(raw):
        got = dev[i]
        assert got["launch_us"] == launch.get(e["args"]["correlation"])
        if e["args"]["external id"] in ops:
            assert got["context"] == ops[e["args"]["external id"]]
            linked += 1
    assert linked > len(dev) // 2
    launched = sum(e["args"]["correlation"] in launch for _, e in _raw_device(raw))
    assert kt.device["launch_us"].is_not_null().sum() == launched


def test_the_report_says_which_categories_were_read_as_todays(raw, report):
    aliases = default_roles().kineto_category_aliases
    counts = {c: sum(e.get("cat") == c and e.get("ph") == "X" for e in raw) for c in aliases}
    note = next(n for n in report.notes if "kineto_category_aliases" in n)
    for cat, n in counts.items():
        if n:
            assert f"{n:,} {cat} as {aliases[cat]}" in note


def test_unclassified_share_is_below_the_check(report):
    """With steps, copies and launching ops read, the kernels that match no bucket rule stay below the warning
    share of check unclassified-time (25 % before this format was read)."""
    b = report.breakdown
    share = b.filter(pl.col("bucket") == "unclassified")["time_us"].sum() / b["time_us"].sum()
    assert share < load_pack().check("unclassified-time")["warning_share"]


def test_a_bare_event_array_reads_as_the_same_trace(raw, report, tmp_path):
    """The same events as a bare JSON array (no top-level object, as the 2020-21 profiler could write): found as a
    Kineto trace, and the same steps and device time."""
    folder = tmp_path / "array"
    folder.mkdir()
    (folder / "worker0.json").write_text(json.dumps(raw))
    got = profan.analyze(folder).tables["trace_steps"]
    want = report.tables["trace_steps"]
    cols = ["scope", "step", "events", "busy_us", "free_us"]
    assert got.select(cols).sort("scope", "step").equals(want.select(cols).sort("scope", "step"))
    assert got.filter(pl.col("scope") == "step").height == len(_raw_steps(raw))


# ----------------------------------------------------------------------------------------------------- MTIA


def _mtia_trace(path, n: int = 6) -> list[dict]:
    """A synthetic Kineto trace of an MTIA device (no public MTIA trace was found): Kineto's MTIA categories
    (libkineto ActivityType.h: mtia_ccp_events, on-device, an alias of CONCURRENT_KERNEL; mtia_runtime, the host
    runtime calls, an alias of RUNTIME) with the CUDA layout of args (correlation id, External id)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 2000}]
    for i in range(n):
        t = 100 + 300 * i
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 60,
             "args": {"External id": 10 + i}},
            {"ph": "X", "cat": "mtia_runtime", "name": "launchKernel", "pid": 1, "tid": 1, "ts": t + 5, "dur": 20,
             "args": {"External id": 10 + i, "correlation": 500 + i}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": f"mtia_gemm_{i % 2}", "pid": 2, "tid": 7, "ts": t + 40,
             "dur": 50 + 10 * i, "args": {"correlation": 500 + i, "device": 0}},
        ]  # fmt: skip
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return ev


def test_mtia_device_events_are_the_device_lanes(tmp_path):
    """MTIA's on-device events are analysed as the device's kernels, launched through mtia_runtime by their CPU
    op — never the CPU ops in their place — and the report says they were read so."""
    folder = tmp_path / "mtia"
    folder.mkdir()
    ev = _mtia_trace(folder / "rank0.json")
    dev = [e for e in ev if e["cat"] == "mtia_ccp_events"]
    kt = kineto.load(folder / "rank0.json")
    assert not kt.cpu_only and kt.device.height == len(dev)
    assert kt.device["context"].to_list() == ["aten::mm"] * len(dev)
    assert kt.device["step"].to_list() == [3] * len(dev)
    rep = profan.analyze(folder)
    busy = rep.tables["trace_steps"].filter(pl.col("scope") == "step")["busy_us"].item()
    assert busy == pytest.approx(sum(e["dur"] for e in dev))  # disjoint here: the union is the sum
    assert any(f"{len(dev):,} mtia_ccp_events as kernel" in n for n in rep.notes)
    assert not any("no GPU activity" in n for n in rep.notes)


def test_a_rules_file_may_name_another_writers_categories(tmp_path):
    """A user rules file can map a category of its own writer to today's; one that is no 'theirs=today's' text is
    one line naming the file."""
    good = tmp_path / "good.toml"
    good.write_text('[roles.kineto_category_aliases]\nvalue = ["Operator=cpu_op", "npu_kernel=kernel"]\n')
    assert load_pack([good]).roles.kineto_category_aliases == {"Operator": "cpu_op", "npu_kernel": "kernel"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[roles.kineto_category_aliases]\nvalue = ["Operator"]\n')
    with pytest.raises(ProfanInputError) as exc:
        load_pack([bad])
    assert str(bad) in str(exc.value) and "kineto_category_aliases" in str(exc.value)


def test_device_events_of_an_unknown_category_are_named_not_dropped_silently(tmp_path):
    """A trace whose device activity is in a category no role names (here mtia_insight, an MTIA category profan does
    not analyse) falls back to the CPU ops, and the report names the category and its count — also when the
    parse is served from the cache."""
    folder = tmp_path / "unknown"
    folder.mkdir()
    ev = _mtia_trace(folder / "rank0.json")
    for e in ev:
        if e["cat"] in ("mtia_ccp_events", "mtia_runtime"):
            e["cat"] = "mtia_insight"
    (folder / "rank0.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    n = sum(e["cat"] == "mtia_insight" for e in ev)
    for _ in range(2):  # parsed, then from the cache
        rep = profan.analyze(folder)
        assert any("no GPU activity" in x for x in rep.notes)
        assert any(f"mtia_insight: {n:,}" in x and "kineto_category_aliases" in x for x in rep.notes)
