"""Small kernel files reduced together (`reduce_kernel_batch`) give each file what it gives read alone, and any
file the batch cannot take goes the one-file way — on the real files and on copies of them broken on purpose."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import ASCEND, QWEN3, fnum, raw_rows
from polars.testing import assert_frame_equal

from profan.discover import discover
from profan.errors import ProfanInputError
from profan.kernel_pass import reduce_kernel_batch, reduce_kernels
from profan.rankmap import RankData, load_rank, load_ranks_batch
from profan.rulepack import load

OUT = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
QWEN_FILES = [QWEN3 / f"rank_{r}_ascend_pt" / OUT for r in (0, 2)]  # the ranks with a kernel file
ALEXNET = ASCEND / "msinsight-alexnet-2rank-2025" / "level2"
GPT3 = ASCEND / "msinsight-gpt3-2rank-2023"


def _same(batched, alone) -> None:
    assert batched is not None
    assert_frame_equal(batched.groups, alone.groups, check_exact=True)
    assert batched.counts == alone.counts
    assert (batched.variant, batched.has_pipe_ratios) == (alone.variant, alone.has_pipe_ratios)
    if alone.timed is None:
        assert batched.timed is None
    else:
        assert_frame_equal(batched.timed, alone.timed, check_exact=True)


@pytest.mark.parametrize("timed", [True, False])
def test_batch_equals_each_file_alone_on_real_ranks(timed):
    pack = load()
    files = [*QWEN_FILES, *(ALEXNET / f"rank{r}_ascend_pt" / OUT for r in range(2))]  # two headers in one batch
    got = reduce_kernel_batch(files, pack, timed=timed)
    for path, kp in zip(files, got, strict=True):
        _same(kp, reduce_kernels(path, pack, timed=timed))
    # the values themselves, against the CSV: Qwen3 rank 2: communication time and its longest kernel's line
    _, rows = raw_rows(QWEN_FILES[1])
    g = got[1].groups
    comm = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Accelerator Core"] == "COMMUNICATION")
    assert g.filter(pl.col("bucket") == "communication")["time_us"].sum() == pytest.approx(comm, abs=1e-3)
    top = g.sort("max_us", descending=True).row(0, named=True)
    assert fnum(rows[top["lines"][0]]["Duration(us)"]) == pytest.approx(top["max_us"])
    assert rows[top["lines"][0]]["Name"] == top["name"]
    assert got[1].counts == {"rows": len(rows), "skipped": 0}


def test_files_the_batch_cannot_take_go_alone(tmp_path):
    """A quoted line break, a header-only file, a text number (gpt3's real misaligned row), a lone header."""
    pack = load()
    a, b = (shutil.copy(QWEN_FILES[i], tmp_path / f"k{i}.csv") for i in range(2))
    multi = tmp_path / "multi.csv"
    lines = QWEN_FILES[1].read_text().splitlines(keepends=True)
    header = lines[0].split(",")
    name_at = header.index("Name")
    cells = lines[1].split(",")
    cells[name_at] = '"two\nlines"'
    multi.write_text(lines[0] + ",".join(cells) + "".join(lines[2:]))
    empty = tmp_path / "empty.csv"
    empty.write_text(lines[0])
    lone = ALEXNET / "rank0_ascend_pt" / OUT
    files = [Path(a), multi, empty, Path(b), lone]
    got = reduce_kernel_batch(files, pack, timed=True)
    assert [kp is not None for kp in got] == [True, False, False, True, False]
    for i in (0, 3):
        _same(got[i], reduce_kernels(files[i], pack, timed=True))
    alone = reduce_kernels(multi, pack, timed=True)  # the one-file way finds the true lines
    assert alone.timed.filter(pl.col("name") == "two\nlines")["loc"].to_list() == [2]
    assert alone.timed["loc"].max() == len(lines) + 1
    # gpt3 rank 0 has a row one field short ("NO" in Mix Block Dim): the fast reader refuses it, so the whole
    # header group goes alone, and the row is still counted as skipped
    gpt = [GPT3 / f"test_rank_{r}" / OUT for r in range(2)]
    assert reduce_kernel_batch(gpt, pack) == [None, None]
    assert reduce_kernels(gpt[0], pack).counts["skipped"] == 1


def test_a_failing_rank_in_a_batch_is_its_own_entry(tmp_path):
    pack = load()
    for r in range(4):
        shutil.copytree(QWEN3 / f"rank_{r}_ascend_pt", tmp_path / f"rank_{r}_ascend_pt")
    bad = tmp_path / "rank_2_ascend_pt" / OUT
    bad.write_text(bad.read_text().splitlines(keepends=True)[0])
    disc = discover(tmp_path)
    got = load_ranks_batch(disc.ranks, disc.root, pack)
    assert [type(g) for g in got] == [RankData, RankData, ProfanInputError, RankData]
    assert got[2].problem == "no data rows (header only)" and Path(got[2].path) == bad
    for rs, rd in zip(disc.ranks, got, strict=True):
        if isinstance(rd, RankData):
            alone = load_rank(rs, disc.root, pack)
            for table in ("groups", "windows", "collectives", "comm_ops"):
                mine, theirs = getattr(rd, table), getattr(alone, table)
                assert (mine is None) == (theirs is None), table
                if mine is not None:
                    assert_frame_equal(mine, theirs, check_exact=True)
    assert got[0].windows is not None and got[0].windows.height > 0  # rank 0's windows came from the batch


def test_a_batch_holds_at_most_its_byte_cap_of_kernel_text(tmp_path, monkeypatch):
    """Files of one header are read together only up to `BATCH_BYTES`: with a cap of just over two copies of
    Qwen3 rank 0, five copies are read as parts of two, two and one — the last alone, the one-file way — and
    every file still gets what it gets alone."""
    from profan import kernel_pass

    pack = load()
    files = [Path(shutil.copy(QWEN_FILES[0], tmp_path / f"k{i}.csv")) for i in range(5)]
    size = files[0].stat().st_size
    monkeypatch.setattr(kernel_pass, "BATCH_BYTES", 2 * size + 1)
    read_together = []
    whole = kernel_pass._reduce_same_header

    def spy(kfs, rules, timed):
        read_together.append([kf.path.name for kf in kfs])
        return whole(kfs, rules, timed)

    monkeypatch.setattr(kernel_pass, "_reduce_same_header", spy)
    got = reduce_kernel_batch(files, pack, timed=True)
    assert read_together == [["k0.csv", "k1.csv"], ["k2.csv", "k3.csv"]]
    assert [kp is not None for kp in got] == [True, True, True, True, False]
    alone = reduce_kernels(files[0], pack, timed=True)
    for kp in got[:4]:
        _same(kp, alone)
