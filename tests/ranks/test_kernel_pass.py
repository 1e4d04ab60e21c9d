"""The kernel pass of a batch of files (`reduce_kernel_files`): small files of one header are read together and any
file that cannot be is read alone — on the real files and on copies of them broken on purpose, checked against
the rows of the CSV files."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import ASCEND, QWEN3, fnum, raw_rows
from polars.testing import assert_frame_equal

from profan.model.errors import ProfanInputError
from profan.model.rank import RankData
from profan.ranks import kernel_pass
from profan.ranks.kernel_pass import KernelPass, KernelRequest, reduce_kernel_files
from profan.ranks.rankmap import read_ranks
from profan.rulepack.pack import load
from profan.sources.discovery.discover import discover

OUT = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
QWEN_FILES = [QWEN3 / f"rank_{r}_ascend_pt" / OUT for r in (0, 2)]  # the ranks with a kernel file
ALEXNET = ASCEND / "msinsight-alexnet-2rank-2025" / "level2"
GPT3 = ASCEND / "msinsight-gpt3-2rank-2023"


def _spy(monkeypatch, name: str) -> list[list[str]]:
    """The file names each call of ``kernel_pass.<name>`` read (a list of files, or one request)."""
    calls: list[list[str]] = []
    real = getattr(kernel_pass, name)

    def spy(first, *args):
        calls.append([k.path.name for k in first] if isinstance(first, list) else [first.path.name])
        return real(first, *args)

    monkeypatch.setattr(kernel_pass, name, spy)
    return calls


@pytest.mark.parametrize("timed", [True, False])
def test_files_of_two_headers_on_real_ranks(timed, monkeypatch):
    pack = load()
    files = [*QWEN_FILES, *(ALEXNET / f"rank{r}_ascend_pt" / OUT for r in range(2))]
    together = _spy(monkeypatch, "_reduce_same_header")
    got = reduce_kernel_files([KernelRequest(f, timed=timed) for f in files], pack)
    assert len(together) == 2 and all(len(c) == 2 for c in together)  # one query per header
    for path, kp in zip(files, got, strict=True):
        _, rows = raw_rows(path)
        assert isinstance(kp, KernelPass) and kp.counts == {"rows": len(rows), "skipped": 0}
        assert kp.groups["count"].sum() == len(rows)
        assert (kp.timed is not None) == timed
        if timed:
            assert sorted(kp.timed["loc"].to_list()) == sorted(rows)
    # the values themselves, against the CSV: Qwen3 rank 2: communication time and its longest kernel's line
    _, rows = raw_rows(QWEN_FILES[1])
    g = got[1].groups
    comm = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Accelerator Core"] == "COMMUNICATION")
    assert g.filter(pl.col("bucket") == "communication")["time_us"].sum() == pytest.approx(comm, abs=1e-3)
    top = g.sort("max_us", descending=True).row(0, named=True)
    assert fnum(rows[top["lines"][0]]["Duration(us)"]) == pytest.approx(top["max_us"])
    assert rows[top["lines"][0]]["Name"] == top["name"]


def test_files_that_cannot_be_read_together_are_read_alone(tmp_path, monkeypatch):
    """A quoted line break, a header-only file, a text number (gpt3's real misaligned row)."""
    pack = load()
    a, b = (Path(shutil.copy(QWEN_FILES[i], tmp_path / f"k{i}.csv")) for i in range(2))
    multi = tmp_path / "multi.csv"
    lines = QWEN_FILES[1].read_text().splitlines(keepends=True)
    header = lines[0].split(",")
    name_at = header.index("Name")
    cells = lines[1].split(",")
    cells[name_at] = '"two\nlines"'
    multi.write_text(lines[0] + ",".join(cells) + "".join(lines[2:]))
    empty = tmp_path / "empty.csv"
    empty.write_text(lines[0])
    alone = _spy(monkeypatch, "_reduce_alone")
    got = reduce_kernel_files([KernelRequest(f, timed=True) for f in (a, multi, empty, b)], pack)
    assert sorted(alone) == [["empty.csv"], ["multi.csv"]]
    for i, src in ((0, QWEN_FILES[0]), (3, QWEN_FILES[1])):
        assert got[i].counts["rows"] == len(raw_rows(src)[1])
    # read alone, the quoted line break is found and every row cites its true physical line
    assert got[1].timed.filter(pl.col("name") == "two\nlines")["loc"].to_list() == [2]
    assert got[1].timed["loc"].max() == len(lines) + 1
    assert isinstance(got[2], ProfanInputError) and got[2].problem == "no data rows (header only)"
    # gpt3 rank 0 has a row one field short ("NO" in Mix Block Dim): the fast reader refuses it, so both files of
    # that header are read alone, and the row is still counted as skipped
    alone.clear()
    gpt = reduce_kernel_files([KernelRequest(GPT3 / f"test_rank_{r}" / OUT) for r in range(2)], pack)
    assert len(alone) == 2 and gpt[0].counts["skipped"] == 1


def test_a_failing_rank_in_a_batch_is_its_own_entry(tmp_path):
    pack = load()
    for r in range(4):
        shutil.copytree(QWEN3 / f"rank_{r}_ascend_pt", tmp_path / f"rank_{r}_ascend_pt")
    bad = tmp_path / "rank_2_ascend_pt" / OUT
    bad.write_text(bad.read_text().splitlines(keepends=True)[0])
    disc = discover(tmp_path)
    got = read_ranks(disc.ranks, disc.root, pack)
    assert [type(g) for g in got] == [RankData, RankData, ProfanInputError, RankData]
    assert got[2].problem == "no data rows (header only)" and Path(got[2].path) == bad
    _, rows = raw_rows(QWEN_FILES[0])
    assert got[0].rows_read["kernel_details"] == len(rows)
    assert got[0].windows is not None and got[0].windows.height > 0  # the other ranks' steps still ran


def test_a_batch_holds_at_most_its_byte_cap_of_kernel_text(tmp_path, monkeypatch):
    """Files of one header are read together only up to `BATCH_BYTES`: with a cap of just over two copies of
    Qwen3 rank 0, five copies are read as parts of two, two and one — and every copy reads the same."""
    pack = load()
    files = [Path(shutil.copy(QWEN_FILES[0], tmp_path / f"k{i}.csv")) for i in range(5)]
    size = files[0].stat().st_size
    monkeypatch.setattr(kernel_pass, "BATCH_BYTES", 2 * size + 1)
    together = _spy(monkeypatch, "_reduce_same_header")
    got = reduce_kernel_files([KernelRequest(f, timed=True) for f in files], pack)
    assert together == [["k0.csv", "k1.csv"], ["k2.csv", "k3.csv"], ["k4.csv"]]
    for kp in got[1:]:
        assert_frame_equal(kp.groups, got[0].groups, check_exact=True)
        assert_frame_equal(kp.timed, got[0].timed, check_exact=True)
        assert kp.counts == got[0].counts == {"rows": len(raw_rows(QWEN_FILES[0])[1]), "skipped": 0}
