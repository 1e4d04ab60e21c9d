"""The collectives and pre-collective windows of a batch of ranks, computed as one table keyed by rank
(`ascend_collectives`) — on the real Qwen3 ranks, checked against their CSV rows, and on a synthetic cluster with a
host-gap straggler, a hot expert and a slow link, where the windows and gaps carry the straggler's cause."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import QWEN3, fnum, raw_rows
from polars.testing import assert_frame_equal

from profan.model.rank import RankData
from profan.ranks import collectives
from profan.ranks.kernel_pass import KernelRequest, reduce_kernel_files
from profan.ranks.rankmap import read_ranks
from profan.rulepack.pack import load
from profan.sources.discovery.discover import discover
from profan.synth import generate


def _read(root, monkeypatch) -> list[RankData]:
    """All ranks of ``root`` read as one batch; the ranks with kernel rows had their collectives computed
    together (one `_from_ops` call for more than one rank)."""
    pack = load()
    disc = discover(root)
    calls = []
    real = collectives._from_ops
    monkeypatch.setattr(collectives, "_from_ops", lambda ranks, p: calls.append(len(ranks)) or real(ranks, p))
    got = read_ranks(disc.ranks, disc.root, pack)
    assert calls and max(calls) > 1
    assert all(isinstance(rd, RankData) for rd in got)
    return got


def test_real_ranks(monkeypatch):
    got = _read(QWEN3, monkeypatch)
    # ranks 0 and 2 hold kernel files: their ops carry the kernel rows' lines, and windows exist
    for r in (got[0], got[2]):
        _, rows = raw_rows(QWEN3 / r.files["kernel_details"])
        cited = r.collectives.filter(pl.col("kline").is_not_null())
        assert cited.height > 0
        for name, kline in cited.select("name", "kline").iter_rows():  # each op's own HCCL row
            assert rows[kline]["Name"] == name and rows[kline]["Accelerator Core"] == "COMMUNICATION"
        assert r.windows is not None and r.windows.height > 0
    assert got[1].windows is None and got[1].collectives["kline"].null_count() == got[1].collectives.height


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    out = tmp_path_factory.mktemp("faulty")
    truth = generate(
        out,
        ranks=8,
        layers=4,
        steps=2,
        seed=11,
        straggler_rank=5,
        straggler_kind="host_gap",
        straggler_extra_us=3000.0,
        hot_expert=2,
        slow_link=(1, 6),
    )
    return out, truth


def test_synthetic_cluster_with_faults(faulty, monkeypatch):
    root, _ = faulty
    got = _read(root, monkeypatch)
    # the injected host gap is in rank 5's windows, as computed by the batch: ~3 ms, the longest gap of the rank
    gaps = {r.rank: r.collectives["gap_us"].max() for r in got}
    assert gaps[5] == pytest.approx(3000.0, rel=0.1)
    assert gaps[5] == max(gaps.values())
    typical = sorted(gaps.values())[len(gaps) // 2]
    assert typical < 1000.0


def test_ranks_typed_differently_are_computed_apart(faulty):
    """A rank whose tables hold a column in another type (a cache from another version, another source) is not
    forced into one table with the others: it is computed in a part of its own, with the same result."""
    root, _ = faulty
    pack = load()
    disc = discover(root)
    ranks = read_ranks(disc.ranks[:2], disc.root, pack)
    passes = reduce_kernel_files([KernelRequest(rs.files["kernel_details"], timed=True) for rs in disc.ranks[:2]], pack)
    items = [
        collectives.AscendRank(
            rd.comm_ops,
            rd.files["communication"],
            rs.files["kernel_details"],
            rd.files["kernel_details"],
            None,
            rd.groups,
            kp.timed,
        )
        for rs, rd, kp in zip(disc.ranks[:2], ranks, passes, strict=True)
    ]
    items[1].comm_ops = items[1].comm_ops.with_columns(pl.col("wait_ms").cast(pl.Float32))
    assert collectives._parts(items) == [[0], [1]]
    got = collectives.ascend_collectives(items, pack)
    for (colls, windows), rd in zip(got, ranks, strict=True):
        assert colls.height == rd.collectives.height
        assert_frame_equal(windows, rd.windows, check_exact=True)


@pytest.mark.parametrize("rank", [0, 2])
def test_windows_streamed_in_slices_equal_one_pass(rank, monkeypatch):
    """A big kernel file's windows are built slice by slice and merged: the merged windows cite the same rows, in
    the same order (longest first), as one pass over the whole file — on the real Qwen3 ranks cut into slices of
    500 rows. The cited rows' durations are checked against the CSV."""
    from conftest import fnum, raw_rows

    pack = load()
    disc = discover(QWEN3)
    rs = disc.ranks[rank]
    (whole,) = read_ranks([rs], disc.root, pack)
    monkeypatch.setattr(collectives, "BATCH_ROWS", 500)
    (sliced,) = read_ranks([rs], disc.root, pack)
    _, rows = raw_rows(rs.files["kernel_details"])
    assert whole.windows.height > 0 and len(rows) > 2 * 500  # at least three slices
    cols = ["cid", "op", "name", "bucket", "count", "locs"]
    key = ["cid", "time_us", "name", "op", "type", "core"]
    assert_frame_equal(sliced.windows.sort(key).select(cols), whole.windows.sort(key).select(cols))
    assert_frame_equal(
        sliced.windows.sort(key).select("time_us"), whole.windows.sort(key).select("time_us"), rel_tol=1e-12
    )
    for locs in whole.windows["locs"].head(50):
        durs = [fnum(rows[line]["Duration(us)"]) for line in locs]
        assert durs == sorted(durs, reverse=True)


def _qwen_copy(tmp_path, edit) -> Path:
    """A copy of the real Qwen3 set with ``edit(lines)`` applied to the kernel file of ranks 0 and 2."""
    root = tmp_path / "qwen"
    shutil.copytree(QWEN3, root)
    for r in (0, 2):
        f = root / f"rank_{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        f.write_text("".join(edit(f.read_text().splitlines(keepends=True))))
    return root


def test_kernel_files_of_hccl_rows_only(tmp_path, monkeypatch):
    """Every kernel file of the batch holds only its HCCL rows: no compute row anywhere, so no window — and the
    kernels-vs-step-trace finding says so, citing the step_trace row (there is no compute row to cite)."""
    from conftest import measured, run_cli

    root = _qwen_copy(tmp_path, lambda lines: [lines[0], *(x for x in lines[1:] if ",COMMUNICATION," in x)])
    got = _read(root, monkeypatch)
    assert all(r.windows is None for r in got)
    assert got[0].collectives["kline"].null_count() < got[0].collectives.height  # the HCCL rows are there
    res = run_cli("analyze", str(root), "-f", "json", "-q", "-j", "1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    cov = [f for f in measured(doc) if f["check"] == "kernels-vs-step-trace" and f["rank"] == 0]
    assert cov and cov[0]["metrics"]["kernel_compute_us"] == 0
    assert [e["select"]["source"] for e in cov[0]["evidence"]] == ["step_trace_time"]


@pytest.mark.parametrize(("column", "value"), [("Duration(us)", "abc"), ("Step Id", "inf")])
def test_a_cell_polars_refuses_in_a_batch_is_that_rank_s_counted_skip(tmp_path, column, value):
    """A cell the batch's fast reader refuses (text in a number column) or a Step Id that is no step number, in
    rank 2's kernel file: the batch goes the one-file way where it must, and the result is rank 2's one skipped
    row, counted, the other ranks' reads untouched — not a polars message about the whole batch's values."""

    root = _qwen_copy(tmp_path, lambda lines: lines)
    f = root / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    head, *lines = f.read_text().splitlines(keepends=True)
    cells = lines[2].split(",")
    lost = fnum(cells[head.split(",").index("Duration(us)")])
    cells[head.split(",").index(column)] = value
    lines[2] = ",".join(cells)
    f.write_text(head + "".join(lines))
    pack = load()
    got = read_ranks(discover(root).ranks, root, pack)
    assert [type(g).__name__ for g in got] == ["RankData"] * 4
    assert [g.rows_skipped.get("kernel_details", 0) for g in got] == [0, 0, 1, 0]
    clean = read_ranks(discover(QWEN3).ranks, QWEN3, pack)
    assert got[2].rows_read == clean[2].rows_read
    assert got[2].groups["time_us"].sum() == pytest.approx(clean[2].groups["time_us"].sum() - lost, rel=1e-9)
