"""Chains of elementwise kernels (check unfused-elementwise): on the real Qwen1.5-0.5B H100 trace (eager Hugging
Face decoding, the device busy, no idle or waiting cause) the verdict is their fusion, its saving recomputed here
from the raw trace; the traces where the chains are a small part of the step get no finding."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import TORCH, analysed

from profan.model.evidence import MAX_CITED
from profan.rulepack import pack

QWEN = TORCH / "qwen1.5-0.5b_h100_1rank"
TRACE = QWEN / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")  # cudaLaunchKernel, and cuLaunchKernel (the cutlass GEMM here)


def _step_runs(step: int) -> list[list[dict]]:
    """The runs of consecutive elementwise kernels per stream among the device events the step's CPU side
    launched (by correlation id), at least the check's shortest run — recomputed from the raw JSON. A GEMM
    launched through the driver API sits between two chains: missing it would join them."""
    chk = pack.load().check("unfused-elementwise")
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    (mark,) = [e for e in events if e.get("name") == f"ProfilerStep#{step}" and e.get("cat") == "user_annotation"]
    lo, hi = mark["ts"], mark["ts"] + mark["dur"]
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in LAUNCH_CATS and lo <= e["ts"] <= hi and "correlation" in e.get("args", {})
    }
    dev = [
        (i, e) for i, e in enumerate(events) if e.get("cat") in DEVICE_CATS and e["args"].get("correlation") in launched
    ]
    dev.sort(key=lambda x: (x[1]["tid"], x[1]["ts"], x[0]))
    runs, run, stream = [], [], None
    for i, e in dev:
        ew = re.search(chk["elementwise_kernel"], e["name"]) is not None
        if not ew or e["tid"] != stream:
            if len(run) >= chk["min_run"]:
                runs.append(run)
            run = []
        stream = e["tid"]
        if ew:
            run.append({"idx": i, **e})
    if len(run) >= chk["min_run"]:
        runs.append(run)
    return runs


def test_qwen_elementwise_chains_are_the_cause_with_the_saving_recomputed():
    report = analysed(QWEN)
    (f,) = [f for f in report.ungrouped() if f.check == "unfused-elementwise" and f.step == 6]
    runs = _step_runs(6)
    saving = sum(sum(e["dur"] for e in r) - max(e["dur"] for e in r) for r in runs)
    assert f.metrics["runs"] == len(runs) == 74
    assert f.metrics["kernels"] == sum(len(r) for r in runs) == 763
    assert f.metrics["saving_us"] == pytest.approx(saving, abs=1e-3)
    assert f.metrics["saving_us"] == pytest.approx(14692.938, abs=1e-3)
    assert f.severity == "critical" and f.metrics["share"] == pytest.approx(saving / 34892.419, abs=1e-4)
    # the verdict: one cause, the step's saving as its gain, the rotary embedding of every layer named first
    c = report.causes[0]
    assert c.check == "unfused-elementwise" and c.impact_us == pytest.approx(saving, abs=1e-3)
    assert "(aten::mul, aten::neg, aten::cat, aten::add, aten::copy_), 0.38 ms (×24)" in c.action
    # the evidence cites the kernels of the runs that save most, longest first: each an elementwise kernel of step 6
    cited = list(f.evidence[0].events)
    by_idx = {e["idx"]: e for r in runs for e in r}
    order = sorted(runs, key=lambda r: (-(sum(e["dur"] for e in r) - max(e["dur"] for e in r)), r[0]["ts"]))
    top = sorted((e for r in order[:3] for e in r), key=lambda e: -e["dur"])  # 3 runs of 13 kernels
    assert len(top) == 39 and len(cited) == MAX_CITED and set(cited) <= {e["idx"] for e in top}
    assert [by_idx[i]["dur"] for i in cited] == [e["dur"] for e in top[:MAX_CITED]]


@pytest.mark.parametrize("sample", ["timesformer_h100_1rank", "resnet50_gpu_2021_1rank", "dlrm_v100_8rank"])
def test_chains_that_are_a_small_part_of_the_step_make_no_finding(sample):
    report = analysed(TORCH / sample)
    assert not [f for f in report.ungrouped() if f.check == "unfused-elementwise"]
    assert not [c for c in report.causes if c.check == "unfused-elementwise"]


def test_ranks_read_from_kernel_files_say_the_chains_were_not_assessed():
    """An Ascend kernel file is reduced to groups, not kept in issue order, so its chains are not looked for: the
    report says so for the ranks that have kernel rows (Qwen3: ranks 0 and 2 write kernel_details.csv), rather
    than let the missing finding read as "no chains"; a Kineto job has no such note."""
    from conftest import ASCEND

    qwen3 = analysed(ASCEND / "msinsight-qwen3-4rank-2025q4")
    with_kernels = sorted(r["rank"] for r in qwen3.source["ranks"] if "kernel_details" in r["files"])
    assert with_kernels == [0, 2]
    (note,) = [n for n in qwen3.notes if "unfused-elementwise" in n]
    assert note.startswith("chains of elementwise kernels (unfused-elementwise) not assessed") and note.endswith(
        ": 0, 2"
    )
    assert not [n for n in analysed(TORCH / "dlrm_v100_8rank").notes if "unfused-elementwise" in n]
