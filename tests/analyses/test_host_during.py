"""What the host does while the device sits idle: the innermost host span (op, Python frame or runtime call) that
covers at least half of an idle stretch names it, and a capture's first step is idle from its start on the host.

On the real TimeSformer trace (a transformers video pipeline, one step) the GPU waits 218 ms at the start of the
step while the host preprocesses the video: the verdict's first cause, where the step windows alone (first to last
device event, 160 ms) hid it. On the real SGLang decode trace one blocking ``hipMemcpyWithStream`` holds 463 ms of
the 474 ms traced span: the idle cause's ``blocked`` case. Every value is recomputed here from the raw events the
findings cite."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import TORCH, analysed

TIMESFORMER = TORCH / "timesformer_h100_1rank"
SGLANG = TORCH / "sglang_qwen3-8b_decode_mi300x_graph"
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"}


def _events(path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _innermost(events: list[dict], start: float, end: float, kinds: set[str]) -> dict:
    """The shortest host span of at least 500 µs (not a ProfilerStep) covering half of [start, end): the rule,
    applied to the raw events."""
    covering = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in kinds
        and not str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("dur", 0) >= 500
        and min(end, e["ts"] + e["dur"]) - max(start, e["ts"]) >= 0.5 * (end - start)
    ]
    return min(covering, key=lambda e: e["dur"])


def test_the_first_step_waits_for_the_hosts_preprocessing():
    report = analysed(TIMESFORMER)
    (found,) = [f for f in report.findings if f.check == "idle-between-steps"]
    events = _events(TIMESFORMER / "facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    gap, host = found.evidence
    step, first = (events[i] for i in gap.events)
    assert (step["name"], step["cat"]) == ("ProfilerStep#6", "user_annotation")  # the step's start on the host
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert first["ts"] == min(e["ts"] for e in device)  # the step's first device event: nothing ran before it
    idle = first["ts"] - step["ts"]
    assert found.metrics["idle_before_us"] == pytest.approx(idle, abs=1e-3) == pytest.approx(218120.34, abs=0.01)
    # the host meanwhile: the innermost span covering half of that time, the image processor's preprocess
    (op,) = (events[i] for i in host.events)
    expected = _innermost(events, step["ts"], first["ts"], HOST_CATS - {"cuda_runtime", "cuda_driver"})
    assert op is expected and op["name"] == "transformers/models/videomae/image_processing_videomae.py(235): preprocess"
    inside = min(first["ts"], op["ts"] + op["dur"]) - max(step["ts"], op["ts"])
    assert found.metrics["host_op_us"] == pytest.approx(inside, abs=1e-3) == pytest.approx(178199.70, abs=0.01)
    assert found.metrics["host_op"] == op["name"] and op["name"] in found.message
    # the verdict: this cause first, its gain the idle time, measured against the period (window + idle)
    cause = report.causes[0]
    assert cause.check == "idle-between-steps" and found.explained_by == cause.id
    assert cause.title == (
        "The GPU waits for the host before each step's first kernel on rank 0: 218.1 ms per step (57.7% of the "
        "step period), the host in transformers/models/videomae/image_processing_videomae.py(235): preprocess"
    )
    window = found.metrics["step_us"]
    assert cause.impact_us == pytest.approx(idle, abs=1e-3)
    assert cause.step_us == pytest.approx(window + idle, abs=1e-3)
    assert "decoding and preprocessing in DataLoader workers" in cause.action and "(178.2 ms)" in cause.action


def test_a_blocking_runtime_call_holds_most_of_the_idle_time():
    report = analysed(SGLANG)
    cause = next(c for c in report.causes if c.check == "device-idle")
    events = _events(SGLANG / "sglang_Qwen3-8B_decode.json.gz")
    (idle,) = [f for f in report.findings if f.check == "device-idle"]
    gap = next(e for e in idle.evidence if e.select.get("role") == "longest idle")
    before, after = (events[i] for i in gap.events)
    start, end = before["ts"] + before["dur"], after["ts"]
    assert idle.metrics["gap_us"] == pytest.approx(end - start, abs=1e-3) == pytest.approx(463295.41, abs=0.01)
    call_item = next(e for e in idle.evidence if "runtime call" in e.note)
    (call,) = (events[i] for i in call_item.events)
    assert call is _innermost(events, start, end, {"cuda_runtime", "cuda_driver"})
    assert call["name"] == "hipMemcpyWithStream"
    inside = min(end, call["ts"] + call["dur"]) - max(start, call["ts"])
    assert idle.metrics["host_call_us"] == pytest.approx(inside, abs=1e-3)
    assert inside >= 0.5 * idle.metrics["free_us"]  # most of the rank's idle time: the blocked case
    op_item = next(e for e in idle.evidence if "host op" in e.note)
    (op,) = (events[i] for i in op_item.events)
    assert op["name"] == "aten::copy_" and op["ts"] <= call["ts"] and call["ts"] + call["dur"] <= op["ts"] + op["dur"]
    assert cause.title == (
        "The GPU is idle 97.9% of the traced span (no steps) on 1 rank, most of it one 463.3 ms stretch while "
        "the host is blocked in hipMemcpyWithStream"
    )
    assert "hipMemcpyWithStream (463.0 ms, inside aten::copy_)" in cause.assumption
    assert "non_blocking=True" in cause.action and "steady-state" in cause.verify
    assert cause.impact_us is None


def test_the_longest_idle_stretch_is_named_in_the_idle_cause():
    """The A100 NCCL trace: the host-bound idle cause names its longest stretch and the host op in it — DDP
    unflattening the broadcast buffers before the forward pass."""
    report = analysed(TORCH / "nccl_a100_1rank")
    cause = next(c for c in report.causes if c.check == "device-idle")
    events = _events(TORCH / "nccl_a100_1rank" / "nccl_data.json.gz")
    found = [m for f in report.findings if f.check == "device-idle" for m in (f.members or [f])]
    worst = max(found, key=lambda f: f.metrics["gap_us"])
    gap = next(e for e in worst.evidence if e.select.get("role") == "longest idle")
    before, after = (events[i] for i in gap.events)
    start, end = before["ts"] + before["dur"], after["ts"]
    op = _innermost(events, start, end, HOST_CATS - {"cuda_runtime", "cuda_driver"})
    assert op["name"] == worst.metrics["host_op"] == "aten::unflatten_dense_tensors"
    assert (worst.rank, worst.step) == (0, 4)
    assert f"The longest idle stretch: rank 0, step 4, {(end - start) / 1000:,.1f} ms" in cause.action
    assert "aten::unflatten_dense_tensors" in cause.action
