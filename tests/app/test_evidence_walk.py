"""Every cited row of every finding (and of every member of a group finding), read back from the raw file, is a row
of the claimed rank/step whose values produce what the finding says — on every Ascend sample. And `profan evidence`
prints exactly those lines, for findings and for the causes made from them."""

from __future__ import annotations

import json

import pytest
from conftest import ASCEND, analysed, fnum, raw_rows, run_cli

from profan.ranks.kernel_rows import select_kernel_rows
from profan.sources.common.readback import load_json_document, resolve_pointer

FOLDERS = [
    "msinsight-qwen3-4rank-2025q4",
    "msinsight-alexnet-2rank-2025/level0",
    "msinsight-alexnet-2rank-2025/level1",
    "msinsight-alexnet-2rank-2025/level2",
    "msinsight-gpt3-2rank-2023",
    "mstt-advisor-ut/test/ut/advisor/compute_advice/data",
    "mstt-advisor-ut/test/ut/advisor/advisor_backend/compute_advice",
    "vllm-ascend-msprof-gmm-1op",
    "mstt-advisor-ut/test/ut/advisor/timeline_advice",
    "msinsight-alexnet-2rank-2025-db/level1",
]
DUR = ("Duration(us)", "Task Duration(us)")
STEP_TRACE_VALUES = {
    "Computing": "Computing",
    "Communication(Not Overlapped)": "Communication(Not Overlapped)",
    "Free": "Free",
}


def _dur(row: dict) -> float:
    return fnum(next(row[k] for k in DUR if k in row))


def _check_kernel_evidence(root, ev, finding):
    _, rows = raw_rows(root / ev.file)
    selected = select_kernel_rows(root, ev.file, ev.select)
    lines = set(selected["src_line"].to_list())
    assert len(lines) == ev.row_count, (finding.id, ev.select)
    for n in ev.lines:
        assert n in rows, f"{finding.id}: line {n} is not a data row of {ev.file}"
        assert n in lines, f"{finding.id}: line {n} is not selected by {ev.select}"
        if ev.select.get("step") is not None:
            assert int(rows[n]["Step Id"]) == ev.select["step"]
    # the cited rows are the largest of the set, and the set sums to the claimed time (from the raw cells)
    raw_durs = {n: _dur(rows[n]) for n in lines}
    if "time_us" in ev.values:
        assert sum(raw_durs.values()) == pytest.approx(ev.values["time_us"], rel=1e-6, abs=1e-3)
    cited = [raw_durs[n] for n in ev.lines]
    assert cited == sorted(cited, reverse=True)
    if len(lines) > len(ev.lines):
        assert min(cited) >= max(d for n, d in raw_durs.items() if n not in ev.lines) - 1e-9


def _check_step_trace_evidence(root, ev, finding):
    _, rows = raw_rows(root / ev.file)
    (n,) = ev.lines
    row = rows[n]
    assert int(row["Step"]) == ev.select["step"] == finding.step or finding.step is None
    for key, header in STEP_TRACE_VALUES.items():
        if key in ev.values:
            assert fnum(row[header]) == pytest.approx(ev.values[key])


def _check_pointer_evidence(root, ev, finding):
    doc = load_json_document(root / ev.file)
    for p in ev.pointers:
        node = resolve_pointer(doc, p)
        assert isinstance(node, dict)
        if ev.select.get("source") == "communication" and ev.select.get("step") is not None:
            assert p.startswith(f"/step{ev.select['step']}/")


def _check_overlap_evidence(root, ev, finding):
    """trace_view.json events: Overlap Analysis lane events (by process_name), the largest of the step's."""
    events = json.loads((root / ev.file).read_text(encoding="utf-8"))
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    cited = [events[i] for i in ev.events]
    lane = ev.select.get("process", "Overlap Analysis")  # HCCL plane tasks cite their own process
    assert all(e["ph"] == "X" and procs[e["pid"]] == lane for e in cited), finding.id
    assert [e["dur"] for e in cited] == sorted((e["dur"] for e in cited), reverse=True)


def _check_memory_evidence(root, ev, finding):
    """memory_record.csv / operator_memory.csv lines: data rows whose cells give the claimed totals; allocations
    cited as live at a moment were made by then and not released before it."""
    _, rows = raw_rows(root / ev.file)
    assert all(n in rows for n in ev.lines), finding.id
    for key, header in (("allocated_mb", "Total Allocated(MB)"), ("reserved_mb", "Total Reserved(MB)")):
        if key in ev.values:
            assert fnum(rows[ev.lines[0]][header]) == pytest.approx(ev.values[key]), (finding.id, key)
    if "live_at_us" in ev.select:
        t = ev.select["live_at_us"]
        for n in ev.lines:
            release = rows[n]["Release Time(us)"].strip()
            assert fnum(rows[n]["Allocation Time(us)"]) <= t and (not release or fnum(release) > t), (finding.id, n)


def _sql(path, sql, *params):
    import sqlite3

    c = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return c.execute(sql, params).fetchall()
    finally:
        c.close()


# a cited TASK row's duration: its own when it is a compute task, its op's when it is a communication op's first task
_TASK_NS = """SELECT t.rowid, coalesce(
  (SELECT t.endNs - t.startNs FROM COMPUTE_TASK_INFO c WHERE c.globalTaskId = t.globalTaskId),
  (SELECT o.endNs - o.startNs FROM COMMUNICATION_TASK_INFO i JOIN COMMUNICATION_OP o ON o.opId = i.opId
   WHERE i.globalTaskId = t.globalTaskId LIMIT 1)), (SELECT id FROM STEP_TIME s WHERE t.startNs BETWEEN s.startNs
   AND s.endNs) FROM TASK t"""


_NOTIFY_WAIT = """SELECT s.value, c.dstRank, t.endNs - t.startNs FROM COMMUNICATION_TASK_INFO c
  JOIN TASK t ON t.globalTaskId = c.globalTaskId JOIN STRING_IDS s ON s.id = c.taskType WHERE c.rowid = ?"""


def _check_db_evidence(root, ev, finding):
    """torch_npu DB export: /TABLE/ROWID pointers, checked with SQL of their own against the raw tables."""
    path = root / ev.file
    cited = [(p.split("/")[1], int(p.split("/")[2])) for p in ev.pointers]
    src = ev.select.get("source")
    if src == "kernel_details":
        assert {t for t, _ in cited} == {"TASK"}
        raw = {rid: (ns / 1000, step) for rid, ns, step in _sql(path, _TASK_NS) if ns is not None}
        selected = set(select_kernel_rows(root, ev.file, ev.select)["src_line"].to_list())
        assert len(selected) == ev.row_count, (finding.id, ev.select)
        for _, rid in cited:
            assert rid in selected and rid in raw, (finding.id, rid)
            if ev.select.get("step") is not None:
                assert raw[rid][1] == ev.select["step"]
        if "time_us" in ev.values:
            assert sum(raw[r][0] for r in selected) == pytest.approx(ev.values["time_us"], rel=1e-6, abs=1e-3)
        durs = [raw[r][0] for _, r in cited]
        assert durs == sorted(durs, reverse=True)
    elif src == "hccl_tasks":  # Notify_Wait tasks towards one peer, longest first
        assert {t for t, _ in cited} == {"COMMUNICATION_TASK_INFO"}
        durs = []
        for _, rid in cited:
            ((kind, dst, ns),) = _sql(path, _NOTIFY_WAIT, rid)
            assert (kind, dst) == ("Notify_Wait", ev.select["dst_rank"]), (finding.id, rid)
            durs.append(ns)
        assert durs == sorted(durs, reverse=True)
        if ev.row_count == len(cited):
            assert sum(durs) / 1000 == pytest.approx(ev.values["wait_us"], abs=1e-3)
    elif src == "step_trace_time":
        ((table, rid),) = cited
        assert table == "STEP_TIME"
        assert _sql(path, "SELECT id FROM STEP_TIME WHERE rowid = ?", rid)[0][0] == ev.select["step"]
    else:
        for table, rid in cited:
            rows = _sql(path, f'SELECT * FROM "{table}" WHERE rowid = ?', rid)
            assert len(rows) == 1, (finding.id, table, rid)
        if src == "communication" and ev.select.get("step") is not None:
            steps = {_sql(path, f'SELECT step FROM "{t}" WHERE rowid = ?', r)[0][0] for t, r in cited}
            assert steps == {f"step{ev.select['step']}"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_finding_is_backed_by_its_rows(folder):
    root = ASCEND / folder
    report = analysed(root)
    assert report.findings, "every real sample yields at least one finding"
    ranks = {r["rank"]: r["path"] for r in report.source["ranks"]}
    # a group finding cites its worst member's rows; every member keeps its own, checked here too
    claims = [*report.findings, *(m for f in report.findings for m in f.members)]
    assert {c.id for c in claims} >= {i for c in report.causes for i in c.explains}
    for f in claims:
        for ev in f.evidence:
            if f.rank is not None and ranks[f.rank] != ".":
                assert ev.file.startswith(ranks[f.rank] + "/"), (f.id, ev.file)
            src = ev.select.get("source")
            if ev.file.endswith(".db"):
                _check_db_evidence(root, ev, f)
            elif src == "kernel_details":
                _check_kernel_evidence(root, ev, f)
            elif src == "step_trace_time":
                _check_step_trace_evidence(root, ev, f)
            elif src == "trace_view":
                _check_overlap_evidence(root, ev, f)
            elif src in ("memory_record", "operator_memory"):
                _check_memory_evidence(root, ev, f)
            elif src == "op_statistic":
                _, rows = raw_rows(root / ev.file)
                assert all(n in rows for n in ev.lines)
            elif ev.pointers:
                _check_pointer_evidence(root, ev, f)
            else:
                pytest.fail(f"{folder} {f.id}: evidence of unknown source {ev.select}")


@pytest.mark.parametrize("folder", ["msinsight-gpt3-2rank-2023", "msinsight-alexnet-2rank-2025/level0"])
def test_evidence_command_prints_exactly_the_cited_lines(folder, tmp_path):
    root = ASCEND / folder
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(root), "-f", "json", "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    checked = 0
    members = [m for g in doc["findings"] for m in g["members"]]
    for f in [*doc["causes"], *doc["findings"], *members]:
        res = run_cli("evidence", str(out), f["id"], "--format", "json")
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)["evidence"]
        for ev, item in zip(f["evidence"], got, strict=True):
            if "lines" in ev:
                raw = (root / ev["file"]).read_bytes().decode().splitlines()
                assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in ev["lines"]]
                checked += len(ev["lines"])
    assert checked > 0
