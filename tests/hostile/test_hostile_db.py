"""Hostile DB exports: torch_npu's SQLite export (the real AlexNet 2-rank DB capture) with a huge STRING_IDS value
and with a write-ahead log beside it holding committed deletes. Each test builds the file with sqlite3 and checks
profan's report against what SQLite itself says the database holds."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import ASCEND, ROOT

import profan

DB_SET = ASCEND / "msinsight-alexnet-2rank-2025-db" / "level1"
OUT = "ASCEND_PROFILER_OUTPUT"
STEP_KERNELS = """
SELECT count(*), sum(e - s) FROM (
  SELECT t.startNs s, t.endNs e FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId
  UNION ALL SELECT startNs, endNs FROM COMMUNICATION_OP)
WHERE s BETWEEN (SELECT startNs FROM STEP_TIME) AND (SELECT endNs FROM STEP_TIME)"""


def _rank0(tmp_path: Path) -> tuple[Path, Path]:
    """(a writable copy of rank 0's folder, its DB)."""
    rank = Path(shutil.copytree(DB_SET / "rank0_ascend_pt", tmp_path / "data" / "rank0_ascend_pt"))
    return rank, rank / OUT / "ascend_pytorch_profiler_0.db"


def _top_name_id(db: Path) -> tuple[int, str]:
    """(STRING_IDS id, text) of the compute kernel name most tasks carry."""
    c = sqlite3.connect(db)
    try:
        (nid,) = c.execute("SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY count(*) DESC LIMIT 1").fetchone()
        (text,) = c.execute("SELECT value FROM STRING_IDS WHERE id = ?", (nid,)).fetchone()
    finally:
        c.close()
    return nid, text


def _set_string(db: Path, nid: int, value: str) -> None:
    c = sqlite3.connect(db)
    try:
        c.execute("UPDATE STRING_IDS SET value = ? WHERE id = ?", (value, nid))
        c.commit()
    finally:
        c.close()


def test_a_string_past_max_string_bytes_is_cut_and_counted(tmp_path):
    """A kernel name of 5,000 bytes under a bound of 512 (a --rules override; the file's longest real value is 279
    bytes): the name is its first 512 bytes, one warning counts the one cut value, and the kernel's time is the
    same as with its real name."""
    rank, db = _rank0(tmp_path)
    nid, real = _top_name_id(db)
    before = profan.analyze(rank)
    _set_string(db, nid, "K" * 5000)
    rules = tmp_path / "limits.toml"
    rules.write_text("[limits]\nmax_string_bytes = 512\n")
    rep = profan.analyze(rank, rules=[rules])
    cut = [w for w in rep.warnings if "STRING_IDS" in w]
    assert len(cut) == 1 and "1 text value(s) longer than max_string_bytes (512 bytes)" in cut[0], rep.warnings
    assert "ascend_pytorch_profiler_0.db" in cut[0]
    top = rep.tables["top_kernels"]
    was = before.tables["top_kernels"].filter(pl.col("name") == real)["time_us"].sum()
    assert top.filter(pl.col("name") == "K" * 512)["time_us"].sum() == pytest.approx(was, rel=1e-12)
    assert not top.filter(pl.col("name").str.len_bytes() > 512).height
    assert rep.breakdown["time_us"].sum() == pytest.approx(before.breakdown["time_us"].sum(), rel=1e-12)


PEAK = """
import re, runpy, sys
sys.argv = ["profan", "analyze", sys.argv[1], "-q", "-f", "json"]
try:
    runpy.run_module("profan", run_name="__main__")
finally:  # VmHWM: this image's own peak (ru_maxrss keeps the forking test's across exec)
    status = open("/proc/self/status").read()
    print(re.search(r"VmHWM:\\s+(\\d+)", status).group(1), file=sys.stderr)
"""


def test_a_300_mb_string_costs_no_memory(tmp_path):
    """A 300 MB STRING_IDS value at the default bound (64 KiB): analysed in a few seconds with the peak memory of
    the unmodified file (within 60 MB), not the 16 GB and the minutes it took when the value was fetched whole."""
    rank, db = _rank0(tmp_path)
    nid, _ = _top_name_id(db)

    def peak(target: Path) -> tuple[int, float, subprocess.CompletedProcess]:
        """(peak RSS in kB, seconds, the run) of ``profan analyze TARGET -f json`` in a process of its own, which
        prints its own peak on the way out (one rank: no worker processes)."""
        t = time.monotonic()
        res = subprocess.run([sys.executable, "-c", PEAK, str(target)], cwd=ROOT, capture_output=True, text=True)
        return int(res.stderr.strip().splitlines()[-1]), time.monotonic() - t, res

    base_rss, _, base = peak(rank)
    _set_string(db, nid, "A" * 300_000_000)
    rss, seconds, res = peak(rank)
    assert base.returncode == 0 and res.returncode == 0, res.stderr
    assert "STRING_IDS: 1 text value(s) longer than max_string_bytes (65,536 bytes)" in res.stdout
    assert seconds < 30
    assert rss < max(base_rss, 250_000) + 60_000, (rss, base_rss)


def test_a_wal_beside_the_db_is_applied(tmp_path):
    """Committed deletes kept in a real ``-wal`` (the writer still open, no checkpoint): the report's kernel count
    and time are the database's true content as SQLite reads it, a warning says the WAL was applied, and nothing
    beside the user's files is written or changed."""
    rank, db = _rank0(tmp_path)
    writer = sqlite3.connect(db)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute(
            "DELETE FROM TASK WHERE rowid IN (SELECT t.rowid FROM TASK t "
            "JOIN COMPUTE_TASK_INFO c USING (globalTaskId) ORDER BY t.rowid LIMIT 100)"
        )
        writer.commit()
        folder = db.parent
        before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}
        assert (folder / f"{db.name}-wal").stat().st_size > 0
        count, ns = writer.execute(STEP_KERNELS).fetchone()
        immutable = sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True)
        stale, _ = immutable.execute(STEP_KERNELS).fetchone()
        immutable.close()
        assert stale == count + 100  # the file alone still holds the deleted rows
        rep = profan.analyze(rank)
        after = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}
    finally:
        writer.close()
    assert rep.breakdown["kernels"].sum() == count
    assert rep.breakdown["time_us"].sum() == pytest.approx(ns / 1000, rel=1e-9)
    assert any(f"{db.name}-wal beside it applied" in w for w in rep.warnings), rep.warnings
    assert after == before


def test_a_hot_journal_beside_the_db_is_rolled_back(tmp_path):
    """A copy taken mid-transaction (the deletes of every TASK and COMPUTE_TASK_INFO row spilled into the file,
    their pages' old content in a hot ``-journal``): the file alone holds no kernel, SQLite rolls the journal back
    and holds them all; the report counts what SQLite holds, and says the journal was applied."""
    writer_dir = tmp_path / "writer"
    shutil.copytree(DB_SET / "rank0_ascend_pt", writer_dir)
    db = writer_dir / OUT / "ascend_pytorch_profiler_0.db"
    rank = tmp_path / "data" / "rank0_ascend_pt"
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=DELETE")
        writer.execute("PRAGMA cache_size=1")  # the changed pages go to the file before any commit
        (count, ns) = writer.execute(STEP_KERNELS).fetchone()
        writer.execute("BEGIN")
        writer.execute("DELETE FROM TASK WHERE rowid > 0")
        writer.execute("DELETE FROM COMPUTE_TASK_INFO WHERE rowid > 0")
        assert Path(f"{db}-journal").stat().st_size > 0
        shutil.copytree(writer_dir, rank)
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    copied = rank / OUT / db.name
    immutable = sqlite3.connect(f"{copied.as_uri()}?mode=ro&immutable=1", uri=True)
    (stale, _) = immutable.execute(STEP_KERNELS).fetchone()
    immutable.close()
    assert stale < count  # the file alone lost the compute tasks
    rep = profan.analyze(rank)
    assert rep.breakdown["kernels"].sum() == count
    assert rep.breakdown["time_us"].sum() == pytest.approx(ns / 1000, rel=1e-9)
    assert any(f"{db.name}-journal beside it applied" in w for w in rep.warnings), rep.warnings
    assert sorted(p.name for p in copied.parent.iterdir()) == sorted(["analysis.db", db.name, f"{db.name}-journal"])


def test_an_analysis_db_text_past_max_string_bytes_is_said_and_communication_op_used(tmp_path):
    """analysis.db's tables are read whole by polars: one op name of 5,000 bytes under a bound of 512 leaves
    analysis.db unread, said with the count, and the communication comes from COMMUNICATION_OP."""
    rank, _ = _rank0(tmp_path)
    adb = rank / OUT / "analysis.db"
    c = sqlite3.connect(adb)
    try:
        c.execute(
            "UPDATE CommAnalyzerTime SET hccl_op_name = ? WHERE rowid = (SELECT min(rowid) FROM CommAnalyzerTime)",
            ("H" * 5000,),
        )
        c.commit()
    finally:
        c.close()
    rules = tmp_path / "limits.toml"
    rules.write_text("[limits]\nmax_string_bytes = 512\n")
    rep = profan.analyze(rank, rules=[rules])
    said = [w for w in rep.warnings if "analysis.db not read" in w]
    assert len(said) == 1 and "CommAnalyzerTime has 1 row(s) with a text value longer than max_string_bytes" in said[0]
    assert "communication from COMMUNICATION_OP" in said[0]
    assert not any("H" * 600 in str(v) for v in rep.tables["communication"].to_dicts())
