"""The compact views: the brief stays under its byte cap yet names the top findings with the same locators as the
full report, leaves nothing out silently, and evidence_doc returns the source text verbatim."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import FIXTURES, QWEN3, run_cli

from profan.app.brief import MAX_BYTES, brief, dumps, evidence_doc, rules_doc
from profan.model.errors import ProfanInputError

SEV = ("critical", "warning", "info")
DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"  # 8 Kineto traces (V100), evidence as trace event indexes


def expected_order(findings: list[dict]) -> list[str]:
    """Most severe first; within a severity the n-th finding of a check after the (n-1)-th of every check."""
    nth: dict[str, int] = defaultdict(int)
    keyed = []
    for pos, f in enumerate(findings):
        keyed.append(((SEV.index(f["severity"]), nth[f["check"]], pos), f["id"]))
        nth[f["check"]] += 1
    return [fid for _, fid in sorted(keyed)]


def check_brief(doc: dict, full: dict, max_bytes: int) -> None:
    assert len(dumps(doc).encode()) <= max_bytes
    ids = [f["id"] for f in full["findings"]]
    shown = [f["id"] for f in doc["findings"]]
    omitted = [i for group in doc["omitted"].values() for i in group]
    assert sorted(shown + omitted, key=ids.index) == ids  # a partition of all findings
    assert not set(shown) & set(omitted)
    assert shown == [i for i in ids if i in set(shown)]  # shown in report order
    assert set(shown) == set(expected_order(full["findings"])[: len(shown)])  # the top ones
    by_id = {f["id"]: f for f in full["findings"]}
    for group_check, group in doc["omitted"].items():
        assert all(by_id[i]["check"] == group_check for i in group)
    for stub in doc["findings"]:
        f = by_id[stub["id"]]
        assert (stub["severity"], stub["check"], stub["rank"], stub["step"], stub["title"]) == (
            f["severity"],
            f["check"],
            f["rank"],
            f["step"],
            f["title"],
        )
        assert len(stub["evidence"]) == min(2, len(f["evidence"]))
        assert stub.get("evidence_items", len(f["evidence"])) == len(f["evidence"])
        for s_ev, f_ev in zip(stub["evidence"], f["evidence"], strict=False):
            kind = next(k for k in ("lines", "events", "pointers") if k in f_ev)
            assert s_ev == {"file": f_ev["file"], kind: f_ev[kind][:3], "row_count": f_ev["row_count"]}
    counts = {s: sum(f["severity"] == s for f in full["findings"]) for s in SEV}
    assert {s: doc["summary"][s] for s in SEV} == counts
    assert doc["summary"]["findings"] == len(ids)


@pytest.fixture(scope="module")
def qwen3_full(qwen3_report):
    return json.loads(json.dumps(qwen3_report.to_dict()))


def test_qwen3_brief_cli_under_8kb(qwen3_full):
    """The CLI's --brief output for the 4-rank Qwen3 sample: < 8 KB, all critical findings, one of every check that
    has a warning, each with the full report's first locators."""
    res = run_cli("analyze", str(QWEN3), "--format", "json", "--brief")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.encode()) < 8 * 1024
    doc = json.loads(res.stdout)
    check_brief(doc, qwen3_full, MAX_BYTES)
    shown = {f["id"] for f in doc["findings"]}
    crit = [f["id"] for f in qwen3_full["findings"] if f["severity"] == "critical"]
    assert crit and set(crit) <= shown
    warned = {f["check"] for f in qwen3_full["findings"] if f["severity"] == "warning"}
    assert warned <= {f["check"] for f in doc["findings"]}
    assert len(doc["findings"]) < len(qwen3_full["findings"])  # the cap did bite on this sample
    f1 = next(f for f in doc["findings"] if f["id"] == "F1")
    assert f1["evidence"][0]["file"] == "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    assert f1["evidence"][0]["lines"] == [2]


def test_dlrm_brief_cli_under_8kb():
    """The 8-rank DLRM Kineto sample: < 8 KB, all its critical findings named with their event locators."""
    res = run_cli("analyze", str(DLRM), "--format", "json", "--brief")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.encode()) < 8 * 1024
    doc = json.loads(res.stdout)
    full = json.loads(run_cli("analyze", str(DLRM), "--format", "json").stdout)
    check_brief(doc, full, MAX_BYTES)
    assert doc["source"]["ranks"] == list(range(8))
    crit = {f["id"] for f in full["findings"] if f["severity"] == "critical"}
    assert crit and crit <= {f["id"] for f in doc["findings"]}
    assert any("events" in f["evidence"][0] for f in doc["findings"])


def test_evidence_doc_events_are_the_raw_trace_events():
    import profan

    report = profan.analyze(DLRM)
    f = next(f for f in report.findings if f.evidence[0].events and len(f.evidence[0].events) > 1)
    doc = evidence_doc(report, DLRM, f.id)
    item = doc["evidence"][0]
    events = json.loads((DLRM / item["file"]).read_text(encoding="utf-8"))["traceEvents"]
    assert item["events"] == list(f.evidence[0].events)
    assert [r["locator"] for r in item["rows"]] == [f"event {i}" for i in item["events"]]
    assert [json.loads(r["text"]) for r in item["rows"]] == [events[i] for i in item["events"]]


@pytest.mark.parametrize("max_bytes", [6000, 4000, 3000])
def test_tighter_caps(qwen3_report, qwen3_full, max_bytes):
    doc = brief(qwen3_report, max_bytes=max_bytes)
    check_brief(doc, qwen3_full, max_bytes)
    assert doc["findings"]
    bigger = brief(qwen3_report, max_bytes=max_bytes + 2000)
    assert len(bigger["findings"]) > len(doc["findings"])


def test_cap_below_the_skeleton_shows_no_findings_but_names_them(qwen3_report, qwen3_full):
    """Summary, warnings and the omitted list are always there; only findings are dropped for size."""
    doc = brief(qwen3_report, max_bytes=200)
    assert doc["findings"] == []
    assert sum(len(v) for v in doc["omitted"].values()) == len(qwen3_full["findings"])


def test_time_by_bucket_sums_the_breakdown(qwen3_report, qwen3_full):
    doc = brief(qwen3_report)
    totals: dict[str, float] = defaultdict(float)
    for row in qwen3_full["breakdown"]:
        totals[row["bucket"]] += row["time_us"]
    grand = sum(totals.values())
    got = doc["summary"]["time_by_bucket"]
    assert [b["bucket"] for b in got] == sorted(totals, key=totals.get, reverse=True)
    for b in got:
        assert b["time_ms"] == pytest.approx(totals[b["bucket"]] / 1000, abs=1e-3)
        assert b["share"] == pytest.approx(totals[b["bucket"]] / grand, abs=1e-4)


def test_evidence_doc_lines_are_the_raw_csv_lines(qwen3_report):
    f = next(f for f in qwen3_report.findings if f.check == "kernel-boundness")
    doc = evidence_doc(qwen3_report, QWEN3, f.id)
    (item,) = doc["evidence"]
    raw = (QWEN3 / item["file"]).read_bytes().decode("utf-8").splitlines()
    assert item["header"] == raw[0].lstrip("\ufeff")
    assert item["lines"] == list(f.evidence[0].lines) and item["cited"] == len(f.evidence[0].lines)
    assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in item["lines"]]
    assert all(f.evidence[0].select["op"] in r["text"] for r in item["rows"])
    assert len(evidence_doc(qwen3_report, QWEN3, f.id, limit=1)["evidence"][0]["rows"]) == 1


def test_evidence_doc_pointers_resolve_in_the_raw_json(qwen3_report):
    f = next(f for f in qwen3_report.findings if f.evidence[0].pointers)
    doc = evidence_doc(qwen3_report, QWEN3, f.id)
    item = doc["evidence"][0]
    assert "header" not in item
    src = json.loads((QWEN3 / item["file"]).read_text(encoding="utf-8"))
    for row in item["rows"]:
        node = src
        for part in row["locator"].lstrip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        assert json.loads(row["text"]) == node


def test_unknown_ids_are_input_errors(qwen3_report):
    with pytest.raises(ProfanInputError, match=r"no finding F999 \(report has F1, F2, .*…\)"):
        evidence_doc(qwen3_report, QWEN3, "F999", where=QWEN3)
    with pytest.raises(ProfanInputError, match="no rule or check 'X-1'"):
        rules_doc(None, "X-1")
