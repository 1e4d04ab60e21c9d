"""The cause for gradient reductions waited on before work that could hide them, on the real pair that plants
it (gloo_gain_pairs sync_comm against overlap) and on every run that does not: its gain, its ranks, its level,
and that the runs with nothing overlappable get neither the cause nor its finding."""

from __future__ import annotations

import pytest
from conftest import TORCH, analysed, run_cli

PAIRS = TORCH / "gloo_gain_pairs"
# runs whose gradient all_reduce nothing could hide, or another fault (the pairs' other sides)
NOT_PLANTED = [
    *sorted(str(path.relative_to(TORCH)) for path in (TORCH / "gloo_healthy_seeds").iterdir() if path.is_dir()),
    *[f"gloo_gain_pairs/{run}" for run in ("clean", "clean_again", "loader_clean", "overlap", "compute", "sleep")],
    "gloo_moe_cpu_4rank/none",
    "gloo_moe_cpu_4rank/async_grad",
    "gloo_moe_seeds/balanced_seed1",
    "gloo_moe_seeds/balanced_seed3",
    "gloo_moe_ep_overlap",
]


def test_waited_on_first_the_reduction_is_the_first_cause_on_every_rank_with_the_exposed_time_as_gain():
    report = analysed(PAIRS / "sync_comm")
    cause = report.causes[0]
    assert cause.check == "comm-overlappable"
    assert cause.ranks == (0, 1, 2, 3) and cause.steps == (2, 3, 4, 5)
    # the median over steps 2-5 of 52.68, 50.49, 52.87, 55.29 ms (the least exposed rank's all_reduce each)
    assert cause.impact_us == pytest.approx((52676.636 + 52871.391) / 2, abs=0.01)
    # 27.6% of the 190.9 ms step, 15.6% above the CPU runs' normal 12%: a warning, not critical
    assert cause.severity == "warning"
    assert "least computing rank's compute outside the collectives (61.6 ms per step)" in cause.assumption
    assert "async_op=True" in cause.action and "gradient_as_bucket_view" in cause.action
    cited = {e.file: e.events for e in cause.evidence}
    assert sorted(cited) == [f"rank{rank}.pt.trace.json.gz" for rank in range(4)]


def test_fail_on_warning_fails_the_waited_run_and_passes_the_overlapped_one():
    waited = run_cli("analyze", str(PAIRS / "sync_comm"), "--fail-on", "warning", "-q", "-f", "json")
    assert waited.returncode == 1, waited.stderr
    assert "comm-overlappable" in waited.stderr
    overlapped = run_cli("analyze", str(PAIRS / "overlap"), "--fail-on", "warning", "-q", "-f", "json")
    assert overlapped.returncode == 0, overlapped.stderr


@pytest.mark.parametrize("run", NOT_PLANTED)
def test_runs_without_the_fault_get_neither_the_cause_nor_its_finding(run):
    report = analysed(TORCH / run)
    assert "comm-overlappable" not in {cause.check for cause in report.causes}
    assert "comm-overlappable" not in {finding.check for finding in report.findings}
    assert "comm_overlappable" not in report.tables
