"""A folder holding only trace_view.json (no step_trace_time.csv) still gets its step split and findings, from the
Overlap Analysis lanes the profiler itself sums into step_trace_time.csv."""

from __future__ import annotations

import shutil

import pytest
from conftest import ASCEND, fnum, raw_rows, run_cli

import profan

RANK0 = ASCEND / "msinsight-alexnet-2rank-2025/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def test_lanes_give_the_step_trace_numbers(tmp_path):
    shutil.copy(RANK0 / "trace_view.json", tmp_path / "trace_view.json")
    report = profan.analyze(tmp_path)
    _, rows = raw_rows(RANK0 / "step_trace_time.csv")
    (row,) = rows.values()
    step_us = fnum(row["Stage"]) + fnum(row["Bubble"])
    f = next(f for f in report.findings if f.check == "exposed-communication")
    assert f.step == int(row["Step"]) == 50 and f.severity == "critical"
    assert f.metrics["comm_not_overlapped_us"] == pytest.approx(fnum(row["Communication(Not Overlapped)"]), rel=1e-3)
    assert f.metrics["share"] == pytest.approx(fnum(row["Communication(Not Overlapped)"]) / step_us, abs=1e-3)
    (ev,) = f.evidence
    assert ev.file == "trace_view.json" and ev.select["process"] == "Overlap Analysis"
    idle = next(f for f in report.findings if f.check == "device-idle")
    assert idle.metrics["free_us"] == pytest.approx(fnum(row["Free"]), rel=1e-3)


def test_real_trace_view_only_folder():
    folder = ASCEND / "mstt-advisor-ut/test/ut/advisor/timeline_advice"
    res = run_cli("analyze", str(folder), "-q")
    assert res.returncode == 0, res.stderr
    assert "from the Overlap Analysis lanes of trace_view.json" in res.stdout
