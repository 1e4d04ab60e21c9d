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
from conftest import analysed
from polars.testing import assert_frame_equal

from profan.model.textfmt import ms
from profan.sources.trace import kineto_iterations
from profan.sources.trace.kineto_rank import load_cached

REPO = Path(__file__).resolve().parents[2]
CPU = {
    "uniform": REPO / "fixtures/torch/serving_llama_cpu_uniform",
    "mixed": REPO / "fixtures/torch/serving_llama_cpu_mixed",
    "interference": REPO / "fixtures/torch/serving_llama_cpu_interference",
    "moe": REPO / "fixtures/torch/serving_mixtral_cpu_moe",
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
        (i, e)
        for i, e in enumerate(events)
        if re.fullmatch(r"nn\.Module: (Llama|Mixtral)ForCausalLM_\d+", e.get("name", ""))
    ]
    embeds = [e["args"]["Input Dims"][1] for e in events if e.get("name") == "aten::embedding"]
    it = _iterations(folder / "trace.json.gz")
    assert it.height == len(forwards) == truth["iterations"]
    assert it["marker"].unique().to_list() == ["module_forward"]
    assert it["event_idx"].to_list() == [i for i, _ in forwards]
    assert it["phase"].to_list() == truth["phases"]
    assert it["query_len"].to_list() == [dims[1] for dims in embeds]
    assert it["tokens"].to_list() == [dims[0] * dims[1] for dims in embeds]
    assert it["batch"].to_list() == [dims[0] for dims in embeds]
    if "query_lengths" in truth:
        assert it["query_len"].to_list() == truth["query_lengths"]
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


PREFILL_JOIN = REPO / "fixtures/torch/serving_llama_cpu_prefill_join"
SERVING_CAPTURES = [*CPU.values(), PREFILL_JOIN, SGLANG, VLLM]


@pytest.mark.parametrize("root", SERVING_CAPTURES, ids=lambda p: p.name)
def test_report_per_phase_table_sums_to_the_iterations_span(root):
    """The report's per-phase table: its iteration counts are the iteration table's, per phase, and its
    iteration times add up to the captured iterations' span (first iteration's start to the last one's end)
    within 1 %; every iteration row cites a real event of its file."""
    report = analysed(root)
    its, phases = report.tables["serving_iterations"], report.tables["serving_phases"]
    for (phase,), rows in its.group_by(["phase"]):
        row = phases.filter(pl.col("phase") == phase).row(0, named=True)
        assert row["iterations"] == rows.height
        assert row["time_us"] == pytest.approx(rows["period_us"].sum(), rel=1e-9)
        assert row["p50_us"] == pytest.approx(rows["period_us"].median(), rel=1e-9)
        assert row["max_us"] == rows["period_us"].max()
    last = its.row(its.height - 1, named=True)
    span = last["next_us"] - its["start_us"].min()
    assert phases["time_us"].sum() == pytest.approx(span, rel=1e-2)
    events = _events(root / its["file"][0])
    for idx, name in zip(its["event_idx"], its["name"], strict=True):
        assert events[idx]["name"] == name


def test_report_formats_carry_the_per_phase_view(tmp_path):
    """JSON (tables.serving_phases), Markdown and HTML (a per-phase section), the workbook (a sheet) and the
    brief (summary.serving) all carry the phases of the mixed CPU capture; a training report has none."""
    from openpyxl import load_workbook

    from profan.render import render
    from profan.render.brief import brief

    report = analysed(CPU["mixed"])
    doc = json.loads(render(report, "json"))
    assert [r["phase"] for r in doc["tables"]["serving_phases"]] == ["prefill", "decode"]
    assert [r["iterations"] for r in doc["tables"]["serving_phases"]] == [1, 3]
    assert "Model iterations per phase (serving)" in render(report, "md")
    assert "Model iterations per phase" in render(report, "html")
    out = tmp_path / "r.xlsx"
    render(report, "xlsx", out)
    assert any("serving_phases" in name or "Serving" in name for name in load_workbook(out).sheetnames)
    serving = brief(report)["summary"]["serving"]
    assert [(p["phase"], p["iterations"]) for p in serving["phases"]] == [("prefill", 1), ("decode", 3)]
    assert serving["phases"][1]["slowest"] == doc["tables"]["serving_phases"][1]["slowest"]
    training = analysed(REPO / "fixtures/torch/gloo_moe_cpu_4rank/sleep")
    assert "serving_phases" not in training.tables and "serving" not in brief(training)["summary"]


def test_cpu_launch_gaps_are_measured_but_no_cause():
    """On a CPU-only capture the gaps between the host's top-level ops are Python dispatch, not launches a graph
    could replay: the launch-bound finding carries the measured idle (the decode rows' mean between_kernels_us)
    but its cost grades it info (rules/severity.toml baseline), so no serving cause leads the verdict."""
    report = analysed(CPU["mixed"])
    its = report.tables["serving_iterations"]
    decode = its.filter(pl.col("phase") == "decode")
    found = [m for f in report.findings for m in (f.members or [f]) if m.check == "serving-launch-bound-decode"]
    assert len(found) == 1 and found[0].severity == "info"
    assert found[0].metrics["between_kernels_us"] == pytest.approx(decode["between_kernels_us"].mean(), rel=1e-9)
    assert sorted(found[0].evidence[0].events) == sorted(decode["event_idx"].to_list())
    assert not [c for c in report.causes if c.check.startswith("serving-")]


def test_launch_bound_cause_bound_is_the_measured_idle_between_kernels():
    """The cause built from a launch-bound finding (here the mixed CPU capture's, taken before its cost is
    graded): its bound is the measured idle between the decode iterations' kernels per iteration, said as an
    upper bound, and the step it is a share of is the decode iterations' mean period."""
    from profan.analyses.contract import Job
    from profan.analyses.serving import section
    from profan.diagnosis.claims import Claims
    from profan.diagnosis.serving_causes import launch_bound
    from profan.ranks.rankmap import load_ranks
    from profan.rulepack.pack import load
    from profan.sources.discovery.discover import discover

    pack = load([])
    disc = discover(CPU["mixed"])
    ranks = load_ranks(disc.ranks, disc.root, pack, 1, lambda _m: None)
    job = Job(ranks=ranks, pack=pack)
    sec = section.section(job)
    decode = sec.tables["serving_iterations"].filter(pl.col("phase") == "decode")
    (cause,) = launch_bound(job, Claims(sec.findings), {})
    assert cause.impact_us is None
    assert cause.bound_us == pytest.approx(decode["between_kernels_us"].mean(), rel=1e-9)
    assert cause.step_us == pytest.approx(decode["period_us"].mean(), rel=1e-9)
    assert "upper bound" in cause.assumption and "CUDA graphs" in cause.action


def test_iteration_view_off_reads_the_capture_as_before(tmp_path):
    """``[serving] iterations = false`` in a rules file (what ``analyze --no-iterations`` sets): the mixed CPU
    capture has no serving tables or findings, and its other tables are those of the default read; a [serving]
    setting other than iterations is refused naming the file."""
    import profan
    from profan.model.errors import ProfanInputError

    off = tmp_path / "off.toml"
    off.write_text("[serving]\niterations = false\n")
    report, plain = profan.analyze(CPU["mixed"], rules=[off]), analysed(CPU["mixed"])
    assert not [t for t in report.tables if t.startswith("serving_")]
    assert not [f for f in report.findings if f.check.startswith("serving-")]
    assert set(report.tables) == {t for t in plain.tables if not t.startswith("serving_")}
    # the same rows; shares to float rounding (a bucket's time is a parallel sum, its last bits vary between reads)
    assert_frame_equal(report.tables["top_kernels"], plain.tables["top_kernels"], rel_tol=1e-12)
    bad = tmp_path / "bad.toml"
    bad.write_text("[serving]\nphases = false\n")
    with pytest.raises(ProfanInputError, match=r"bad\.toml.*\[serving\] takes one setting"):
        profan.analyze(CPU["mixed"], rules=[bad])


def test_cli_no_iterations_drops_the_serving_tables(tmp_path):
    """``profan analyze --no-iterations`` writes a JSON report without the serving tables."""
    from typer.testing import CliRunner

    from profan.app.cli import app

    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["analyze", str(CPU["mixed"]), "--no-iterations", "-q", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "serving_phases" not in json.loads(out.read_text())["tables"]


def test_prefill_joining_the_running_batch_is_named_as_the_slow_mixed_iterations():
    """A real packed-batch serving loop in which a 1,024- and a 512-token prompt join four decoding requests: one
    iteration per vLLM-style execute label, each with the truth's phase and token count; the interference cause
    leads the verdict, names the mixed iterations (6 and 11), and its gain is their time beyond the median decode
    iteration, summed and spread over the decode iterations (computed here from the iteration table), as a share
    of a decode iteration."""
    truth = tomllib.loads((PREFILL_JOIN / "ground_truth.toml").read_text())
    events = _events(PREFILL_JOIN / "trace.json.gz")
    labels = [i for i, e in enumerate(events) if e.get("ph") == "X" and e.get("name", "").startswith("execute_")]
    report = analysed(PREFILL_JOIN)
    its = report.tables["serving_iterations"]
    assert its.height == len(labels) == truth["iterations"]
    assert its["event_idx"].to_list() == labels and set(its["rule"]) == {"vllm-execute"}
    assert its["phase"].to_list() == truth["phases"]
    assert its["tokens"].to_list() == truth["tokens"]
    decode = its.filter(pl.col("phase") == "decode")["period_us"]
    mixed = its.filter(pl.col("iteration").is_in(truth["mixed_iterations"]))
    assert mixed["phase"].unique().to_list() == ["mixed"]
    assert mixed["period_us"].min() > 3 * decode.median()  # a 512+ token prefill against a few decode tokens
    stall = float((mixed["period_us"] - decode.median()).sum())
    lead = report.causes[0]
    assert lead.check == "serving-prefill-interference"
    assert lead.title.startswith("Mixed iterations 6, 11 on rank 0: the running decodes stall")
    assert lead.bound_us == pytest.approx(stall / decode.len(), rel=1e-9)
    assert lead.step_us == pytest.approx(decode.mean(), rel=1e-9)  # the step it is a share of: a decode iteration
    slowest = mixed.sort("period_us", descending=True).row(0, named=True)
    assert lead.action.endswith(f"Slowest: iteration {slowest['iteration']} of rank 0, {ms(slowest['period_us'])}.")
    (found,) = [m for f in report.findings for m in (f.members or [f]) if m.check == "serving-prefill-interference"]
    assert [row["iteration"] for row in found.metrics["slow"]] == truth["mixed_iterations"]
    assert [row["tokens"] for row in found.metrics["slow"]] == [4 + 1024, 5 + 512]
    assert found.metrics["stall_total_us"] == pytest.approx(stall, rel=1e-9)
    assert sorted(found.evidence[0].events) == sorted(mixed["event_idx"].to_list())


@pytest.mark.parametrize(
    ("root", "all_inside"),
    [
        (VLLM, {"attention", "attention_proj", "gemm", "memory", "moe", "other"}),
        (PREFILL_JOIN, {"attention", "gemm", "ffn"}),
    ],
    ids=["vllm-graph", "prefill-join"],
)
def test_phase_bucket_split_is_the_breakdown_of_the_iterations_kernels(root, all_inside):
    """The per-phase bucket split sums the device time of each phase's iterations per bucket: on the vLLM graph
    decode (one iteration holding every kernel) it is the report's breakdown, bucket for bucket; on the CPU
    packed-batch loop the buckets whose ops all run inside the forwards equal the breakdown, the others (tensor
    set-up between forwards) are less. Shares add up to 1 per phase; a decode iteration's time is its phase
    time over the count."""
    report = analysed(root)
    split = report.tables["serving_phase_buckets"]
    total = split.group_by("bucket").agg(pl.col("time_us").sum())
    whole = dict(report.tables["breakdown"].group_by("bucket").agg(pl.col("time_us").sum()).iter_rows())
    for bucket, time_us in total.iter_rows():
        if bucket in all_inside:
            assert time_us == pytest.approx(whole[bucket], rel=1e-6), bucket
        else:
            assert time_us < whole[bucket], bucket
    assert set(total["bucket"]) == set(whole)
    for share in split.group_by("phase").agg(pl.col("share").sum())["share"]:
        assert share == pytest.approx(1.0, rel=1e-9)
    counts = dict(report.tables["serving_phases"].select("phase", "iterations").iter_rows())
    for row in split.iter_rows(named=True):
        assert row["per_iteration_us"] == pytest.approx(row["time_us"] / counts[row["phase"]], rel=1e-12)
    from profan.render.brief import brief

    for row in brief(report)["summary"]["serving"]["phases"]:
        first = split.filter(pl.col("phase") == row["phase"]).head(3)
        assert [b["bucket"] for b in row["top_buckets"]] == first["bucket"].to_list()
