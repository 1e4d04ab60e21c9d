"""An MoE layer's device time by part (dispatch, combine, routing, experts) on the real MoE captures: every part's
time is the sum of the raw kernel events of its family, the parts split the breakdown's MoE and communication
rows without changing their totals, each names the rule that decided it, and no capture leaves 5 % of its device
time unclassified."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from conftest import ASCEND, TORCH

import profan

CAPTURES = {
    "b200_vllm": TORCH / "moe_b200_rank0",
    "gptoss_mi300x": TORCH / "vllm_gptoss_decode_mi300x_graph",
    "ascend_gmm": ASCEND / "vllm-ascend-msprof-gmm-1op",
    "gloo_balanced": TORCH / "gloo_moe_seeds" / "balanced_seed1",
    "gloo_hot": TORCH / "gloo_moe_seeds" / "hot_r1e2_seed12",
    "gloo_sleep": TORCH / "gloo_moe_cpu_4rank" / "sleep",
    "mixtral_cpu": TORCH / "serving_mixtral_cpu_moe",
}


@pytest.fixture(scope="module")
def reports():
    return {name: profan.analyze(path) for name, path in CAPTURES.items()}


@pytest.mark.parametrize("name", CAPTURES)
def test_unclassified_under_five_percent_and_parts_keep_bucket_totals(reports, name):
    tables = reports[name].tables
    b, parts = tables["breakdown"], tables["moe_parts"]
    total = b["time_us"].sum()
    assert b.filter(pl.col("bucket") == "unclassified")["time_us"].sum() < 0.05 * total
    moe = b.filter(pl.col("bucket") == "moe")["time_us"].sum()
    assert parts.filter(pl.col("bucket") == "moe")["time_us"].sum() == pytest.approx(moe)
    comm = b.filter(pl.col("bucket") == "communication")["time_us"].sum()
    assert parts.filter(pl.col("bucket") == "communication")["time_us"].sum() <= comm + 1e-6
    assert parts["rules"].str.len_chars().min() > 0  # every row names the rules that decided it


def _kernels(path, prefix: str) -> float:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return sum(e["dur"] for e in events if e.get("cat") == "kernel" and e["name"].startswith(prefix))


def test_b200_expert_gemms_are_the_bmm_kernels_moe_forward_launched(reports):
    """TRT-LLM's bmm_* expert kernels on B200 carry no MoE word; the launching vllm::moe_forward (GPU-MOE-010)
    makes them the experts part, and their time is the raw events'."""
    parts = reports["b200_vllm"].tables["moe_parts"]
    experts = parts.filter(pl.col("part") == "experts").row(0, named=True)
    assert experts["rules"] == "GPU-MOE-010" and experts["decided_by"] == "context=vllm::moe_forward"
    assert experts["time_us"] == pytest.approx(_kernels(TORCH / "moe_b200_rank0" / "eager_trace.json.gz", "bmm_"))
    routing = parts.filter(pl.col("part") == "routing").row(0, named=True)
    assert routing["rules"] == "GPU-MOE-001" and routing["top_op"].startswith("moe::dev::finalize")


def test_gptoss_matmul_ogs_are_the_experts_by_name(reports):
    parts = reports["gptoss_mi300x"].tables["moe_parts"]
    experts = parts.filter(pl.col("part") == "experts").row(0, named=True)
    raw = _kernels(TORCH / "vllm_gptoss_decode_mi300x_graph" / "graph_execution.json.gz", "_matmul_ogs_")
    assert experts["rules"] == "GPU-MOE-006" and experts["time_us"] == pytest.approx(raw)


def test_gloo_all_to_all_without_ranges_is_the_ep_exchange_direction_unsaid(reports):
    """The CPU runs record no dispatch/combine range: their all-to-alls are one all_to_all row (CPU-EP-003),
    as much time as the raw gloo:all_to_all and c10d::alltoall_base_ events of rank 0 in step 2."""
    path = TORCH / "gloo_moe_seeds" / "balanced_seed1" / "rank0.pt.trace.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    (step,) = [e for e in events if e["name"] == "ProfilerStep#2"]
    inside = [e for e in events if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    raw = sum(e["dur"] for e in inside if e["name"] in ("gloo:all_to_all", "c10d::alltoall_base_"))
    parts = reports["gloo_balanced"].tables["moe_parts"]
    row = parts.filter(pl.col("rank") == 0, pl.col("step") == 2, pl.col("part") == "all_to_all").row(0, named=True)
    assert row["rules"] == "CPU-EP-003" and row["time_us"] == pytest.approx(raw, rel=1e-6)


def _top_level_ops_in_modules(path, module_prefix: str) -> list[dict]:
    """The main thread's top-level cpu_ops that start inside an nn.Module frame whose name starts with
    ``module_prefix``: the frames and the ops read straight from the trace's events."""
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    frames = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith(module_prefix)]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], -1.0
    for op in ops:  # an op nested in an earlier op of the same thread is that op's work
        if op["ts"] >= end:
            top.append(op)
            end = op["ts"] + op["dur"]
    return [op for op in top if any(f["ts"] <= op["ts"] < f["ts"] + f["dur"] for f in frames)]


def test_mixtral_experts_and_router_are_decided_by_their_modules(reports):
    """transformers 5's Mixtral runs its experts as aten::_grouped_mm, aten::silu and aten::cumsum inside an
    nn.Module MixtralExperts, and its gating inside MixtralTopKRouter: named like any dense layer's ops, they are
    the experts and routing parts by their module (CPU-MOE-009, CPU-MOE-008), each part the raw ops' time. The
    per-expert token count inside the experts (aten::histc) is routing by its name (CPU-MOE-001), which comes
    first."""
    path = TORCH / "serving_mixtral_cpu_moe" / "trace.json.gz"
    in_experts = _top_level_ops_in_modules(path, "nn.Module: MixtralExperts")
    counting = [op for op in in_experts if op["name"] == "aten::histc"]
    computing = [op for op in in_experts if op["name"] != "aten::histc"]
    gating = _top_level_ops_in_modules(path, "nn.Module: MixtralTopKRouter") + counting
    assert any(op["name"] == "aten::_grouped_mm" for op in computing) and counting
    parts = reports["mixtral_cpu"].tables["moe_parts"]
    experts = parts.filter(pl.col("part") == "experts").row(0, named=True)
    assert "CPU-MOE-009" in experts["rules"] and experts["decided_by"].endswith("/MixtralSparseMoeBlock/MixtralExperts")
    assert experts["time_us"] == pytest.approx(sum(op["dur"] for op in computing), rel=1e-6)
    assert experts["kernels"] == len(computing)
    routing = parts.filter(pl.col("part") == "routing").row(0, named=True)
    assert routing["time_us"] == pytest.approx(sum(op["dur"] for op in gating), rel=1e-6)
    assert routing["kernels"] == len(gating) and "CPU-MOE-008" in routing["rules"]
