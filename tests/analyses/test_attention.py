"""Attention run unfused (check unfused-attention): on the real TimeSformer trace (eager attention on an H100,
a compute-bound step no idle or waiting check explains) the verdict is its cause, with the saving, the action and
the rows; the same trace with its softmax kernels renamed to a FlashAttention kernel, and the real traces that run
no eager attention, get no such finding."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import TORCH, analysed

import profan
from profan.model.textfmt import ms
from profan.ranks.rankmap import read_ranks
from profan.rulepack.pack import load
from profan.sources.discovery.discover import discover

TIMESFORMER = TORCH / "timesformer_h100_1rank"
TRACE = TIMESFORMER / "facebook_timesformer-base-finetuned-k400__1016002.json.gz"


def _events() -> list[dict]:
    return json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]


def _step_window(events: list[dict], step: int) -> tuple[float, float]:
    (mark,) = [e for e in events if e.get("name") == f"ProfilerStep#{step}" and e.get("cat") == "user_annotation"]
    return mark["ts"], mark["ts"] + mark["dur"]


def test_eager_attention_is_the_cause_with_its_saving_and_rows():
    report = analysed(TIMESFORMER)
    (f,) = [f for f in report.findings if f.check == "unfused-attention"]
    assert (f.rank, f.step, f.severity) == (0, 6, "critical")
    # the softmax kernels of the step, summed from the raw trace (attention's score work includes them all)
    events = _events()
    lo, hi = _step_window(events, 6)
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    softmax = sum(e["dur"] for e in kernels if "softmax" in e["name"].lower() and lo <= e["ts"] < hi)
    assert softmax == pytest.approx(68_781.297, abs=1e-3)
    m = f.metrics
    assert m["softmax_us"] == pytest.approx(softmax, abs=1e-2)
    assert m["attention_us"] == pytest.approx(m["softmax_us"] + m["other_us"] + m["matmul_us"], abs=1e-2)
    assert m["largest"][0].startswith("at::native::cunn_SoftMaxForward 68.7 ms (12 calls)")
    # the step's summed kernel time is TraceLens's busy time for this trace (tracelens_gpu_timeline.csv)
    assert m["device_time_us"] == pytest.approx(158_433.174, abs=1e-3)
    assert m["share"] == pytest.approx(softmax / m["device_time_us"], abs=1e-4)
    # the attention bucket of the breakdown is the finding's attention
    bd = report.breakdown.filter((report.breakdown["step"] == 6) & (report.breakdown["bucket"] == "attention"))
    assert bd["time_us"].item() == pytest.approx(m["attention_us"], abs=1e-2)
    assert bd["kernels"].item() == m["kernels"] == f.evidence[0].row_count
    # the cited events are attention kernels of step 6, the longest first
    cited = [events[i] for i in f.evidence[0].events]
    assert all(e["cat"] == "kernel" and lo <= e["ts"] < hi for e in cited)
    assert [e["dur"] for e in cited] == sorted((e["dur"] for e in cited), reverse=True)
    assert "cunn_SoftMaxForward" in cited[0]["name"]
    # the verdict: its cause, the finding under it, its saving the score work, and what to change (after the
    # host's preprocessing before the step, tests/analyses/test_host_during.py)
    (cause,) = [c for c in report.causes if c.check == "unfused-attention"]
    assert cause.check == "unfused-attention" and f.key in cause.explains_keys
    assert cause.impact_us == pytest.approx(m["softmax_us"])
    assert ms(cause.impact_us) in f.message
    assert "scaled_dot_product_attention" in cause.action and "cunn_SoftMaxForward" in cause.action
    assert cause.evidence == f.evidence


def test_a_fused_attention_kernel_means_no_finding(tmp_path):
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "cunn_SoftMaxForward" in e.get("name", ""):
            e["name"] = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >"
            renamed += 1
    assert renamed
    (tmp_path / TRACE.name.removesuffix(".gz")).write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert not [f for f in report.findings if f.check == "unfused-attention"]
    assert report.breakdown.filter(report.breakdown["bucket"] == "attention")["time_us"].sum() > 0


def test_a_kv_cache_write_beside_eager_attention_is_not_fused_attention(tmp_path):
    """A serving engine writes its KV cache with a kernel of its own (vLLM's reshape_and_cache, SGLang's
    store_kvcache) whether its attention is fused or eager: such a kernel is attention's time, but no sign that
    the scores were fused. Step 6's first copy kernel of the real eager trace renamed to vLLM's: still unfused."""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    lo, hi = _step_window(doc["traceEvents"], 6)
    (copy, *_) = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel" and lo <= e["ts"] < hi and "copy" in e.get("name", "").lower()
    ]
    copy["name"] = (
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
    )
    (tmp_path / TRACE.name.removesuffix(".gz")).write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    (f,) = [f for f in report.findings if f.check == "unfused-attention"]
    assert (f.step, f.severity) == (6, "critical")
    assert f.metrics["softmax_us"] == pytest.approx(68_781.297, abs=1e-2)
    disc = discover(tmp_path)
    (rank,) = read_ranks(disc.ranks, disc.root, load())
    cache = rank.groups.filter(rank.groups["name"].str.contains("reshape_and_cache"))
    assert cache.select("step", "bucket", "rule_id", "count").rows() == [(6, "attention", "GPU-ATTN-008", 1)]


@pytest.mark.parametrize("sample", ["qwen1.5-0.5b_h100_1rank", "moe_b200_rank0", "dlrm_v100_8rank"])
def test_traces_without_eager_attention_have_no_finding(sample):
    assert not [f for f in analysed(TORCH / sample).findings if f.check == "unfused-attention"]


def _steps_removed(doc: dict) -> int:
    """The trace without its step markers: every kernel is then in no step."""
    before = len(doc["traceEvents"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    return before - len(doc["traceEvents"])


def test_a_trace_without_steps_is_judged_over_the_capture(tmp_path):
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    assert _steps_removed(doc) > 0
    (tmp_path / TRACE.name.removesuffix(".gz")).write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    (f,) = [f for f in report.findings if f.check == "unfused-attention"]
    assert f.step is None and f.severity == "critical"
    assert f.metrics["softmax_us"] >= 68_781.297 - 1e-2  # the step's softmax kernels, and any outside it


def test_a_rank_without_eager_attention_leaves_the_saving_unestimated(tmp_path):
    """Ranks synchronise: where one rank runs fused attention, the step shortens only as much as it does, which
    the data cannot say: the cause names the rank, and gives no estimate."""
    eager = json.loads(gzip.decompress(TRACE.read_bytes()))
    fused = json.loads(gzip.decompress(TRACE.read_bytes()))
    for e in fused["traceEvents"]:
        if e.get("cat") == "kernel" and "SoftMax" in e.get("name", ""):
            e["name"] = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >"
    for rank, doc in ((0, eager), (1, fused)):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert [f.rank for f in report.findings if f.check == "unfused-attention"] == [0]
    (cause,) = [c for c in report.causes if c.check == "unfused-attention"]
    assert cause.impact_us is None and cause.ranks == (0,)
    assert cause.assumption.startswith("No estimate: on rank 1 attention does not run this way")


def test_a_fused_rule_id_the_pack_lacks_is_refused(tmp_path):
    """``fused_rules`` names bucket rules: an id no rule has (a typo, or a rule a team's file renamed) would make
    every fused kernel look unfused, so the rules file is refused in one line naming it and the id."""
    from profan.model.errors import ProfanInputError
    from profan.rulepack import pack

    rules = tmp_path / "team.toml"
    rules.write_text('[[check]]\nid = "unfused-attention"\nfused_rules = ["GPU-ATTN-001", "GPU-ATTN-01"]\n')
    with pytest.raises(ProfanInputError) as err:
        pack.load([rules])
    assert str(err.value) == (
        f"{rules}: check unfused-attention: fused_rules must list bucket rule ids, and 'GPU-ATTN-01' is none"
    )
    rules.write_text('[[check]]\nid = "unfused-attention"\nfused_rules = ["GPU-ATTN-001"]\n')
    assert pack.load([rules]).check("unfused-attention")["fused_rules"] == ["GPU-ATTN-001"]
