"""The collectives and pre-collective windows of a batch of ranks, computed as one table keyed by rank
(`ascend_collectives_batch`), equal each rank computed alone — on the real Qwen3 ranks and on a synthetic cluster
with a host-gap straggler, a hot expert and a slow link, where the windows and gaps carry the straggler's cause."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import QWEN3
from polars.testing import assert_frame_equal

from profan import collectives
from profan.discover import discover
from profan.rankmap import RankData, load_rank, load_ranks_batch
from profan.rulepack import load
from profan.synth import generate

TABLES = ("groups", "collectives", "windows", "comm_ops", "comm_links", "steps")


def _batched_equals_alone(root, monkeypatch) -> list[RankData]:
    pack = load()
    disc = discover(root)
    calls = []
    real = collectives.ascend_collectives_batch
    monkeypatch.setattr(collectives, "ascend_collectives_batch",
                        lambda ranks, p: calls.append(len(ranks)) or real(ranks, p))
    got = load_ranks_batch(disc.ranks, disc.root, pack)
    assert calls and sum(calls) > 1  # the batch path ran, not the one-rank fallback
    for rs, rd in zip(disc.ranks, got, strict=True):
        assert isinstance(rd, RankData)
        alone = load_rank(rs, disc.root, pack)
        for table in TABLES:
            mine, theirs = getattr(rd, table), getattr(alone, table)
            assert (mine is None) == (theirs is None), table
            if mine is not None:
                assert_frame_equal(mine, theirs)
        assert rd.rows_read == alone.rows_read and rd.warnings == alone.warnings
    return got


def test_real_ranks(monkeypatch):
    got = _batched_equals_alone(QWEN3, monkeypatch)
    # ranks 0 and 2 hold kernel files: their ops carry the kernel rows' lines, and windows exist
    for r in (got[0], got[2]):
        assert r.collectives["kline"].null_count() < r.collectives.height
        assert r.windows is not None and r.windows.height > 0


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    out = tmp_path_factory.mktemp("faulty")
    truth = generate(out, ranks=8, layers=4, steps=2, seed=11, straggler_rank=5, straggler_kind="host_gap",
                     straggler_extra_us=3000.0, hot_expert=2, slow_link=(1, 6))
    return out, truth


def test_synthetic_cluster_with_faults(faulty, monkeypatch):
    root, _ = faulty
    got = _batched_equals_alone(root, monkeypatch)
    # the injected host gap is in rank 5's windows, as computed by the batch: ~3 ms, the longest gap of the rank
    gaps = {r.rank: r.collectives["gap_us"].max() for r in got}
    assert gaps[5] == pytest.approx(3000.0, rel=0.1)
    assert gaps[5] == max(gaps.values())
    typical = sorted(gaps.values())[len(gaps) // 2]
    assert typical < 1000.0


def test_ranks_typed_differently_are_each_computed_alone(faulty):
    """A rank whose tables hold a column in another type (a cache from another version, another source) is not
    forced into one table: each rank is computed the one-rank way."""
    root, _ = faulty
    pack = load()
    disc = discover(root)
    ranks = [load_rank(rs, disc.root, pack) for rs in disc.ranks[:2]]
    from profan.kernel_pass import reduce_kernels

    items = []
    for rs, rd in zip(disc.ranks[:2], ranks, strict=True):
        kp = reduce_kernels(rs.files["kernel_details"], pack, timed=True)
        items.append(collectives.AscendRank(kp.timed, rd.comm_ops, rd.files["communication"],
                                            rd.files["kernel_details"], rd.groups))
    items[1].comm_ops = items[1].comm_ops.with_columns(pl.col("wait_ms").cast(pl.Float32))
    got = collectives.ascend_collectives_batch(items, pack)
    for (colls, windows), rd in zip(got, ranks, strict=True):
        assert colls.height == rd.collectives.height
        assert_frame_equal(windows, rd.windows)


@pytest.mark.parametrize("rank", [0, 2])
def test_windows_streamed_in_slices_equal_one_pass(rank, monkeypatch):
    """A big kernel file's windows are built slice by slice and merged: the merged windows cite the same rows, in
    the same order (longest first), as one pass over the whole file — on the real Qwen3 ranks cut into slices of
    500 rows. The cited rows' durations are checked against the CSV."""
    from conftest import fnum, raw_rows

    pack = load()
    disc = discover(QWEN3)
    rs = disc.ranks[rank]
    whole = load_rank(rs, disc.root, pack)
    monkeypatch.setattr(collectives, "BATCH_ROWS", 500)
    sliced = load_rank(rs, disc.root, pack)
    _, rows = raw_rows(rs.files["kernel_details"])
    assert whole.windows.height > 0 and len(rows) > 2 * 500  # at least three slices
    cols = ["cid", "op", "name", "bucket", "count", "locs"]
    key = ["cid", "time_us", "name", "op", "type", "core"]
    assert_frame_equal(sliced.windows.sort(key).select(cols), whole.windows.sort(key).select(cols))
    assert_frame_equal(sliced.windows.sort(key).select("time_us"), whole.windows.sort(key).select("time_us"),
                       rel_tol=1e-12)
    for locs in whole.windows["locs"].head(50):
        durs = [fnum(rows[line]["Duration(us)"]) for line in locs]
        assert durs == sorted(durs, reverse=True)
