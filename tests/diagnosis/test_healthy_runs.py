"""A healthy run says so: on every capture with nothing planted, no cause and no finding at warning or above, and
`--fail-on warning` passes; on every capture with a planted fault it fails. Severity follows cost above what a
healthy run of its kind spends (rules/severity.toml), and these runs are where that baseline was measured."""

from __future__ import annotations

import polars as pl
import pytest
import tomllib
from conftest import TORCH, analysed, run_cli

from profan.rulepack.severity import defaults as severity_defaults

HEALTHY_SEEDS = sorted((TORCH / "gloo_healthy_seeds").glob("r*_seed*"))
# the bundled captures with nothing planted (ground_truth.toml fault = "none", or a run the PROVENANCE says is so)
BUNDLED_HEALTHY = [
    TORCH / "gloo_moe_cpu_4rank" / "none",
    TORCH / "gloo_moe_cpu_4rank" / "async_grad",
    *sorted((TORCH / "gloo_moe_seeds").glob("balanced_seed*")),
    TORCH / "rl_grpo_cpu" / "normal",
    TORCH / "serving_llama_cpu_uniform",
    # the gain pairs' clean sides (PROVENANCE: --fault none) and the serving captures with no interference planted
    *(TORCH / "gloo_gain_pairs" / name for name in ("clean", "clean_again", "loader_clean", "overlap")),
    TORCH / "serving_llama_cpu_mixed",
    TORCH / "serving_mixtral_cpu_moe",
]
FAULTY = [
    *(TORCH / "gloo_moe_cpu_4rank" / name for name in ("sleep", "compute", "hot_expert")),
    *sorted(p for p in (TORCH / "gloo_moe_seeds").iterdir() if p.is_dir() and not p.name.startswith("balanced")),
    TORCH / "memory_gloo_2rank",
    # the gain pairs' faulty sides, the RL runs with a planted fault and the serving captures whose prefills stall
    # the running decodes (their PROVENANCE.md says what each plants)
    *(TORCH / "gloo_gain_pairs" / name for name in ("sleep", "compute", "hot_expert", "loader", "sync_comm")),
    *(TORCH / "rl_grpo_cpu" / name for name in ("long_tail", "slow_sync", "under_batched", "logprob_small")),
    TORCH / "serving_llama_cpu_prefill_join",
    TORCH / "serving_llama_cpu_interference",
]
LOUD = {"warning", "critical"}


def test_the_healthy_seeds_are_what_they_say():
    """5 seeds at 2 ranks and 5 at 4, each with nothing planted, as its ground truth says."""
    truths = [tomllib.loads((d / "ground_truth.toml").read_text()) for d in HEALTHY_SEEDS]
    assert sorted((t["ranks"], t["seed"]) for t in truths) == [(r, s) for r in (2, 4) for s in range(1, 6)]
    assert {t["fault"] for t in truths} == {"none"}
    for d, truth in zip(HEALTHY_SEEDS, truths, strict=True):
        assert len(list(d.glob("rank*.pt.trace.json.gz"))) == truth["ranks"]


HEALTHY = [*HEALTHY_SEEDS, *BUNDLED_HEALTHY]


@pytest.mark.parametrize("folder", HEALTHY, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_healthy_run_raises_nothing(folder):
    report = analysed(folder)
    loud = [(c.id, c.check, c.severity) for c in report.causes if c.severity in LOUD]
    loud += [(f.id, f.check, f.severity) for f in report.findings if f.severity in LOUD]
    assert loud == []


@pytest.mark.parametrize("folder", [HEALTHY_SEEDS[0], HEALTHY_SEEDS[-1], BUNDLED_HEALTHY[0]], ids=lambda p: p.name)
def test_fail_on_warning_passes_on_a_healthy_run(folder):
    res = run_cli("analyze", str(folder), "--brief", "--fail-on", "warning")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("folder", FAULTY, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_planted_fault_fails_the_gate(folder):
    """Each planted fault's cause is at warning or above, so `--fail-on warning` fails, naming it."""
    report = analysed(folder)
    assert report.causes and report.causes[0].severity in LOUD
    res = run_cli("analyze", str(folder), "--brief", "--fail-on", "warning")
    assert res.returncode == 1 and f"C1 ({report.causes[0].severity}, {report.causes[0].check})" in res.stderr


def test_what_the_baselines_were_measured_on():
    """The two healthy spreads the CPU baselines rest on, read from the captures: the routers' compute spread
    (r4_seed1: the busiest rank 12.95 ms over the median, a warning by the check's ratio alone) and a descheduled
    rank's gap (r4_seed3 rank 0 step 3: 49.9% of the step idle): both info now."""
    spread = analysed(TORCH / "gloo_healthy_seeds" / "r4_seed1").finding("F1")
    assert spread.check == "compute-imbalance" and spread.severity == "info"
    assert spread.metrics["max_computing_us"] - spread.metrics["median_computing_us"] == pytest.approx(12952.3, abs=0.1)
    gap = next(f for f in analysed(TORCH / "gloo_healthy_seeds" / "r4_seed3").findings if f.check == "device-idle")
    assert (gap.rank, gap.step, gap.severity) == (0, 3, "info") and gap.metrics["share"] == pytest.approx(0.4989)


def _held_up_share(report) -> tuple[int, float]:
    """The latest rank of a run and its hold-up (how much later than the second-latest rank it came at its
    outlier collectives) summed over the profiled steps, per profiled step, as a share of the median step."""
    per = report.tables["straggler_ranks"]
    steps = per["step"].n_unique()
    lag = per.group_by("rank").agg(pl.col("lag_us").sum() / steps).sort("lag_us", descending=True).row(0)
    return int(lag[0]), lag[1] / float(per["step_us"].median())


def test_the_straggler_baseline_is_what_healthy_cpu_runs_show():
    """rules/severity.toml's CPU straggler baseline rests on every 4-rank run with nothing planted (2 ranks are
    too few to align): the latest rank holds the others up at most 4.39% of a step per profiled step
    (gloo_gain_pairs/clean_again rank 1, 11.0 ms over two steps of four); a planted sleep straggler 36%.
    balanced_seed2's rank 1 (4.3 ms in one step of two, 2.4% per step) is still found by the straggler check, at
    info, and is no cause."""
    four = ("none", "async_grad", "clean", "clean_again", "loader_clean")
    healthy = [p for p in HEALTHY if p.name.startswith(("r4_", "balanced_")) or p.name in four]
    shares = {f"{p.parent.name}/{p.name}": _held_up_share(analysed(p)) for p in healthy}
    assert len(shares) == 15 and max(shares, key=lambda name: shares[name][1]) == "gloo_gain_pairs/clean_again"
    assert shares["gloo_gain_pairs/clean_again"] == (1, pytest.approx(0.0439, abs=5e-4))
    assert shares["gloo_moe_seeds/balanced_seed4"] == (1, pytest.approx(0.0395, abs=5e-4))
    baseline = severity_defaults().normal_share("cpu", "straggler")
    assert max(share for _, share in shares.values()) < baseline == 0.05
    rank, share = _held_up_share(analysed(TORCH / "gloo_moe_cpu_4rank" / "sleep"))
    assert rank == 2 and share == pytest.approx(0.361, abs=1e-3)
    seed2 = analysed(TORCH / "gloo_moe_seeds" / "balanced_seed2")
    found = next(f for f in seed2.ungrouped() if f.check == "straggler" and f.rank == 1)
    assert found.severity == "info" and found.metrics["lag_us_per_profiled_step"] == pytest.approx(4300.635 / 2)
    assert [c.check for c in seed2.causes if c.check == "straggler"] == []
