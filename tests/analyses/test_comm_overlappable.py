"""Gradient reductions exposed on every rank, on the real overlappable-communication pair (gloo_gain_pairs:
sync_comm waits on the all_reduce before 40 independent matmuls, overlap runs them beside it): each rank's exposed
time in each all_reduce is checked against a sweep written here over the raw events, and the per-step measure
(the least exposed rank's time, bounded by the least computing rank's compute) against it."""

from __future__ import annotations

import statistics

import polars as pl
import pytest
from conftest import TORCH, merged_runs

from profan.analyses.across_ranks import align, overlappable
from profan.analyses.across_ranks.section import _step_times
from profan.analyses.per_rank import steps
from profan.pipeline import discover, load_ranks
from profan.rulepack.pack import load
from profan.sources.trace import kineto_rank

PAIRS = TORCH / "gloo_gain_pairs"


def _covered(span: tuple[float, float], runs: list[tuple[float, float]]) -> float:
    """How much of ``span`` the disjoint ``runs`` cover, run by run (no cumulative search)."""
    return sum(max(0.0, min(span[1], b) - max(span[0], a)) for a, b in runs)


def _exposed_by_sweep(run) -> dict[tuple[int, int], float]:
    """(step, rank) -> the rank's gloo:all_reduce time with no compute event of the rank beside it (one per step
    in these runs), from the rank's events as the trace reader places and the rules classify them."""
    pack = load()
    out = {}
    for rank in range(4):
        kt, _ = kineto_rank.load_cached(run / f"rank{rank}.pt.trace.json.gz", pack.roles)
        dev = kineto_rank.classify_events(kt.device, pack.rules_for("cpu"), pack.roles)
        rows = dev.select("step", "name", "ts_us", "end_us", "bucket").rows()
        compute = merged_runs([(a, b) for _, _, a, b, bucket in rows if bucket != "communication"])
        for step, name, a, b, _ in rows:
            if name == "gloo:all_reduce" and step is not None:
                out[(step, rank)] = (b - a) - _covered((a, b), compute)
    return out


def _table(run) -> pl.DataFrame:
    pack = load()
    disc = discover(run)
    ranks = load_ranks(disc.ranks, disc.root, pack, 1, lambda _msg: None)
    timed = _step_times(ranks, steps.step_table(ranks))
    return overlappable.per_step(align.align(ranks), timed, pack.check(overlappable.CHECK)["reduction_kernel"])


@pytest.mark.parametrize("run", ["sync_comm", "overlap"])
def test_each_steps_exposed_reduction_is_the_least_exposed_ranks_by_an_independent_sweep(run):
    sweep = _exposed_by_sweep(PAIRS / run)
    table = _table(PAIRS / run)
    assert table["step"].to_list() == [2, 3, 4, 5]
    for row in table.iter_rows(named=True):
        assert row["reductions"] == 1 and row["ranks"] == [0, 1, 2, 3]
        least = min(sweep[(row["step"], rank)] for rank in range(4))
        assert row["exposed_us"] == pytest.approx(least, abs=0.01)
        assert row["overlappable_us"] == pytest.approx(min(least, row["compute_us"]), abs=0.01)


def test_waited_on_first_the_all_reduce_is_exposed_whole_and_beside_the_side_work_almost_hidden():
    sync, overlap = _table(PAIRS / "sync_comm"), _table(PAIRS / "overlap")
    # sync_comm: nothing computes beside it on any rank; 50.5-55.3 ms per step, the median 52.8 ms
    assert sync["overlappable_us"].to_list() == pytest.approx([52676.636, 50490.567, 52871.391, 55289.145], abs=0.01)
    assert statistics.median(sync["overlappable_us"]) / statistics.mean(sync["step_us"]) == pytest.approx(
        0.2765, abs=1e-4
    )
    assert not sync["compute_bound"].any()  # 58-71 ms of compute per step on the least computing rank
    # overlap: the same all_reduce with the side work beside it leaves 0.4-8.0 ms exposed, 1.1% of the step
    assert overlap["overlappable_us"].max() < 8100
    assert statistics.median(overlap["overlappable_us"]) / statistics.mean(overlap["step_us"]) < 0.012
