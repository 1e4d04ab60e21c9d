"""The foundation's acceptance checks on the real Qwen3 4-rank set (torch_npu 2.7.1 / CANN 8.3.RC1)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import QWEN3, analysed, fnum, raw_rows, run_cli

STEP_COLS = {"computing_us": "Computing", "comm_not_overlapped_us": "Communication(Not Overlapped)", "free_us": "Free"}


def kernel_file(rank: int):
    return QWEN3 / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


def test_all_four_ranks_discovered_and_missing_files_warned(qwen3_report):
    ranks = {r["rank"]: r for r in qwen3_report.source["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert ranks[2]["rank_origin"] == "file name profiler_info_2.json"
    assert "kernel_details" in ranks[0]["files"] and "kernel_details" not in ranks[1]["files"]
    missing = [w for w in qwen3_report.warnings if "has no kernel_details.csv" in w]
    assert len(missing) == 2 and "rank 1 " in missing[0] and "rank 3 " in missing[1]


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_step_split_equals_step_trace_time(qwen3_report, rank):
    path = QWEN3 / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    _, rows = raw_rows(path)
    ((line, raw),) = rows.items()
    got = qwen3_report.tables["steps"].filter(pl.col("rank") == rank).row(0, named=True)
    assert got["step"] == int(raw["Step"]) == 13
    assert got["src_line"] == line == 2
    for col, header in STEP_COLS.items():
        assert got[col] == pytest.approx(fnum(raw[header]), abs=1e-9)
    assert got["device_id"] == int(raw["Device_id"])  # 0,1,4,5: the physical NPU, not the rank
    assert got["step_us"] == pytest.approx(fnum(raw["Stage"]), rel=1e-9)


@pytest.mark.parametrize("rank", [0, 2])
def test_communication_bucket_equals_sum_of_communication_rows(qwen3_report, rank):
    _, rows = raw_rows(kernel_file(rank))
    expected = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Accelerator Core"] == "COMMUNICATION")
    count = sum(1 for r in rows.values() if r["Accelerator Core"] == "COMMUNICATION")
    got = qwen3_report.breakdown.filter((pl.col("rank") == rank) & (pl.col("bucket") == "communication"))
    assert got["time_us"].item() == pytest.approx(expected, rel=1e-12)
    assert got["kernels"].item() == count
    assert expected > 100_000  # it is a real quantity: hundreds of ms on this set


def test_attention_and_matmul_buckets(qwen3_report):
    tk = qwen3_report.tables["top_kernels"]
    ops = {(o, b) for o, b in tk.select("op", "bucket").iter_rows()}
    assert ("FlashAttentionScore", "attention") in ops
    assert ("FlashAttentionScoreGrad", "attention") in ops
    assert ("MatMulV3", "ffn") in ops
    # every FlashAttention row of rank 0 is in the attention bucket; its time equals the raw sum
    _, rows = raw_rows(kernel_file(0))
    fa = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Type"].startswith("FlashAttentionScore"))
    fa_rows = tk.filter((pl.col("rank") == 0) & pl.col("op").str.starts_with("FlashAttentionScore"))
    assert fa_rows["time_us"].sum() == pytest.approx(fa, rel=1e-12)
    assert set(fa_rows["bucket"]) == {"attention"} and set(fa_rows["rule_id"]) == {"ASC-ATTN-001"}


def test_bucket_shares_sum_to_one_and_nothing_unclassified(qwen3_report):
    bd = qwen3_report.breakdown
    for (rank, _step), g in bd.group_by(["rank", "step"]):
        assert g["share"].sum() == pytest.approx(1.0)
        _, rows = raw_rows(kernel_file(rank))
        assert g["time_us"].sum() == pytest.approx(sum(fnum(r["Duration(us)"]) for r in rows.values()), rel=1e-12)
    assert "unclassified" not in set(bd["bucket"])


def test_pipeline_stage_imbalance_finding(qwen3_report):
    (f,) = [f for f in qwen3_report.ungrouped() if f.check == "pipeline-stage-imbalance"]
    assert f.step == 13 and f.severity == "critical"
    assert f.metrics["slow_ranks"] == [2, 3] and f.metrics["fast_ranks"] == [0, 1]
    # magnitude: stage means of Computing from the four step_trace_time.csv files
    comp = {}
    for r in range(4):
        _, rows = raw_rows(QWEN3 / f"rank_{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
        comp[r] = fnum(next(iter(rows.values()))["Computing"])
    ratio = ((comp[2] + comp[3]) / 2) / ((comp[0] + comp[1]) / 2)
    assert f.metrics["ratio"] == pytest.approx(ratio, abs=1e-4)
    assert 1.72 < ratio < 1.74
    assert "ranks 2, 3" in f.message and "1.73×" in f.message
    files = [e.file for e in f.evidence if e.lines and e.select["source"] == "step_trace_time"]
    assert files == [f"rank_{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv" for r in range(4)]
    # the stage-0 ranks' PP send/receive wait, read from communication.json: Wait Time and Idle Time of each p2p
    # op (one batchSendRecv records Wait 0 and Idle 158 ms: a receive posted long before its sender gets there)
    waits = {}
    for r in (0, 1):
        doc = json.loads((QWEN3 / f"rank_{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text())
        ops = [v["Communication Time Info"] for k, v in doc["step13"]["p2p"].items() if k != "Total Op Info"]
        waits[str(r)] = pytest.approx(sum(o["Wait Time(ms)"] + o["Idle Time(ms)"] for o in ops), abs=1e-3)
    assert f.metrics["pp_wait_ms"] == waits
    assert 313 < f.metrics["pp_wait_ms"]["0"] < 314 and 322 < f.metrics["pp_wait_ms"]["1"] < 324


def test_exposed_communication_one_finding_per_rank_step(qwen3_report):
    """communication.json splits the exposed time into transfer and waiting; that finding replaces the plain
    step_trace one (same severity scale), so each rank and step is reported once, citing the step_trace row."""
    exposed = [f for f in qwen3_report.ungrouped() if f.check in ("exposed-communication", "comm-exposed-split")]
    assert sorted((f.rank, f.step) for f in exposed) == [(0, 13), (1, 13), (2, 13), (3, 13)]
    f = next(f for f in exposed if f.rank == 0)
    assert f.check == "comm-exposed-split" and f.severity == "critical"
    assert f.metrics["exposed_share"] == pytest.approx(420174.26 / 810022.25, abs=1e-4)
    ev = f.evidence[0]
    assert ev.lines == (2,) and ev.file.endswith("rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv")


def test_exposed_communication_without_communication_json():
    """Level0 writes no communication.json: the plain step_trace finding stands."""
    from conftest import ASCEND

    report = analysed(ASCEND / "msinsight-alexnet-2rank-2025/level0")
    f = next(f for f in report.ungrouped() if f.check == "exposed-communication" and f.rank == 0)
    _, rows = raw_rows(ASCEND / "msinsight-alexnet-2rank-2025/level0" / f.evidence[0].file)
    row = rows[f.evidence[0].lines[0]]
    share = fnum(row["Communication(Not Overlapped)"]) / (fnum(row["Stage"]) + fnum(row["Bubble"]))
    assert f.metrics["share"] == pytest.approx(share, abs=1e-4) and f.severity == "critical"


def test_cli_json_and_evidence_round_trip(tmp_path):
    out = tmp_path / "report.json"
    res = run_cli("analyze", str(QWEN3), "-f", "json", "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "profan.report/2"
    f = next(f for f in doc["findings"] if f["check"] == "kernel-boundness")
    ev = f["evidence"][0]
    res = run_cli("evidence", str(out), f["id"])
    assert res.returncode == 0, res.stderr
    raw = (QWEN3 / ev["file"]).read_text().splitlines()
    for line in ev["lines"]:
        assert f"line {line}: {raw[line - 1]}" in res.stdout
    # JSON form for programs
    res = run_cli("evidence", str(out), f["id"], "--format", "json")
    rows = json.loads(res.stdout)["evidence"][0]["rows"]
    assert [r["text"] for r in rows] == [raw[n - 1] for n in ev["lines"]]


def test_markdown_report(tmp_path):
    out = tmp_path / "report.md"
    res = run_cli("analyze", str(QWEN3), "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    md = out.read_text()
    assert "| 2 | 13 | 809.80 | 400.45 | 277.65 | 131.71 |" in md
    assert "pipeline stage 1 (ranks 2, 3) computes 400.8 ms against 231.1 ms" in md
    assert "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv:2" in md


def test_stage_imbalance_names_the_extra_kernels(qwen3_report):
    """Stage 1 holds the LM head and loss over the 151,936-token vocabulary: the finding names those kernels,
    with their time from rank 2's rows, and says they do not run on stage 0."""
    (f,) = [f for f in qwen3_report.ungrouped() if f.check == "pipeline-stage-imbalance"]
    _, r2 = raw_rows(kernel_file(2))
    _, r0 = raw_rows(kernel_file(0))
    head = '"4096,151936;151936,1024"'
    lm = [n for n, r in r2.items() if r["Type"] == "MatMulV3" and r["Input Shapes"] == head]
    assert lm and not [n for n, r in r0.items() if r["Input Shapes"] == head]
    lm_ms = sum(fnum(r2[n]["Duration(us)"]) for n in lm) / 1000
    assert f"MatMulV3 (4096,151936;151936,1024) +{lm_ms:,.1f} ms — not on the fast stage" in f.message
    ev = next(e for e in f.evidence if e.select.get("input_shapes") == head.strip('"'))
    assert set(ev.lines) == set(lm) and ev.file.startswith("rank_2_ascend_pt/")
    # bucket deltas are rank 2 minus rank 0 over the same step, from the raw rows
    mm = {
        k: sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Type"].startswith("MatMul"))
        for k, rows in (("r2", r2), ("r0", r0))
    }
    swiglu = {
        k: sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Type"].startswith("SwiGlu"))
        for k, rows in (("r2", r2), ("r0", r0))
    }
    dense_delta = (mm["r2"] + swiglu["r2"]) - (mm["r0"] + swiglu["r0"])
    # the matmuls and the MLP activation are in the buckets of the layer they serve, or `gemm` where the
    # pattern cannot place them (the LM head among them); a bucket that differs by under 1 ms is not listed
    deltas = f.metrics["bucket_delta_us"]
    dense = ("ffn", "attention_proj", "gemm")
    unlisted = sum(b not in deltas for b in dense)
    assert abs(sum(deltas.get(b, 0.0) for b in dense) - dense_delta) < 1000 * unlisted + 1e-6
    assert deltas["gemm"] >= lm_ms * 1000
    assert f.metrics["compared_ranks"] == [2, 0]
