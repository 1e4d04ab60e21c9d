"""`profan compare`: two runs with a slowed kernel class, two ranks of one job, two rank folders of Qwen3."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import QWEN3, assert_one_line_error, fnum, one_rank, raw_rows, run_cli

import profan
from profan.comparison.compare import compare
from profan.model.textfmt import ms
from profan.sources.common.readback import read_back
from profan.synth import generate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    a = generate(root / "runA", ranks=8, seed=1, trace=False)
    b = generate(
        root / "runB", ranks=8, seed=1, trace=False, slow_kernel="FlashAttentionScoreGrad", slow_kernel_factor=1.3
    )
    return root, a, b


def _per_rank_step(root, truth, op: str) -> float:
    """Mean over ranks and steps of the summed duration of one op type, straight from the CSV files."""
    sums: dict[tuple[str, str], float] = defaultdict(float)
    for rank, d in truth["rank_dirs"].items():
        _, rows = raw_rows(root / d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
        for row in rows.values():
            if row["Type"] == op:
                sums[(rank, row["Step Id"])] += fnum(row["Duration(us)"])
    return sum(sums.values()) / len(sums)


def test_two_runs_name_the_slowed_kernel_with_rows_on_both_sides(runs, tmp_path):
    root, ta, tb = runs
    out = tmp_path / "cmp.json"
    res = run_cli("compare", str(root / "runA"), str(root / "runB"), "-f", "json", "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    regs = [f for f in doc["findings"] if f["check"] == "compare-regression" and f["severity"] != "info"]
    assert len(regs) == 1
    f = regs[0]
    assert f["metrics"]["bucket"] == "attention"
    top = f["metrics"]["kernels"][0]
    assert top["op"] == tb["slow_kernel"]["op"] == "FlashAttentionScoreGrad"
    want = _per_rank_step(root / "runB", tb, "FlashAttentionScoreGrad") - _per_rank_step(
        root / "runA", ta, "FlashAttentionScoreGrad"
    )
    assert top["delta_us"] == pytest.approx(want, rel=1e-4)
    assert want == pytest.approx(0.3 * _per_rank_step(root / "runA", ta, "FlashAttentionScoreGrad"), rel=0.01)
    sides = {e["select"]["side"]: e for e in f["evidence"] if e["select"].get("op") == "FlashAttentionScoreGrad"}
    assert set(sides) == {"A", "B"}
    assert sides["A"]["file"].startswith("runA/") and sides["B"]["file"].startswith("runB/")
    report = profan.model.report.from_dict(doc)
    for ev in report.finding(f["id"]).evidence:
        assert all(",FlashAttentionScoreGrad," in t or ",FlashAttentionScore," in t for _, t in read_back(root, ev)), (
            ev.file
        )
    # nothing else regressed: every other bucket's delta is below the rule's floor
    other = [b for b in doc["tables"]["compare_buckets"] if b["bucket"] != "attention"]
    assert all(abs(b["delta_us"]) < 50 for b in other)
    # and `profan evidence` reads the same rows back from the compare report
    ev = run_cli("evidence", str(out), f["id"])
    assert ev.returncode == 0 and "FlashAttentionScoreGrad" in ev.stdout


def test_two_ranks_of_one_job_markdown(runs):
    root, _, _ = runs
    res = run_cli("compare", str(root / "runA"), "--ranks", "0,5", "-q")
    assert res.returncode == 0, res.stderr
    assert "ranks 0 and 5 of one job" in res.stdout and "## Buckets" in res.stdout
    # fault-free ranks: no regression above the rule's floor
    assert "Regression:" not in res.stdout
    bad = run_cli("compare", str(root / "runA"), "--ranks", "0,99")
    assert bad.returncode == 2 and "no rank 99" in bad.stderr


def test_qwen3_stage_ranks_compare_matches_the_breakdown(qwen3_report):
    rep = compare(QWEN3 / "rank_0_ascend_pt", QWEN3 / "rank_2_ascend_pt")
    bd = qwen3_report.breakdown
    buckets = {b["bucket"]: b for b in rep.tables["compare_buckets"].to_dicts()}
    for bucket, row in buckets.items():
        a = bd.filter((bd["rank"] == 0) & (bd["bucket"] == bucket))["time_us"].sum()
        b = bd.filter((bd["rank"] == 2) & (bd["bucket"] == bucket))["time_us"].sum()
        assert row["a_time_us"] == pytest.approx(a, rel=1e-9) and row["b_time_us"] == pytest.approx(b, rel=1e-9)
    regs = [f for f in rep.findings if f.check == "compare-regression" and f.severity != "info"]
    assert regs and regs[0].metrics["delta_us"] == pytest.approx(max(r["delta_us"] for r in buckets.values()), abs=1e-3)
    # the evidence paths are relative to the common root (the job folder) and read back
    for ev in regs[0].evidence:
        assert ev.file.split("/")[0] in ("rank_0_ascend_pt", "rank_2_ascend_pt")
        assert read_back(QWEN3, ev)


DLRM = QWEN3.parent.parent / "torch" / "dlrm_v100_8rank"


def _nccl_us(path) -> float:
    doc = json.loads(path.read_text())
    return sum(
        float(e["dur"])
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "kernel" and str(e.get("name", "")).startswith("ncclKernel")
    )


def test_dlrm_two_rank_files_name_the_nccl_difference():
    w0, w7 = sorted(DLRM.glob("worker0_*.json"))[0], sorted(DLRM.glob("worker7_*.json"))[0]
    res = run_cli("compare", str(w7), str(w0), "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    regs = [f for f in doc["findings"] if f["title"].startswith("Regression: communication")]
    assert len(regs) == 1 and regs[0]["severity"] == "critical"
    f = regs[0]
    assert f["metrics"]["delta_us"] == pytest.approx(_nccl_us(w0) - _nccl_us(w7), abs=0.01)
    assert f["metrics"]["kernels"][0]["op"].startswith("ncclKernel_SendRecv")
    report = profan.model.report.from_dict(doc)
    sides = {}
    for ev in report.finding(f["id"]).evidence:
        assert ev.kind == "events"
        rows = [json.loads(t) for _, t in read_back(DLRM, ev)]
        assert rows and all(r["name"].startswith("ncclKernel") for r in rows)
        sides.setdefault(ev.select["side"], set()).add(ev.file)
    assert sides == {"A": {w7.name}, "B": {w0.name}}


def test_runs_profiled_at_different_steps_are_matched_by_order(tmp_path):
    generate(tmp_path / "a", ranks=4, layers=2, steps=2, first_step=3, seed=1, trace=False)
    generate(
        tmp_path / "b",
        ranks=4,
        layers=2,
        steps=2,
        first_step=10,
        seed=1,
        trace=False,
        slow_kernel="SwiGlu",
        slow_kernel_factor=3.0,
    )
    rep = compare(tmp_path / "a", tmp_path / "b")
    assert rep.source["a"]["steps"] == [3, 4] and rep.source["b"]["steps"] == [10, 11]
    assert any("by order" in n and "3↔10, 4↔11" in n for n in rep.notes)
    regs = [f for f in rep.findings if f.title.startswith("Regression")]
    assert regs and regs[0].metrics["kernels"][0]["op"] == "SwiGlu"
    steps = rep.tables["compare_steps"]
    assert steps["a_step"].to_list() == [3, 4] and steps["b_step"].to_list() == [10, 11]


def test_the_same_input_gives_the_same_comparison_and_ties_cite_the_earlier_row():
    """Equal deltas and equal durations are ordered by key and by line, not by how grouping met them: three
    runs give one report. rank_2's hcom_allReduce__534_10_1 group is new in B; its rows by duration (from the
    CSV) are 1474 (2.58 µs), 447 and 1458 (2.56), then 463, 464 and 1475 (2.50): the cited five end 463, 464."""
    runs = []
    for _ in range(3):
        d = compare(QWEN3, ranks=(0, 2)).to_dict()
        d["meta"].pop("timings_s", None)
        runs.append(d)
    assert runs[0] == runs[1] == runs[2]
    row = next(r for r in runs[0]["tables"]["compare_kernels"] if r["name"] == "hcom_allReduce__534_10_1")
    assert row["status"] == "new" and row["b_locs"] == [1474, 447, 1458, 463, 464]
    _, rows = raw_rows(QWEN3 / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert [fnum(rows[line]["Duration(us)"]) for line in row["b_locs"]] == [2.58, 2.56, 2.56, 2.5, 2.5]
    assert fnum(rows[1475]["Duration(us)"]) == 2.5


# ------------------------------------------------------------------------------------------ work on one side only


def _step_split(path) -> tuple[float, int, float]:
    """From the trace itself: device time of the events whose launch lies inside the ProfilerStep's CPU span, and
    the count and time of the rest (launch outside the span, or no launch event in the trace)."""
    ev = json.loads(path.read_text())["traceEvents"]
    (step,) = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime" and "args" in e}
    dev = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    inside = [lo <= launch.get(e["args"].get("correlation"), lo - 1) <= hi for e in dev]
    out = [e["dur"] for e, i in zip(dev, inside, strict=True) if not i]
    return sum(e["dur"] for e, i in zip(dev, inside, strict=True) if i), len(out), float(sum(out))


def test_dlrm_kernels_outside_any_step_on_one_rank_are_counted_not_dropped():
    """Rank 1 of DLRM has device events launched outside ProfilerStep#10 (rank 0 has none): the comparison of
    step 10 leaves them out, and says so with their count and time instead of letting them vanish."""
    w0, w1 = (next(DLRM.glob(f"worker{r}_*.json")) for r in (0, 1))
    in0, n0, _ = _step_split(w0)
    in1, n1, us1 = _step_split(w1)
    assert n0 == 0 and n1 == 64 and us1 == 203.0  # what the real pair holds
    res = run_cli("compare", str(DLRM), "--ranks", "0,1", "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    said = [w for w in doc["warnings"] if "outside any profiled step" in w]
    assert len(said) == 1, doc["warnings"]
    assert said[0].startswith("compare: B has kernels outside any profiled step")
    assert f"{n1} kernel launches, {us1 / 1000:.3f} ms of kernel time, rank 1; A: none" in said[0]
    (total,) = [f for f in doc["findings"] if "a_kernel_us" in f["metrics"]]
    assert total["metrics"]["left_out"] == {
        "b": {"steps": [], "outside_any_step": True, "launches": n1, "kernel_us": us1}
    }
    assert "Not compared, having no counterpart: B: kernels outside any profiled step" in total["message"]
    # the per-step totals hold exactly the in-step events of each side
    assert (total["metrics"]["a_kernel_us"], total["metrics"]["b_kernel_us"]) == (in0, in1)
    # both sides with such kernels: each side's warning gives the other's count
    both = json.loads(run_cli("compare", str(DLRM), "--ranks", "1,3", "-f", "json", "-q").stdout)
    _, n3, us3 = _step_split(next(DLRM.glob("worker3_*.json")))
    said = sorted(w for w in both["warnings"] if "outside any profiled step" in w)
    assert said == [
        f"compare: A has kernels outside any profiled step ({n1} kernel launches, {us1 / 1000:.3f} ms of kernel time, "
        f"rank 1; B: {n3} kernel launches, {us3 / 1000:.3f} ms of kernel time, rank 3): they belong to no step, so "
        f"the per-step comparison leaves them out",
        f"compare: B has kernels outside any profiled step ({n3} kernel launches, {us3 / 1000:.3f} ms of kernel time, "
        f"rank 3; A: {n1} kernel launches, {us1 / 1000:.3f} ms of kernel time, rank 1): they belong to no step, so "
        f"the per-step comparison leaves them out",
    ]


def test_a_step_with_kernel_rows_on_one_side_stays_in_the_comparison_at_zero(tmp_path):
    """Two copies of Qwen3 rank 0. A: its last 100 kernel rows moved to step 14, step rows for 13 only. B: the
    kernel rows all in step 13, step rows for 13 and 14. Step 14 is on both sides, with device work in A only:
    it is compared (B at 0, said in a warning), and B's step-14 row, with no A row to pair, is named."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    ra, rb = one_rank(a), one_rank(b)
    kd, st = "ASCEND_PROFILER_OUTPUT/kernel_details.csv", "ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    header, *lines = (ra / kd).read_text().splitlines(keepends=True)
    assert all(ln.startswith("13,") for ln in lines)
    (ra / kd).write_text(header + "".join(lines[:-100] + ["14" + ln[2:] for ln in lines[-100:]]))
    sheader, srow = (rb / st).read_text().splitlines(keepends=True)
    assert srow.startswith("0,13,")
    (rb / st).write_text(sheader + srow + "0,14," + srow[5:])
    _, rows_a = raw_rows(ra / kd)
    _, rows_b = raw_rows(rb / kd)
    a_us = sum(fnum(r["Duration(us)"]) for r in rows_a.values())
    step14_us = sum(fnum(r["Duration(us)"]) for r in rows_a.values() if r["Step Id"] == "14")
    b_us = sum(fnum(r["Duration(us)"]) for r in rows_b.values())
    assert a_us == pytest.approx(b_us) and step14_us > 0
    rep = compare(a, b)
    assert rep.source["a"]["steps"] == [13, 14] and rep.source["b"]["steps"] == [13, 14]
    assert (
        "compare: step 14↔14 has device work in A only (100 kernel launches; B has the step but no kernel rows "
        "in it): counted as 0 there" in rep.warnings
    )
    (row,) = [w for w in rep.warnings if "step_trace_time.csv row in B only" in w]
    assert (
        row.startswith("compare: step 14 has a step_trace_time.csv row in B only")
        and "that step's time is not compared" in row
    )
    (total,) = [f for f in rep.findings if "a_kernel_us" in f.metrics]
    # both sides average over the two aligned steps: A's step 14 is in A's figure, B counts 0 for it
    assert total.metrics["a_kernel_us"] == pytest.approx(a_us / 2, abs=1e-3)
    assert total.metrics["b_kernel_us"] == pytest.approx(b_us / 2, abs=1e-3)
    assert total.metrics["steps_compared"] == 1 and rep.tables["compare_steps"]["a_step"].to_list() == [13]
    assert "left_out" not in total.metrics


# ------------------------------------------------------------------------------------------ CI: --fail-on-regression


@pytest.fixture(scope="module")
def dlrm_7_0(tmp_path_factory):
    """Rank 7 (A) against rank 0 (B) of DLRM, and the growth of B over A read from the comparison's own figures:
    the summed kernel time per step (no step_trace_time.csv in Kineto traces) and the communication bucket."""
    out = tmp_path_factory.mktemp("ci") / "cmp.json"
    res = run_cli("compare", str(DLRM), "--ranks", "7,0", "-f", "json", "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    (total,) = [f for f in doc["findings"] if "a_kernel_us" in f["metrics"]]
    comm = next(b for b in doc["tables"]["compare_buckets"] if b["bucket"] == "communication")
    step = 100 * (total["metrics"]["b_kernel_us"] / total["metrics"]["a_kernel_us"] - 1)
    return doc, total, step, 100 * (comm["b_time_us"] / comm["a_time_us"] - 1)


def test_fail_on_regression_step_time_both_sides_of_the_limit(dlrm_7_0, tmp_path):
    doc, total, step, _ = dlrm_7_0
    w0, w7 = (next(DLRM.glob(f"worker{r}_*.json")) for r in (0, 7))
    # the figures are the traces' in-step device time (neither rank has events outside the step)
    assert (total["metrics"]["a_kernel_us"], total["metrics"]["b_kernel_us"]) == (
        _step_split(w7)[0],
        _step_split(w0)[0],
    )
    assert step == pytest.approx(100 * (6851 / 2825 - 1))  # +142.5 %
    for limit, code in ((step - 0.05, 1), (step + 0.05, 0)):
        out = tmp_path / f"cmp{code}.json"
        res = run_cli(
            "compare", str(DLRM), "--ranks", "7,0", "-f", "json", "-o", str(out), "-q",
            "--fail-on-regression", f"{limit:.2f}",
        )  # fmt: skip
        assert res.returncode == code, res.stderr
        # the report is written either way, with the same findings and both sides cited by the total finding
        again = json.loads(out.read_text())
        assert [f["title"] for f in again["findings"]] == [f["title"] for f in doc["findings"]]
        (t,) = [f for f in again["findings"] if "a_kernel_us" in f["metrics"]]
        assert {e["select"]["side"] for e in t["evidence"]} == {"A", "B"}
        if code:
            (line,) = res.stderr.splitlines()
            assert line.startswith("profan: regression: step time (summed kernel time per step and rank")
            a, b = ms(total["metrics"]["a_kernel_us"]), ms(total["metrics"]["b_kernel_us"])
            assert f"{a} → {b} (+{step:.1f}%, more than the {float(f'{limit:.2f}'):g}% allowed)" in line
        else:
            assert res.stderr == ""


def test_fail_on_regression_per_bucket_and_markdown(dlrm_7_0):
    _, _, step, comm = dlrm_7_0
    assert comm > step  # the communication bucket grew more than the step: a limit between the two tells them apart
    mid = (step + comm) / 2
    base = ("compare", str(DLRM), "--ranks", "7,0", "-q", "--fail-on-regression", f"{step + 1:.1f}")
    res = run_cli(*base, "--fail-on-regression", f"communication={mid:.1f}")
    assert res.returncode == 1 and res.stdout.startswith("# profan compare")  # the Markdown still printed
    (line,) = res.stderr.splitlines()
    assert "step time" not in line
    row = next(b for b in dlrm_7_0[0]["tables"]["compare_buckets"] if b["bucket"] == "communication")
    assert _nccl_us(next(DLRM.glob("worker7_*.json"))) == row["a_time_us"]  # the NCCL kernels of each side's trace
    assert _nccl_us(next(DLRM.glob("worker0_*.json"))) == row["b_time_us"]
    span = f"{ms(row['a_time_us'])} → {ms(row['b_time_us'])}"
    assert f"communication per step {span} (+{comm:.1f}%, more than the {mid:.1f}% allowed)" in line
    within = run_cli(*base, "--fail-on-regression", f"communication={comm + 1:.1f}", "--fail-on-regression", "gemm=0")
    gemm = next(b for b in dlrm_7_0[0]["tables"]["compare_buckets"] if b["bucket"] == "gemm")
    assert gemm["b_time_us"] <= gemm["a_time_us"]  # the dense matmuls did not grow, so even a 0 % limit holds
    assert within.returncode == 0 and within.stderr == ""


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("-5", "a number ≥ 0 (got '-5')"),
        ("fast", "a number ≥ 0 (got 'fast')"),
        ("nan", "a number ≥ 0 (got 'nan')"),
        ("communication=-1", "a number ≥ 0 (got 'communication=-1')"),
        ("attn=5", "unknown bucket 'attn'"),
    ],
)
def test_fail_on_regression_bad_values_are_one_line_errors(value, needle):
    res = run_cli("compare", str(DLRM), "--ranks", "7,0", "-q", f"--fail-on-regression={value}")
    assert_one_line_error(res, "--fail-on-regression", needle)
    assert res.stdout == ""  # refused before anything was compared


def test_fail_on_regression_reads_the_step_time_of_step_trace_time(tmp_path):
    """Qwen3 rank 2 (A) against rank 0 (B): the step time is step_trace_time.csv's (Stage + Bubble), 809,803.25 →
    810,022.25 µs, a 0.027 % growth: a 0.02 % limit fails, 0.03 % holds."""
    step = {}
    for r in (0, 2):
        _, rows = raw_rows(QWEN3 / f"rank_{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
        (row,) = rows.values()
        step[r] = fnum(row["Stage"]) + fnum(row["Bubble"])
    grew = 100 * (step[0] / step[2] - 1)
    out = tmp_path / "cmp.json"
    base = ("compare", str(QWEN3), "--ranks", "2,0", "-q", "-f", "json", "-o", str(out))
    res = run_cli(*base, "--fail-on-regression", "0.02")
    assert res.returncode == 1, res.stderr
    (total,) = [f for f in json.loads(out.read_text())["findings"] if "a_kernel_us" in f["metrics"]]
    assert (total["metrics"]["a_step_us"], total["metrics"]["b_step_us"]) == (step[2], step[0])
    assert {e["select"]["side"] for e in total["evidence"]} == {"A", "B"}  # the step rows of both sides
    assert res.stderr == (
        f"profan: regression: step time (step_trace_time.csv) {ms(step[2])} → {ms(step[0])} "
        f"(+{grew:.2g}%, more than the 0.02% allowed)\n"
    )
    assert run_cli(*base, "--fail-on-regression", "0.03").returncode == 0


def test_collectives_of_two_stages_match_by_group_and_a_bucket_names_what_grew_it():
    """Ranks 0 and 2 of Qwen3 are in different data-parallel groups (one per pipeline stage), so the HCCL names
    of the same reduce-scatter end in different group-hash digits (__097_ against __691_). Named by their group
    (parallel_group_info: dp_cp) they match: no collective is "only in A" and "only in B" at once. And the vector
    bucket, which grows by kernels rank 2 alone runs (the vocabulary-wide loss: Cast, Exp, Sub on 151,936
    columns), is said to grow mostly by them, with their time from the raw rows."""
    rep = compare(QWEN3 / "rank_0_ascend_pt", QWEN3 / "rank_2_ascend_pt")
    k = rep.tables["compare_kernels"]
    hcom = k.filter(k["op"].str.starts_with("hcom_"))
    for op in ("hcom_reduceScatter_", "hcom_allGather_"):
        assert set(hcom.filter(hcom["op"] == op)["status"]) == {"both"}, op
    new, missing = (set(hcom.filter(hcom["status"] == s)["op"]) for s in ("new", "missing"))
    assert not new & missing  # an op type on one side only (rank 2's own groups' all-reduce) is only there
    (vector,) = [f for f in rep.findings if f.title.startswith("Regression: vector")]
    assert vector.title.endswith("mostly Cast")
    _, rows = raw_rows(QWEN3 / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    cast = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Type"] == "Cast" and "151936" in r["Input Shapes"])
    assert f"Cast [4096,1,151936] +{ms(cast)}" in vector.message.replace("\\[", "[").replace("\\]", "]")
