"""compare of two serving runs, per phase (`profan.comparison.serving`): real CPU serving captures on both sides."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import analysed

from profan.comparison.compare import compare

REPO = Path(__file__).resolve().parents[2]
UNIFORM = REPO / "fixtures/torch/serving_llama_cpu_uniform"
JOIN = REPO / "fixtures/torch/serving_llama_cpu_prefill_join"


def test_two_serving_runs_compare_per_phase():
    """generate() over 3 prompts of 8 (A) against the packed loop where long prompts join (B): each side's
    phase row is that side's own analysis (iterations, p50 period, the slowest iterations' marker events), the
    delta is B minus A, a phase one side lacks (mixed) has no A row values, and the per-bucket time per iteration
    is each side's serving_phase_buckets."""
    report = compare(UNIFORM, JOIN)
    phases, split = report.tables["compare_phases"], report.tables["compare_phase_buckets"]
    assert phases["phase"].to_list() == ["prefill", "mixed", "decode"]
    for label, root in (("a", UNIFORM), ("b", JOIN)):
        own = analysed(root).tables["serving_phases"]
        for row in own.iter_rows(named=True):
            mine = phases.filter(pl.col("phase") == row["phase"]).row(0, named=True)
            assert mine[f"{label}_iterations"] == row["iterations"]
            assert mine[f"{label}_p50_us"] == pytest.approx(row["p50_us"], rel=1e-12)
            assert mine[f"{label}_events"] == row["slowest_events"]
            assert mine[f"{label}_file"].endswith(f"{root.name}/trace.json.gz")
        own_split = analysed(root).tables["serving_phase_buckets"]
        for row in own_split.iter_rows(named=True):
            mine = split.filter((pl.col("phase") == row["phase"]) & (pl.col("bucket") == row["bucket"]))
            assert mine[f"{label}_per_iteration_us"].item() == pytest.approx(row["per_iteration_us"], rel=1e-12)
    decode = phases.filter(pl.col("phase") == "decode").row(0, named=True)
    assert decode["delta_p50_us"] == pytest.approx(decode["b_p50_us"] - decode["a_p50_us"], rel=1e-12)
    mixed = phases.filter(pl.col("phase") == "mixed").row(0, named=True)
    assert mixed["a_iterations"] is None and mixed["b_iterations"] == 2
    assert (split["delta_us"] == split["b_per_iteration_us"] - split["a_per_iteration_us"]).all()


def test_training_runs_have_no_phase_tables():
    """Two training ranks compare as before: no per-phase table."""
    report = compare(REPO / "fixtures/torch/gloo_moe_cpu_4rank/sleep", ranks=(0, 1))
    assert not [name for name in report.tables if "phase" in name]
