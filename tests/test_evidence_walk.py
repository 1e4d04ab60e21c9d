"""Every cited row of every finding (and of every member of a group finding), read back from the raw file, is a row
of the claimed rank/step whose values produce what the finding says — on every Ascend sample. And `profan evidence`
prints exactly those lines, for findings and for the causes made from them."""

from __future__ import annotations

import json

import pytest
from conftest import ASCEND, fnum, raw_rows, run_cli

import profan
from profan.app.drill import select_kernel_rows
from profan.model.evidence import load_json_document, resolve_pointer

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


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_finding_is_backed_by_its_rows(folder):
    root = ASCEND / folder
    report = profan.analyze(root)
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
            if src == "kernel_details":
                _check_kernel_evidence(root, ev, f)
            elif src == "step_trace_time":
                _check_step_trace_evidence(root, ev, f)
            elif src == "trace_view":
                _check_overlap_evidence(root, ev, f)
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
