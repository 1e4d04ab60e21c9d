"""Serving captures: model iterations, their phase and their time, held against the raw trace events and the
captures' truth (ground_truth.toml beside each CPU capture; the GPU captures' own annotations and TraceLens's
timeline)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
import tomllib

from profan.sources.trace import kineto_iterations
from profan.sources.trace.kineto_rank import load_cached

REPO = Path(__file__).resolve().parents[1]
CPU = {
    "uniform": REPO / "fixtures/torch/serving_llama_cpu_uniform",
    "mixed": REPO / "fixtures/torch/serving_llama_cpu_mixed",
}
SGLANG = REPO / "fixtures/torch/sglang_qwen3-8b_decode_mi300x_graph"
SGLANG_TRACE = SGLANG / "sglang_Qwen3-8B_decode.json.gz"
VLLM = REPO / "fixtures/torch/vllm_gptoss_decode_mi300x_graph"
VLLM_TRACE = VLLM / "graph_execution.json.gz"
TRAINING = REPO / "fixtures/torch/gloo_moe_cpu_4rank/sleep/rank0.pt.trace.json.gz"


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def _iterations(path: Path) -> pl.DataFrame:
    kt, _ = load_cached(path)
    out = kineto_iterations.rank_iterations(kt, kt.device, "user_annotation")
    assert out is not None, f"{path}: no iterations"
    return out


@pytest.mark.parametrize("case", sorted(CPU))
def test_cpu_generate_iterations_are_the_model_forwards(case):
    """One iteration per top-level forward the raw trace records, each cited by that forward's event, with the
    phase the capture's truth says and the tokens of its embedding input."""
    folder = CPU[case]
    truth = tomllib.loads((folder / "ground_truth.toml").read_text())
    events = _events(folder / "trace.json.gz")
    forwards = [
        (i, e) for i, e in enumerate(events) if re.fullmatch(r"nn\.Module: LlamaForCausalLM_\d+", e.get("name", ""))
    ]
    embeds = [e["args"]["Input Dims"][1] for e in events if e.get("name") == "aten::embedding"]
    it = _iterations(folder / "trace.json.gz")
    assert it.height == len(forwards) == truth["iterations"]
    assert it["marker"].unique().to_list() == ["module_forward"]
    assert it["event_idx"].to_list() == [i for i, _ in forwards]
    assert it["phase"].to_list() == truth["phases"]
    assert it["query_len"].to_list() == [dims[1] for dims in embeds]
    assert it["tokens"].to_list() == [dims[0] * dims[1] for dims in embeds]
    assert it["batch"].to_list() == [truth["requests"]] * truth["iterations"]
    # the periods tile the iterations' span: first forward's start to the last forward's end
    span = forwards[-1][1]["ts"] + forwards[-1][1]["dur"] - forwards[0][1]["ts"]
    assert it["period_us"].sum() == pytest.approx(span, rel=1e-2)
    assert it["host_us"].to_list() == pytest.approx([e["dur"] for _, e in forwards], abs=1e-3)


def test_cpu_iteration_busy_time_is_the_top_level_ops_inside_the_forward():
    """An iteration's busy time on a CPU-only capture: the union of the main thread's top-level cpu_ops inside
    the forward, computed here from the raw events."""
    events = _events(CPU["mixed"] / "trace.json.gz")
    fwd = [e for e in events if e.get("name", "").startswith("nn.Module: LlamaForCausalLM_")][1]
    lo, hi = fwd["ts"], fwd["ts"] + fwd["dur"]
    ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] <= hi)
    top, end = [], -1.0
    for start, stop in ops:  # top-level: not inside an earlier op
        if start >= end:
            top.append((start, stop))
            end = stop
        else:
            end = max(end, stop)
    busy = sum(stop - start for start, stop in top)
    row = _iterations(CPU["mixed"] / "trace.json.gz").row(1, named=True)
    assert row["kernels"] == len(top)
    assert row["busy_us"] == pytest.approx(busy, rel=1e-6)


@pytest.mark.parametrize(
    ("trace", "busy_ms", "idle_between_ms"),
    [(SGLANG_TRACE, 9.773, 463.977), (VLLM_TRACE, 10.718, 0.025)],
)
def test_graph_replay_capture_is_one_decode_iteration(trace, busy_ms, idle_between_ms):
    """A real decode capture of one graph replay: one iteration, marked by vLLM's execute annotation (the raw
    trace has exactly one, naming 0 context and 32 generation requests), decode by that annotation; its busy
    time and the idle between its kernels are TraceLens's timeline's (busy, idle)."""
    events = _events(trace)
    execute = [i for i, e in enumerate(events) if re.match(r"execute_\d+_context_0\(", e.get("name", ""))]
    it = _iterations(trace)
    assert len(execute) == 1 and it.height == 1
    row = it.row(0, named=True)
    assert (row["marker"], row["rule"], row["event_idx"]) == ("annotation", "vllm-execute", execute[0])
    assert (row["phase"], row["phase_by"], row["phase_event"]) == ("decode", "vllm-decode-only", execute[0])
    assert row["busy_us"] / 1000 == pytest.approx(busy_ms, abs=1e-3)
    assert row["between_kernels_us"] / 1000 == pytest.approx(idle_between_ms, abs=1e-3)


def test_training_capture_has_no_iterations():
    """A training capture (autograd backward ops) is no serving capture, whatever forwards it runs."""
    kt, _ = load_cached(TRAINING)
    assert kt.trains
    assert kineto_iterations.rank_iterations(kt, kt.device, "user_annotation") is None
