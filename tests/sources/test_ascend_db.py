"""torch_npu's DB export (ascend_pytorch_profiler_{rank}.db + analysis.db) read like its text export.

Ground truth is SQL written here against the raw DB (sqlite3, never profan's reader), and the text export of the
same job (a separate capture: numbers close, not equal). Variants of the real DB — tables dropped, columns added,
rows changed — are made in tmp_path with sqlite3.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import ASCEND, assert_one_line_error, run_cli

import profan
from profan.sources.ascend_db import rows as ascend_db_rows
from profan.sources.common.readback import read_back

DB_SET = ASCEND / "msinsight-alexnet-2rank-2025-db" / "level1"
TEXT_SET = ASCEND / "msinsight-alexnet-2rank-2025" / "level1"
OUT = "ASCEND_PROFILER_OUTPUT"


def _db(root: Path, rank: int) -> Path:
    return root / f"rank{rank}_ascend_pt" / OUT / f"ascend_pytorch_profiler_{rank}.db"


def _sql(path: Path, sql: str, *params) -> list[tuple]:
    c = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return c.execute(sql, params).fetchall()
    finally:
        c.close()


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "db_set"
    shutil.copytree(DB_SET, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _edit(path: Path, *statements: str) -> None:
    c = sqlite3.connect(path)
    try:
        for s in statements:
            c.execute(s)
        c.commit()
    finally:
        c.close()


@pytest.fixture(scope="module")
def db_report():
    return profan.analyze(DB_SET)


@pytest.fixture(scope="module")
def text_report():
    return profan.analyze(TEXT_SET)


# ------------------------------------------------------------------------------------------- numbers vs raw SQL

STEP_SQL = "SELECT id, startNs, endNs FROM STEP_TIME"
KERNEL_NS = """
SELECT sum(e - s), count(*) FROM (
  SELECT t.startNs s, t.endNs e FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId
  UNION ALL SELECT startNs, endNs FROM COMMUNICATION_OP)
WHERE s BETWEEN ? AND ?"""


@pytest.mark.parametrize("rank", [0, 1])
def test_kernel_time_and_count_per_step_match_sql(db_report, rank):
    ((step, s0, s1),) = _sql(_db(DB_SET, rank), STEP_SQL)
    ((ns, n),) = _sql(_db(DB_SET, rank), KERNEL_NS, s0, s1)
    b = db_report.breakdown.filter((pl.col("rank") == rank) & (pl.col("step") == step))
    assert b["time_us"].sum() == pytest.approx(ns / 1000, rel=1e-9)
    assert b["kernels"].sum() == n
    assert b["share"].sum() == pytest.approx(1.0)


def test_top_kernels_match_sql_by_resolved_names(db_report):
    """Rank 0's top compute kernels (op, shapes, core) summed in SQL, names resolved through STRING_IDS; and the
    communication op type over COMMUNICATION_OP."""
    top = db_report.tables["top_kernels"].filter(pl.col("rank") == 0).sort("time_us", descending=True)
    compute = top.filter(pl.col("bucket") != "communication").head(5).to_dicts()
    assert compute
    for k in compute:
        ((ns, n),) = _sql(
            _db(DB_SET, 0),
            "SELECT sum(t.endNs - t.startNs), count(*) FROM TASK t JOIN COMPUTE_TASK_INFO c USING (globalTaskId) "
            "JOIN STRING_IDS o ON o.id = c.opType JOIN STRING_IDS sh ON sh.id = c.inputShapes "
            "JOIN STRING_IDS co ON co.id = c.taskType WHERE o.value = ? AND replace(sh.value, '\"', '') = ? "
            "AND co.value = ?",
            k["op"],
            k["input_shapes"],
            k["core"],
        )
        assert (k["time_us"], k["count"]) == (pytest.approx(ns / 1000, rel=1e-9), n), k
    (comm,) = top.filter(pl.col("bucket") == "communication").to_dicts()
    ((ns, n),) = _sql(
        _db(DB_SET, 0),
        "SELECT sum(x.endNs - x.startNs), count(*) FROM COMMUNICATION_OP x JOIN STRING_IDS s ON s.id = x.opType "
        "WHERE s.value = ?",
        comm["op"],
    )
    assert (comm["time_us"], comm["count"]) == (pytest.approx(ns / 1000, rel=1e-9), n)


@pytest.mark.parametrize("rank", [0, 1])
def test_step_split_matches_overlap_analysis_and_analysis_db(db_report, rank):
    """The step split computed from TASK / COMMUNICATION_OP intervals equals the profiler's own OVERLAP_ANALYSIS
    (type 0 computing, 1 communication, 2 not overlapped, 3 free) and analysis.db's StepTraceTime."""
    tables = {t for (t,) in _sql(_db(DB_SET, rank), "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert ("OVERLAP_ANALYSIS" in tables) == (rank == 0)  # the profiler wrote it for rank 0 only
    ((comp, not_ov, comm, free, stage, prep),) = _sql(
        _db(DB_SET, rank).with_name("analysis.db"),
        "SELECT computing, communication_not_overlapped, communication, free, stage, preparing FROM StepTraceTime",
    )
    s = db_report.tables["steps"].filter(pl.col("rank") == rank).row(0, named=True)
    lanes = {"computing_us": comp, "communication_us": comm, "comm_not_overlapped_us": not_ov, "free_us": free}
    if "OVERLAP_ANALYSIS" in tables:
        ov = dict(
            _sql(_db(DB_SET, rank), "SELECT type, sum(endNs - startNs) / 1000.0 FROM OVERLAP_ANALYSIS GROUP BY type")
        )
        assert [ov[t] for t in range(4)] == pytest.approx(list(lanes.values()), abs=1e-3)
    for lane, want in lanes.items():
        assert s[lane] == pytest.approx(want, abs=1e-3), lane
    assert s["step_us"] == pytest.approx(stage, abs=1e-3)
    assert s["preparing_us"] == pytest.approx(prep, abs=1e-3)


@pytest.mark.parametrize("rank", [0, 1])
def test_communication_ops_match_analysis_db(db_report, rank):
    rows = _sql(
        _db(DB_SET, rank).with_name("analysis.db"),
        "SELECT hccl_op_name, elapse_time, wait_time, transit_time FROM CommAnalyzerTime ORDER BY start_timestamp",
    )
    c = db_report.tables["communication"].filter(pl.col("rank") == rank)
    name = next(k for k in ("op_name", "op") if k in c.columns)
    got = {r[name].split("@")[0]: r for r in c.to_dicts()}
    assert set(got) == {r[0] for r in rows}
    for op, elapse, wait, transit in rows:
        assert got[op]["elapse_ms"] == pytest.approx(elapse)
        assert got[op]["wait_ms"] == pytest.approx(wait)
        assert got[op]["transit_ms"] == pytest.approx(transit)


# --------------------------------------------------------------------------------- the same job, text vs DB


def test_db_report_reads_like_the_text_capture(db_report, text_report):
    """Bucket shares within 3 points, the same step-split shape, the same kinds of findings (the text capture also
    has trace_view.json, whose checks the DB export does not feed), the same bound per bucket."""
    key = ["rank", "step", "bucket"]
    both = db_report.breakdown.select(*key, pl.col("share").alias("db")).join(
        text_report.breakdown.select(*key, pl.col("share").alias("text")), on=key, how="full", coalesce=True
    )
    assert both["db"].null_count() == 0 and both["text"].null_count() == 0
    assert (both["db"] - both["text"]).abs().max() < 0.03
    lanes = ["computing_us", "comm_not_overlapped_us", "free_us"]
    for r in (0, 1):
        d = db_report.tables["steps"].filter(pl.col("rank") == r).row(0, named=True)
        t = text_report.tables["steps"].filter(pl.col("rank") == r).row(0, named=True)
        for lane in lanes:
            assert d[lane] / d["step_us"] == pytest.approx(t[lane] / t["step_us"], abs=0.03), lane
    # the bundled text capture of level1 holds no memory files (level0 does); the DB holds its memory tables
    db_checks = {f.check for f in db_report.findings} - {"memory-peak"}
    text_checks = {f.check for f in text_report.findings}
    assert db_checks <= text_checks, db_checks - text_checks
    assert text_checks - db_checks <= {"comm-waited-peer", "trace-vs-step-trace"}, text_checks - db_checks


def _dominant_pipes(root: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(rank, op) -> each pipe's duration-weighted ratio over the kernel groups of ops of 100 µs or more: what
    boundness reads."""
    from profan.ranks.rankmap import load_ranks
    from profan.rulepack.pack import load
    from profan.sources.ascend_text.kernels import PIPES
    from profan.sources.discovery.discover import discover

    pack = load([])
    out = {}
    for r in load_ranks(discover(root).ranks, root, pack):
        assert r.has_pipe_ratios, r.rank
        pipes = [p for p in PIPES if f"{p}_wsum" in r.groups.columns]
        g = (
            r.groups.filter(pl.col("bucket") != "communication")
            .group_by("op")
            .agg(
                pl.col("time_us").sum(),
                *[(pl.col(f"{p}_wsum").sum() / pl.col(f"{p}_wden").sum()).alias(p) for p in pipes],
            )
        )
        for row in g.filter(pl.col("time_us") >= 100).to_dicts():
            out[(r.rank, row["op"])] = {p: row[p] for p in pipes if row[p] is not None}
    return out


def test_pipe_ratios_from_task_pmu_info_bound_kernels_as_the_text_does():
    """TASK_PMU_INFO gives the pipe ratios: the dominant pipe of every op of 100 µs or more is the text's."""
    db, text = _dominant_pipes(DB_SET), _dominant_pipes(TEXT_SET)
    assert len(db) >= 6 and db.keys() == text.keys()
    clear = 0
    for key, ratios in text.items():
        top, second = sorted(ratios.values(), reverse=True)[:2]
        if top - second >= 0.05:  # a clear leader in the text capture (the two captures are separate runs)
            assert max(db[key], key=db[key].get) == max(ratios, key=ratios.get), key
            clear += 1
    assert clear >= len(text) - 4


# ------------------------------------------------------------------------------------------------- evidence


def test_every_cited_db_row_reads_back_as_that_row(db_report):
    """Each /TABLE/ROWID pointer names a row that SQL finds, with the same start; kernel rows of a step lie in the
    step's span."""
    checked = 0
    claims = [*db_report.findings, *(m for f in db_report.findings for m in f.members)]
    for f in claims:
        for ev in f.evidence:
            if not ev.file.endswith(".db"):
                continue
            assert ev.pointers and not ev.lines
            path = DB_SET / ev.file
            for loc, text in read_back(DB_SET, ev):
                row = json.loads(text)
                table, rowid = ascend_db_rows.parse(path, loc)
                assert (row["table"], row["rowid"]) == (table, rowid)
                cols = [k for k in row if k not in ("table", "rowid") and "." not in k and k in ("startNs", "id")]
                for col in cols:
                    (raw,) = _sql(path, f'SELECT "{col}" FROM "{table}" WHERE rowid = ?', rowid)[0]
                    assert row[col] == raw
                if table == "TASK" and ev.select.get("step") is not None:
                    ((_, s0, s1),) = _sql(path, STEP_SQL)
                    assert s0 <= row["startNs"] <= s1
                checked += 1
    assert checked > 10


def test_evidence_command_prints_db_rows_with_names(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(DB_SET), "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    kernel = next(
        (f, ev)
        for f in doc["findings"]
        for ev in f["evidence"]
        if ev.get("select", {}).get("source") == "kernel_details"
    )
    res = run_cli("evidence", str(out), kernel[0]["id"], "--format", "json")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)["evidence"]
    rows = [json.loads(r["text"]) for i in items for r in i["rows"] if i["file"].endswith(".db")]
    task_rows = [r for r in rows if r["table"] == "TASK"]
    assert task_rows
    for r in task_rows:  # names resolved through STRING_IDS, not ids
        name = r.get("COMPUTE_TASK_INFO.name", r.get("COMMUNICATION_OP.opName"))
        assert isinstance(name, str)
        path = DB_SET / next(i["file"] for i in items if i["file"].endswith(".db"))
        rank = int(path.name.split("_")[-1].split(".")[0])
        expect = _sql(
            _db(DB_SET, rank),
            "SELECT coalesce((SELECT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.name "
            "WHERE c.globalTaskId = t.globalTaskId), (SELECT s.value FROM COMMUNICATION_TASK_INFO i "
            "JOIN COMMUNICATION_OP o ON o.opId = i.opId JOIN STRING_IDS s ON s.id = o.opName "
            "WHERE i.globalTaskId = t.globalTaskId LIMIT 1)) FROM TASK t WHERE t.rowid = ?",
            r["rowid"],
        )[0][0]
        assert name == expect


def test_a_changed_db_is_refused(tmp_path):
    root = _copy(tmp_path)
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(root), "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    fid = next(f["id"] for f in doc["findings"] if any(e["file"].endswith("_0.db") for e in f["evidence"]))
    assert run_cli("evidence", str(out), fid).returncode == 0
    # rows deleted in place: same size, the cited row is gone
    ev = next(e for f in doc["findings"] if f["id"] == fid for e in f["evidence"] if e["file"].endswith("_0.db"))
    table, rowid = ev["pointers"][0].split("/")[1:]
    _edit(root / ev["file"], f'DELETE FROM "{table}" WHERE rowid = {int(rowid)}')
    assert (root / ev["file"]).stat().st_size == doc["source"]["file_bytes"][ev["file"]]
    assert_one_line_error(run_cli("evidence", str(out), fid), ev["file"].split("/")[-1], "has no row", table)
    # rows added: the file grew, refused as any changed file is
    _edit(root / ev["file"], "CREATE TABLE pad AS SELECT * FROM TASK", "INSERT INTO pad SELECT * FROM pad")
    assert_one_line_error(run_cli("evidence", str(out), fid), "changed since the report")


def test_report_pointer_into_the_db_is_checked(tmp_path):
    """A report is untrusted: a table the DB lacks, or text that is no /TABLE/ROWID, is one line, never SQL."""
    from profan.model.errors import ProfanInputError

    path = _db(DB_SET, 0)
    for bad in ('/TASK"; DROP TABLE TASK; --/1', "/sqlite_master/1", "/TASK/x", "TASK/1", "/TASK/1/2"):
        with pytest.raises(ProfanInputError):
            ascend_db_rows.read_rows(path, [bad])


# ----------------------------------------------------------------------------- variants of the real DB


def test_without_pmu_and_overlap_tables_and_with_extra_columns(tmp_path, db_report):
    """A level0-like DB (no TASK_PMU_INFO, no OVERLAP_ANALYSIS) of a newer version (extra columns): same step
    split and kernel time, no pipe ratios."""
    root = _copy(tmp_path)
    for r in (0, 1):
        _edit(
            _db(root, r),
            "DROP TABLE TASK_PMU_INFO",
            "DROP TABLE IF EXISTS OVERLAP_ANALYSIS",
            "ALTER TABLE TASK ADD COLUMN futureNs INTEGER",
            "ALTER TABLE COMPUTE_TASK_INFO ADD COLUMN futureName INTEGER",
            "UPDATE META_DATA SET value = '9.1.0' WHERE name = 'SCHEMA_VERSION'",
        )
    rep = profan.analyze(root)
    key = ["rank", "step", "bucket"]
    assert rep.breakdown.select(*key, "time_us").sort(key).equals(db_report.breakdown.select(*key, "time_us").sort(key))
    cols = ["rank", "computing_us", "comm_not_overlapped_us", "free_us"]
    assert rep.tables["steps"].select(cols).sort("rank").equals(db_report.tables["steps"].select(cols).sort("rank"))


def test_without_analysis_db_communication_comes_from_communication_op(tmp_path):
    root = _copy(tmp_path)
    for r in (0, 1):
        _db(root, r).with_name("analysis.db").unlink()
    rep = profan.analyze(root)
    c = rep.tables["communication"].filter(pl.col("rank") == 0)
    rows = _sql(_db(root, 0), "SELECT (endNs - startNs) / 1e6, waitNs / 1e6 FROM COMMUNICATION_OP ORDER BY startNs")
    assert sorted(c["elapse_ms"].to_list()) == pytest.approx(sorted(r[0] for r in rows))
    for f in rep.findings:
        for ev in f.evidence:
            for p in ev.pointers:
                if ev.file.endswith(".db") and "COMMUNICATION_OP" in p:
                    assert read_back(root, ev)


def test_missing_required_table_is_one_line(tmp_path):
    root = _copy(tmp_path)
    _edit(_db(root, 0), "DROP TABLE COMPUTE_TASK_INFO")
    assert_one_line_error(run_cli("analyze", str(root)), "ascend_pytorch_profiler_0.db", "COMPUTE_TASK_INFO")


def test_a_db_that_is_no_sqlite_file_is_one_line(tmp_path):
    root = _copy(tmp_path)
    _db(root, 1).write_bytes(b"not a database\n" * 10)
    assert_one_line_error(run_cli("analyze", str(root)), "ascend_pytorch_profiler_1.db", "SQLite")


def test_no_step_rows_is_said(tmp_path):
    root = _copy(tmp_path)
    for r in (0, 1):
        _edit(_db(root, r), "DELETE FROM STEP_TIME")
    rep = profan.analyze(root)
    assert any("STEP_TIME" in w for w in rep.warnings)
    assert rep.breakdown["step"].null_count() == rep.breakdown.height


def test_bad_task_rows_are_skipped_and_counted(tmp_path):
    root = _copy(tmp_path)
    _edit(
        _db(root, 0),
        "UPDATE TASK SET endNs = startNs - 5 WHERE rowid IN (SELECT t.rowid FROM TASK t "
        "JOIN COMPUTE_TASK_INFO c USING (globalTaskId) LIMIT 3)",
    )
    rep = profan.analyze(root)
    assert any("ascend_pytorch_profiler_0.db" in w and "skipped 3 of" in w for w in rep.warnings), rep.warnings


def test_names_from_the_db_are_escaped_in_html(tmp_path):
    root = _copy(tmp_path)
    payload = "<script>alert(1)</script>"
    for r in (0, 1):
        _edit(
            _db(root, r),
            "UPDATE STRING_IDS SET value = '" + payload + "' || value WHERE id IN (SELECT name FROM COMPUTE_TASK_INFO)",
        )
    out = tmp_path / "r.html"
    assert run_cli("analyze", str(root), "-o", str(out), "-q").returncode == 0
    html = out.read_text()
    assert payload not in html
    assert "alert(1)" in html  # the name is there, escaped


def test_memory_tables_match_sql_and_the_text_schema():
    """MEMORY_RECORD / OP_MEMORY / NPU_MODULE_MEM as `ascend_memory`'s frames: MB, KB, µs, names resolved."""
    from profan.sources.ascend_db.memory import memory_tables
    from profan.sources.ascend_text import memory as ascend_memory

    path = _db(DB_SET, 0)
    got = memory_tables(path)
    assert set(got) == {"records", "ops", "modules"}
    for kind, read in got.items():
        assert read.table.columns == ["src_line", *ascend_memory.COLUMNS[kind]]
    rec = got["records"].table
    raw = _sql(
        path,
        "SELECT m.rowid, s.value, m.timestamp / 1000.0, m.totalReserved / 1048576.0 FROM MEMORY_RECORD m "
        "JOIN STRING_IDS s ON s.id = m.component ORDER BY m.rowid",
    )
    assert rec.height == len(raw)
    assert rec.select("src_line", "component").rows() == [(r[0], r[1]) for r in raw]
    assert rec["ts_us"].to_list() == pytest.approx([r[2] for r in raw])
    assert rec["reserved_mb"].to_list() == pytest.approx([r[3] for r in raw])
    ops = got["ops"].table
    ((n_open,),) = _sql(path, "SELECT count(*) FROM OP_MEMORY WHERE releaseTime IS NULL OR releaseTime = 0")
    assert ops["release_us"].null_count() == n_open
    ((kb,),) = _sql(path, "SELECT sum(size) / 1024.0 FROM OP_MEMORY")
    assert ops["size_kb"].sum() == pytest.approx(kb)
    mods = got["modules"].table
    want = dict(
        _sql(
            path,
            "SELECT e.name, max(n.totalReserved) / 1048576.0 FROM NPU_MODULE_MEM n "
            "JOIN ENUM_MODULE e ON e.id = n.moduleId GROUP BY e.name",
        )
    )
    have = dict(mods.group_by("component").agg(pl.col("reserved_mb").max()).rows())
    assert have == pytest.approx(want)


def test_stdlib_cursor_and_adbc_read_the_same_rows(monkeypatch):
    """The kernel rows are the same whichever way they reach polars (ADBC when installed, else sqlite3)."""
    from profan.sources.ascend_db import sqlite as ascend_db_sqlite
    from profan.sources.ascend_db.kernels import compute_rows

    path = _db(DB_SET, 1)
    monkeypatch.setattr(ascend_db_sqlite, "NO_ADBC", True)
    stdlib = compute_rows(ascend_db_sqlite.open_db(path))
    ((n,),) = _sql(path, "SELECT count(*) FROM TASK t JOIN COMPUTE_TASK_INFO c USING (globalTaskId)")
    assert stdlib.height == n
    monkeypatch.setattr(ascend_db_sqlite, "NO_ADBC", False)
    if ascend_db_sqlite._adbc() is None:
        pytest.fail("adbc-driver-sqlite is not installed (pip install -e '.[test]' installs it)")
    fast = compute_rows(ascend_db_sqlite.open_db(path))
    assert fast.equals(stdlib)


def test_a_value_of_another_type_is_one_line(tmp_path):
    """SQLite keeps text in an INTEGER column: a start time that is text is the file's one-line error."""
    root = _copy(tmp_path)
    _edit(
        _db(root, 0),
        "UPDATE TASK SET startNs = 'soon' WHERE rowid = (SELECT t.rowid FROM TASK t "
        "JOIN COMPUTE_TASK_INFO c USING (globalTaskId) LIMIT 1)",
    )
    assert_one_line_error(run_cli("analyze", str(root)), "ascend_pytorch_profiler_0.db", "another type")


def test_an_unreadable_analysis_db_is_said_and_communication_op_used(tmp_path):
    root = _copy(tmp_path)
    _db(root, 0).with_name("analysis.db").write_bytes(b"garbage" * 100)
    rep = profan.analyze(root)
    assert any("analysis.db not read" in w and "COMMUNICATION_OP" in w for w in rep.warnings), rep.warnings
    ((n,),) = _sql(_db(root, 0), "SELECT count(*) FROM COMMUNICATION_OP")
    assert rep.tables["communication"].filter(pl.col("rank") == 0).height == n


def test_bandwidth_rows_without_a_transport_are_skipped_and_counted(tmp_path):
    """analysis.db bandwidth rows whose transport_type is empty name no link: skipped, counted in a warning, and
    the rows that name one are read as before (they used to end in an internal error)."""
    root = _copy(tmp_path)
    adb = _db(root, 0).with_name("analysis.db")
    _edit(adb, "UPDATE CommAnalyzerBandwidth SET transport_type = NULL WHERE rowid % 2 = 0")
    ((nulls,),) = _sql(adb, "SELECT count(*) FROM CommAnalyzerBandwidth WHERE transport_type IS NULL")
    typed = _sql(
        adb,
        "SELECT DISTINCT hccl_op_name, transport_type FROM CommAnalyzerBandwidth WHERE transport_type "
        "IS NOT NULL AND transit_size > 0 AND transit_time > 0",
    )
    rep = profan.analyze(root)
    assert nulls > 0 and any(
        f"{nulls} CommAnalyzerBandwidth row(s) without a transport_type skipped" in w for w in rep.warnings
    ), rep.warnings
    got = rep.tables["comm_bandwidth"].filter(pl.col("rank") == 0)
    assert got["transport"].null_count() == 0
    assert set(got.select("op_name", "transport").unique().rows()) == set(typed)


def test_db_report_and_evidence_match_the_published_schemas(tmp_path):
    import jsonschema
    from conftest import ROOT

    out = tmp_path / "r.json"
    assert run_cli("analyze", str(DB_SET), "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json.loads((ROOT / "profan/schema/report.schema.json").read_text()))
    res = run_cli("evidence", str(out), doc["findings"][0]["id"], "--format", "json")
    assert res.returncode == 0, res.stderr
    ev = json.loads(res.stdout)
    jsonschema.validate(ev, json.loads((ROOT / "profan/schema/evidence.schema.json").read_text()))
    assert any(p.startswith("/") for item in ev["evidence"] for p in item.get("pointers", []))


@pytest.mark.parametrize("rank", [0, 1])
def test_memory_peak_and_holders_from_the_db(db_report, rank):
    """The DB's MEMORY_RECORD / OP_MEMORY give the memory analysis what memory_record.csv / operator_memory.csv
    give: the peak is the largest PTA+GE totalAllocated (SQL here), cited as that row; the holders are the
    OP_MEMORY allocations live at that instant, summed per name."""
    db = _db(DB_SET, rank)
    ((peak_row, peak_bytes, peak_ns),) = _sql(
        db,
        "SELECT m.rowid, m.totalAllocated, m.timestamp FROM MEMORY_RECORD m JOIN STRING_IDS s ON s.id = m.component "
        "WHERE s.value = 'PTA+GE' ORDER BY m.totalAllocated DESC, m.rowid LIMIT 1",
    )
    peak = db_report.tables["memory_peaks"].filter(pl.col("rank") == rank).row(0, named=True)
    assert peak["peak_allocated_mb"] == pytest.approx(peak_bytes / 2**20, abs=1e-6)
    assert peak["loc"] == peak_row and peak["file"].endswith(f"ascend_pytorch_profiler_{rank}.db#MEMORY_RECORD")
    live = _sql(
        db,
        "SELECT s.value, SUM(o.size), COUNT(*) FROM OP_MEMORY o JOIN STRING_IDS s ON s.id = o.name "
        "WHERE o.allocationTime <= ? AND (o.releaseTime IS NULL OR o.releaseTime = 0 OR o.releaseTime > ?) "
        "GROUP BY s.value ORDER BY SUM(o.size) DESC",
        peak_ns,
        peak_ns,
    )
    holders = db_report.tables["memory_holders"].filter(pl.col("rank") == rank).sort("live_mb", descending=True)
    top_name, top_bytes, top_count = live[0]
    assert holders.row(0, named=True)["name"] == top_name
    assert holders["live_mb"][0] == pytest.approx(top_bytes / 2**20, abs=1e-3)
    assert holders["count"][0] == top_count
    assert peak["live_mb"] == pytest.approx(sum(b for _, b, _ in live) / 2**20, abs=1e-3)
    finding = next(f for f in db_report.findings if f.check == "memory-peak")
    cited = [m for m in (finding, *finding.members) if m.ranks == (rank,) or m.rank == rank]
    assert any(f"/MEMORY_RECORD/{peak_row}" in ev.pointers for m in cited for ev in m.evidence)


def test_a_memory_table_value_of_another_type_leaves_that_rank_without_memory(db_report, tmp_path):
    """Text where MEMORY_RECORD writes a number on rank 0: that rank's memory is not analysed, said in one warning
    naming the file; the analysis goes on, and rank 1's memory peak is the one the untouched DB gives."""
    root = _copy(tmp_path)
    _edit(_db(root, 0), "UPDATE MEMORY_RECORD SET totalAllocated = '' WHERE rowid % 5 = 0")
    rep = profan.analyze(root)
    (warning,) = [w for w in rep.warnings if "memory not analysed" in w]
    assert warning.startswith("rank 0:") and "ascend_pytorch_profiler_0.db" in warning
    assert "a memory table holds a value of another type than the export writes" in warning
    peaks = rep.tables["memory_peaks"]
    assert peaks["rank"].to_list() == [1]
    want = db_report.tables["memory_peaks"].filter(pl.col("rank") == 1)
    assert peaks.row(0, named=True)["peak_allocated_mb"] == want.row(0, named=True)["peak_allocated_mb"]


def test_steps_in_time_from_the_db_task_rows(db_report):
    """Without trace_view.json, the timeline's blocks come from the DB's task rows as they come from
    kernel_details.csv: per rank and step, compute, exposed communication and idle add up to the step split
    that `test_step_split_matches_overlap_analysis_and_analysis_db` holds against OVERLAP_ANALYSIS, and the blocks
    tile the window."""
    blocks = db_report.tables["step_blocks"]
    assert set(blocks["source"]) == {"ascend_db"}
    steps = db_report.tables["steps"]
    for (rank, step), b in blocks.group_by("rank", "step"):
        row = steps.filter((pl.col("rank") == rank) & (pl.col("step") == step)).row(0, named=True)
        assert b["compute_us"].sum() == pytest.approx(row["computing_us"], abs=2)
        assert b["comm_us"].sum() == pytest.approx(row["comm_not_overlapped_us"], abs=2)
        assert b["idle_us"].sum() == pytest.approx(row["free_us"], abs=2)
        b = b.sort("start_us")
        assert (b["start_us"].shift(-1).head(b.height - 1) == b["end_us"].head(b.height - 1)).all()


@pytest.mark.parametrize("rank", [0, 1])
def test_waited_peer_from_the_db_hccl_tasks(db_report, rank):
    """COMMUNICATION_TASK_INFO gives what trace_view.json's HCCL planes give: the peer this rank's Notify_Wait
    tasks wait for longest (SQL here, summed per group-local dstRank), and how long."""
    rows = _sql(
        _db(DB_SET, rank),
        "SELECT c.dstRank, SUM(t.endNs - t.startNs), COUNT(*) FROM COMMUNICATION_TASK_INFO c "
        "JOIN TASK t ON t.globalTaskId = c.globalTaskId JOIN STRING_IDS s ON s.id = c.taskType "
        "WHERE s.value = 'Notify_Wait' GROUP BY c.dstRank ORDER BY 2 DESC",
    )
    peer, wait_ns, waits = rows[0]
    found = next(f for f in db_report.findings if f.check == "comm-waited-peer")
    member = next(m for m in (found, *found.members) if m.rank == rank)
    assert member.metrics["peer"] == peer
    assert member.metrics["wait_us"] == pytest.approx(wait_ns / 1000, abs=1e-3)
    assert member.metrics["share"] == pytest.approx(wait_ns / sum(r[1] for r in rows), abs=1e-4)
    (ev,) = member.evidence
    assert ev.row_count == waits and ev.file.endswith(f"ascend_pytorch_profiler_{rank}.db")
    assert db_report.causes[0].check == "comm-waited-peer"


def test_a_bad_hccl_task_table_is_a_warning_and_the_rest_is_analysed(tmp_path):
    """Text where COMMUNICATION_TASK_INFO writes an integer: the waited-for peer is left out for that rank and the
    warning names the DB and the table; the rank's kernels, steps and communication are read as before."""
    root = _copy(tmp_path)
    _edit(_db(root, 0), "UPDATE COMMUNICATION_TASK_INFO SET dstRank = 'x' WHERE rowid = 3")
    report = profan.analyze(root)
    (warning,) = [w for w in report.warnings if "COMMUNICATION_TASK_INFO" in w]
    assert "ascend_pytorch_profiler_0.db" in warning and "not analysed" in warning
    waited = next(f for f in report.findings if f.check == "comm-waited-peer")
    assert {m.rank for m in (waited, *waited.members)} == {1}
    assert set(report.breakdown["rank"]) == {0, 1}


def test_exposed_communication_without_a_transfer_split_claims_no_transfer(tmp_path):
    """Without analysis.db the ops come from COMMUNICATION_OP, which records only their elapsed time: the exposed
    communication is said to be unsplit (not "mostly transfer"), and no cause offers to overlap a transfer of 0 ms."""
    root = _copy(tmp_path)
    for adb in root.rglob("analysis.db"):
        adb.unlink()
    report = profan.analyze(root)
    split = next(f for f in report.findings if f.check == "comm-exposed-split")
    unsplit = [f for f in split.members or (split,) if "unrecorded_ms" in f.metrics]
    assert unsplit  # a rank whose ops record no wait: all of its communication time is unsplit
    for f in unsplit:
        elapse = sum(r[0] for r in _sql(_db(root, f.rank), "SELECT endNs - startNs FROM COMMUNICATION_OP")) / 1e6
        assert f.metrics["unrecorded_ms"] == pytest.approx(elapse, abs=1e-3)
        assert f.metrics["split_recorded"] is False and "not split into transfer and waiting" in f.title
    assert "comm-exposed-split" not in {c.check for c in report.causes}
