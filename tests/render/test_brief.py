"""The compact views: the brief stays under its byte cap yet leads with the report's causes (shrunk, never dropped to
nothing) and names the top findings no cause explains with the same locators as the full report, leaves nothing
out silently, and shows less step by step as the cap shrinks; evidence_doc returns the source text verbatim for a
cause, a finding or a group member, or only its message, metrics and locators; rules_doc fits a cap as an index."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest
import tomllib
from conftest import FIXTURES, QWEN3, ROOT, analysed, run_cli

from profan.model.errors import ProfanInputError
from profan.render.brief import MAX_BYTES, brief
from profan.render.byte_cap import dumps, json_bytes
from profan.render.evidence_doc import evidence_doc
from profan.render.rules_index import rules_doc

SEV = ("critical", "warning", "info")
LOCS = ("lines", "events", "pointers")
DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"  # 8 Kineto traces (V100), evidence as trace event indexes


def expected_order(findings: list[dict]) -> list[str]:
    """Most severe first; within a severity the n-th finding of a check after the (n-1)-th of every check."""
    nth: dict[str, int] = defaultdict(int)
    keyed = []
    for pos, f in enumerate(findings):
        keyed.append(((SEV.index(f["severity"]), nth[f["check"]], pos), f["id"]))
        nth[f["check"]] += 1
    return [fid for _, fid in sorted(keyed)]


def _stub_evidence(stub_ev: list[dict], full_ev: list[dict]) -> None:
    """A stub's evidence items are the first of the full report's, each with its first locators."""
    for s_ev, f_ev in zip(stub_ev, full_ev, strict=False):
        kind = next(k for k in ("lines", "events", "pointers") if k in f_ev)
        n = len(s_ev[kind])
        assert n >= 1 and s_ev == {"file": f_ev["file"], kind: f_ev[kind][:n], "row_count": f_ev["row_count"]}


def _clipped(short: str, full: str) -> bool:
    """``short`` is ``full``, or its start cut with an ellipsis to fit the brief."""
    return short == full or (short.endswith("…") and full.startswith(short[:-1]))


def check_causes(doc: dict, full: dict) -> None:
    """The causes lead, in the report's order, with the report's numbers; the ones left out are named."""
    got = [c["id"] for c in doc["causes"]]
    want = [c["id"] for c in full["causes"]]
    assert got == want[: len(got)] and (got or not want)  # a prefix, never none
    omitted = {i for group in doc["omitted"].values() for i in group if i.startswith("C")}
    assert omitted == set(want[len(got) :])
    assert doc["headline"] == full["headline"]
    by_id = {c["id"]: c for c in full["causes"]}
    for stub in doc["causes"]:
        c = by_id[stub["id"]]
        assert (stub["check"], stub["impact_us"], stub["impact_share"]) == (
            c["check"],
            c["impact_us"],
            c["impact_share"],
        )
        assert stub["explains"] == c["explains"] and stub["ranks"] == c["ranks"][:16]
        for key in ("title", "action", "verify"):
            assert _clipped(stub[key], c[key])
        assert len(stub["alternatives"]) <= len(c["alternatives"])
        assert all(_clipped(a, b) for a, b in zip(stub["alternatives"], c["alternatives"], strict=False))
        assert stub["evidence"]
        _stub_evidence(stub["evidence"], c["evidence"])


def check_brief(doc: dict, full: dict, max_bytes: int) -> None:
    assert len(dumps(doc).encode()) <= max_bytes
    check_causes(doc, full)
    ids = [f["id"] for f in full["findings"]]
    explained = [f["id"] for f in full["findings"] if f["explained_by"]]
    shown = [f["id"] for f in doc["findings"]]
    omitted = [i for group in doc["omitted"].values() for i in group if i.startswith("F")]
    # every finding is shown, or named by the cause that explains it, or omitted: exactly one of them
    assert sorted(shown + omitted + explained, key=ids.index) == ids
    assert set(explained) == {i for c in full["causes"] for i in c["explains"]}
    assert shown == [i for i in ids if i in set(shown)]  # shown in report order
    unexplained = [f for f in full["findings"] if not f["explained_by"]]
    assert set(shown) == set(expected_order(unexplained)[: len(shown)])  # the top ones
    by_id = {f["id"]: f for f in full["findings"]}
    for group_check, group in doc["omitted"].items():
        assert all(by_id[i]["check"] == group_check for i in group if i in by_id)
    for stub in doc["findings"]:
        f = by_id[stub["id"]]
        assert (stub["severity"], stub["check"], stub["rank"], stub["step"], stub["title"]) == (
            f["severity"],
            f["check"],
            f["rank"],
            f["step"],
            f["title"],
        )
        assert (stub["ranks"], stub["steps"], stub.get("members", 0)) == (f["ranks"], f["steps"], len(f["members"]))
        lean = len(stub["evidence"]) == 1 and len(next(v for k, v in stub["evidence"][0].items() if k in LOCS)) == 1
        assert len(stub["evidence"]) == min(2, len(f["evidence"])) or lean
        assert stub.get("evidence_items", len(f["evidence"])) == len(f["evidence"])
        _stub_evidence(stub["evidence"], f["evidence"])
    counts = {s: sum(f["severity"] == s for f in full["findings"]) for s in SEV}
    assert {s: doc["summary"][s] for s in SEV} == counts
    assert doc["summary"]["findings"] == len(ids) and doc["summary"]["causes"] == len(full["causes"])
    assert doc["summary"]["explained"] == len(explained)


@pytest.fixture(scope="module")
def qwen3_full(qwen3_report):
    return json.loads(json.dumps(qwen3_report.to_dict()))


def test_qwen3_brief_cli_under_8kb(qwen3_full):
    """The CLI's --brief output for the 4-rank Qwen3 sample: < 8 KB, led by every cause in full — the slow pipeline
    stage first, with its gain and action — and the findings the causes explain named under them, not repeated."""
    res = run_cli("analyze", str(QWEN3), "--format", "json", "--brief")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.encode()) < 8 * 1024
    doc = json.loads(res.stdout)
    assert list(doc)[:4] == ["schema", "report_schema", "headline", "causes"]  # the verdict leads
    check_brief(doc, qwen3_full, MAX_BYTES)
    assert [c["id"] for c in doc["causes"]] == [c["id"] for c in qwen3_full["causes"]]
    assert doc["causes"][1]["check"] == "comm-exposed-split"  # the stage first, then the exposed transfer
    c1, full_c1 = doc["causes"][0], qwen3_full["causes"][0]
    assert "stage 1 (ranks 2, 3)" in c1["title"] and c1["check"] == "pipeline-stage-imbalance"
    assert c1["impact_us"] == full_c1["impact_us"] > 0 and c1["action"] == full_c1["action"]
    assert c1["assumption"] == full_c1["assumption"] and c1["alternatives"] == full_c1["alternatives"]
    assert c1["evidence"][0] == {
        "file": "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv",
        "lines": [2],
        "row_count": 1,
    }
    shown = {f["id"] for f in doc["findings"]}
    crit = [f["id"] for f in qwen3_full["findings"] if f["severity"] == "critical"]
    assert crit and not set(crit) & shown  # explained by C2: named there, not repeated
    assert set(crit) <= set(c1["explains"])
    assert doc["drill"].endswith(" ID --format json")


def test_notes_go_before_any_cause_is_cut(qwen3_report, qwen3_full):
    """Under the 8 KB cap the notes (what was not assessed) are counted before any cause loses a character, so the
    verdict does not depend on how long the path to the data is: a root 150 characters deeper still gets every
    cause of the Qwen3 sample in full, with its notes counted."""
    from dataclasses import replace

    deep = "/" + "d" * 149 + str(qwen3_report.source["root_abs"])
    doc = brief(replace(qwen3_report, source={**qwen3_report.source, "root_abs": deep}))
    assert json_bytes(doc) <= MAX_BYTES and deep in doc["drill"]
    assert doc["notes"]["count"] == len(qwen3_full["notes"]) > len(doc["notes"]["first"])
    by_id = {c["id"]: c for c in qwen3_full["causes"]}
    for stub in doc["causes"]:  # the causes that cost something stay whole; an informational one may be cut
        full = by_id[stub["id"]]
        if full["severity"] == "info":
            continue
        assert [stub[k] for k in ("title", "action", "verify")] == [full[k] for k in ("title", "action", "verify")]
        assert stub["alternatives"] == full["alternatives"]
    assert len(doc["causes"]) == len(qwen3_full["causes"])


def test_dlrm_brief_cli_under_8kb():
    """The 8-rank DLRM Kineto sample: < 8 KB, led by the straggler (rank 7), its evidence as trace event indexes."""
    res = run_cli("analyze", str(DLRM), "--format", "json", "--brief")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.encode()) < 8 * 1024
    doc = json.loads(res.stdout)
    full = json.loads(run_cli("analyze", str(DLRM), "--format", "json").stdout)
    check_brief(doc, full, MAX_BYTES)
    assert doc["source"]["ranks"] == list(range(8))
    assert doc["causes"][0]["check"] == "idle-between-steps"  # the data loader at the step's start, then rank 7
    c1 = doc["causes"][1]
    assert c1["check"] == "straggler" and "Rank 7" in c1["title"] and 7 in c1["ranks"]
    assert "events" in c1["evidence"][0]
    crit = {f["id"] for f in full["findings"] if f["severity"] == "critical"}
    named = {i for c in doc["causes"] for i in c["explains"]} | {f["id"] for f in doc["findings"]}
    assert crit and crit <= named


def test_evidence_doc_events_are_the_raw_trace_events():
    report = analysed(DLRM)
    f = next(f for f in report.findings if f.evidence[0].events and len(f.evidence[0].events) > 1)
    doc = evidence_doc(report, DLRM, f.id)
    item = doc["evidence"][0]
    events = json.loads((DLRM / item["file"]).read_text(encoding="utf-8"))["traceEvents"]
    assert item["events"] == list(f.evidence[0].events)
    assert [r["locator"] for r in item["rows"]] == [f"event {i}" for i in item["events"]]
    assert [json.loads(r["text"]) for r in item["rows"]] == [events[i] for i in item["events"]]


@pytest.mark.parametrize("max_bytes", [6000, 4000, 3000])
def test_tighter_caps(qwen3_report, qwen3_full, max_bytes):
    """A tighter cap shortens the causes before it drops one; what fits is always the first cause or more."""
    doc = brief(qwen3_report, max_bytes=max_bytes)
    check_brief(doc, qwen3_full, max_bytes)
    assert doc["causes"][0]["id"] == "C1"
    bigger = brief(qwen3_report, max_bytes=max_bytes + 2000)
    assert len(dumps(bigger).encode()) > len(dumps(doc).encode())
    assert len(bigger["causes"]) >= len(doc["causes"])


def test_cap_below_the_smallest_brief_keeps_the_first_cause_and_says_so(qwen3_report, qwen3_full):
    """Summary, warnings and the omitted list are always there; the first cause stays (at its barest), every other
    cause and every finding no cause explains is named under `omitted`, and a note gives the size of this smallest
    form, which is what any cap below it gets."""
    doc = brief(qwen3_report, max_bytes=200)
    assert doc["findings"] == []
    (c1,) = doc["causes"]
    assert c1["id"] == "C1" and "assumption" not in c1 and c1["alternatives"] == [] and len(c1["evidence"]) == 1
    assert len(c1["action"]) == 100 and c1["action"].endswith("…")
    omitted = {i for group in doc["omitted"].values() for i in group}
    others = {c["id"] for c in qwen3_full["causes"][1:]}
    unexplained = {f["id"] for f in qwen3_full["findings"] if not f["explained_by"]}
    assert omitted == others | unexplained
    n = json_bytes(doc)
    assert doc["note"] == f"max_bytes 200 is below the smallest brief ({n} bytes); this is that form"
    assert brief(qwen3_report, max_bytes=n) == {k: v for k, v in doc.items() if k != "note"}
    assert {k: v for k, v in brief(qwen3_report, max_bytes=1).items() if k != "note"} == {
        k: v for k, v in doc.items() if k != "note"
    }


@pytest.mark.parametrize("sample", ["qwen3", "dlrm", "compare"])
def test_a_smaller_cap_shows_less_step_by_step(qwen3_report, sample):
    """From the full brief down to the smallest: every cap is kept (or the smallest form is returned with its note),
    a smaller cap never shows anything a larger one does not, and the first cause — for a comparison, which has
    none, the first finding — is always there."""
    from test_mcp import contained

    import profan

    report = {
        "qwen3": lambda: qwen3_report,
        "dlrm": lambda: analysed(DLRM),
        "compare": lambda: profan.compare(QWEN3, ranks=(0, 2)),
    }[sample]()
    full = brief(report, max_bytes=None)
    caps = range(json_bytes(full) + 200, 0, -100)
    docs = [brief(report, max_bytes=cap) for cap in caps]
    assert docs[0] == full
    for cap, doc in zip(caps, docs, strict=True):
        assert json_bytes(doc) <= cap or "note" in doc
        lead = doc["causes"] if report.causes else doc["findings"]
        assert lead and lead[0]["id"] == (report.causes or report.findings)[0].id
    for big, small in itertools.pairwise(docs):
        contained(small, big)
    forms = {json_bytes(d) for d in docs if "note" not in d}
    assert len(forms) >= 8


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
    with pytest.raises(ProfanInputError, match=r"no finding F999 \(report has F1, F2, .*; causes C1, C2"):
        evidence_doc(qwen3_report, QWEN3, "F999", where=QWEN3)
    with pytest.raises(ProfanInputError, match=r"no cause C99 \(report has F1, "):
        evidence_doc(qwen3_report, QWEN3, "C99", where=QWEN3)
    with pytest.raises(ProfanInputError, match="no rule or check 'X-1'"):
        rules_doc(None, "X-1")


def test_evidence_doc_of_a_cause_and_of_a_member(qwen3_report):
    """C1's rows (the slow stage) are those of the findings it is made from, read back verbatim; a member (F1.2)
    has its own rank's rows, not the group's."""
    c1 = qwen3_report.causes[0]
    doc = evidence_doc(qwen3_report, QWEN3, "C1")
    assert (doc["id"], doc["kind"], doc["check"]) == ("C1", "cause", "pipeline-stage-imbalance")
    assert doc["severity"] == c1.severity == "warning"  # its own: the slow stage costs ~10 % of the step
    assert doc["explains"] == list(c1.explains) and doc["impact_us"] == pytest.approx(c1.impact_us)
    assert doc["action"] == c1.action and doc["alternatives"] == list(c1.alternatives)
    assert [i["file"] for i in doc["evidence"]] == [e.file for e in c1.evidence]
    for item in doc["evidence"]:
        if "lines" in item:
            raw = (QWEN3 / item["file"]).read_bytes().decode("utf-8").splitlines()
            assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in item["lines"]]
    group = next(f for f in qwen3_report.findings if f.check == "comm-exposed-split")
    member = group.members[1]
    got = evidence_doc(qwen3_report, QWEN3, member.id)
    assert (got["id"], got["kind"], got["rank"]) == (member.id, "member", member.rank)
    assert member.rank != group.members[0].rank
    assert [i["file"] for i in got["evidence"]] == [e.file for e in member.evidence]
    assert got["evidence"][0]["file"].startswith(f"rank_{member.rank}_ascend_pt/")
    whole = evidence_doc(qwen3_report, QWEN3, group.id)
    assert whole["kind"] == "finding" and whole["members"] == [m.id for m in group.members]
    assert whole["explained_by"] == group.explained_by


def test_rules_doc_passes_the_cause_texts_through():
    """A check that can be a cause carries its action, how to verify and the competing explanations (templates,
    as written in rules/checks.toml); a check that cannot has none of those keys."""
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        checks = {c["id"]: c for c in tomllib.load(fh)["check"]}
    stage = rules_doc(None, "pipeline-stage-imbalance")["item"]
    cause = checks["pipeline-stage-imbalance"]["cause"]
    assert (stage["action"], stage["verify"], stage["alternatives"]) == (
        cause["action"],
        cause["verify"],
        cause["alternatives"],
    )
    plain = rules_doc(None, "step-breakdown")["item"]
    assert not {"action", "verify", "alternatives"} & set(plain)
    listed = {c["id"]: c for c in rules_doc(None)["checks"]}
    assert {i for i, c in listed.items() if "action" in c} == {i for i, c in checks.items() if "cause" in c}


def test_findings_only_evidence_reads_no_rows(qwen3_report, monkeypatch):
    """limit=0: the claim and its locators, as the full document has them, without a row or a header — and without
    reading the files for rows (a finding over a multi-GB trace costs nothing to look at)."""
    full = evidence_doc(qwen3_report, QWEN3, "C1")

    def no_reads(*_):
        raise AssertionError("limit=0 read rows")

    monkeypatch.setattr("profan.sources.common.readback.read_back", no_reads)
    monkeypatch.setattr("profan.render.evidence_doc.read_lines", no_reads)
    lean = evidence_doc(qwen3_report, QWEN3, "C1", limit=0)
    assert all(i["rows"] == [] and "header" not in i for i in lean["evidence"])
    strip = [{k: v for k, v in i.items() if k not in ("rows", "header")} for i in full["evidence"]]
    assert [{k: v for k, v in i.items() if k != "rows"} for i in lean["evidence"]] == strip
    assert {k: v for k, v in lean.items() if k != "evidence"} == {k: v for k, v in full.items() if k != "evidence"}


def test_rules_doc_under_a_cap_is_an_index():
    """The rule pack is 50 KB in full; under a cap it is first an index (id and name of every check and bucket
    rule, a bucket rule's bucket), then the bucket rules go from the end, then the checks, counted; one entry
    loses the ends of its texts, then its example."""
    from test_mcp import contained

    full = rules_doc(None)
    assert json_bytes(full) > 40_000
    index = rules_doc(None, max_bytes=12_500)  # the index grows by about 60 bytes a check
    assert json_bytes(index) <= 12_500 and "rules_total" not in index
    for key in ("rules", "checks"):
        assert [e["id"] for e in index[key]] == [e["id"] for e in full[key]]
    assert all(set(e) == {"kind", "id", "name", "bucket"} for e in index["rules"])
    assert all(set(e) == {"kind", "id", "name"} for e in index["checks"])
    small = rules_doc(None, max_bytes=4200)  # the index of every check (41) fits, some bucket rules do not
    assert json_bytes(small) <= 4200 and small["rules_total"] == len(full["rules"]) > len(small["rules"])
    assert len(small["checks"]) == len(full["checks"])  # the checks go last: findings name them
    contained(small, index)
    contained(index, full)
    one = rules_doc(None, "pipeline-stage-imbalance")
    cut = rules_doc(None, "pipeline-stage-imbalance", max_bytes=json_bytes(one) - 1)
    assert json_bytes(cut) < json_bytes(one) and cut["item"]["params"] == one["item"]["params"]
    contained(cut, one)
