"""Drill-down always works on a one-file trace: `profan evidence TRACE F1` (and C1) on every bundled single-trace
capture prints the raw events the claim cites — each row, parsed, is the event at the cited index of the file's
traceEvents, read here from the file itself — and the command each report format writes for drilling down (the
Markdown's, the HTML's, the brief's `drill`; the JSON report is itself what `profan evidence` takes) works, run
from where the report was written, and prints the same rows."""

from __future__ import annotations

import gzip
import html
import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import ASCEND, ROOT, TORCH, analysed, run_cli

# every fixtures/torch folder that holds exactly one trace, and the Ascend trace_view.json read on its own
SINGLE = sorted(
    trace
    for folder in TORCH.iterdir()
    if folder.is_dir()
    and len(traces := [*folder.glob("*.json"), *folder.glob("*.json.gz")]) == 1
    and (trace := traces[0])
)
TRACE_VIEW = ASCEND / "mstt-advisor-ut/test/ut/advisor/timeline_advice/trace_view.json"
TRACES = [*SINGLE, TRACE_VIEW]


def _events(trace: Path) -> list:
    """The file's events as the profiler wrote them (a Kineto object's traceEvents, or a bare list)."""
    raw = trace.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _ids(trace: Path) -> list[str]:
    report = analysed(trace)
    return ["F1", *(["C1"] if report.causes else [])]


def _evidence(*args: str, cwd: Path = ROOT) -> dict:
    res = run_cli("evidence", *args, "-f", "json", cwd=cwd)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _assert_rows_are_the_events(doc: dict, events: list) -> int:
    """Each printed row is, parsed, the event at the index its locator names; the number of rows checked."""
    checked = 0
    for item in doc["evidence"]:
        assert item["rows"] or item["row_count"] == 0 or "events" not in item, item["file"]
        for row in item["rows"]:
            kind, _, index = row["locator"].partition(" ")
            assert kind == "event", row["locator"]
            assert json.loads(row["text"]) == events[int(index)]
            checked += 1
    return checked


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name)
def test_evidence_on_a_single_trace_reads_back_the_cited_events(trace):
    events = _events(trace)
    for claim in _ids(trace):
        doc = _evidence(str(trace), claim)
        assert doc["id"] == claim and doc["evidence"], claim
        assert _assert_rows_are_the_events(doc, events) > 0, f"{trace.name} {claim}: no row read back"


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name)
def test_the_json_report_of_a_single_trace_drills_to_the_same_rows(trace, tmp_path):
    """`profan analyze TRACE -o report.json`, then `profan evidence report.json C1`: the rows of the trace."""
    res = run_cli("analyze", str(trace), "-o", str(tmp_path / "report.json"))
    assert res.returncode == 0, res.stderr
    for claim in _ids(trace):
        assert _evidence(str(tmp_path / "report.json"), claim)["evidence"] == _evidence(str(trace), claim)["evidence"]


def _named_commands(fmt: str, written: Path, claim: str) -> list[str]:
    """The drill-down commands the report written as ``fmt`` tells its reader, for ``claim``: the brief's `drill`
    with its ID filled in; in the Markdown and the HTML every target a command there names (for `<ID>`, C1, F3 or
    a member), with ``claim``."""
    text = written.read_text(encoding="utf-8")
    if fmt == "brief":
        return [json.loads(text)["drill"].replace(" ID ", f" {claim} ")]
    if fmt == "html":
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    targets = set(re.findall(r"profan evidence (\S+) (?:<ID>|[CF]\d)", text))
    assert targets, f"the {fmt} report names no drill-down command"
    return [f"profan evidence {target} {claim}" for target in sorted(targets)]


@pytest.mark.parametrize("fmt", ["md", "html", "brief"])
@pytest.mark.parametrize(
    "data", [TORCH / "nccl_a100_1rank" / "nccl_data.json.gz", TORCH / "serving_llama_cpu_mixed" / "trace.json.gz"]
)
def test_the_command_each_report_names_works_from_where_it_was_written(fmt, data, tmp_path):
    """As the quick start does it: from one folder, `profan analyze DATA -o report.md` (the data named relative
    to that folder), then the exact command the report prints — the same rows as drilling into the data. The
    Markdown report is a target itself (it names its data, which lies in its folder)."""
    relative = Path("data") / data.name
    work = tmp_path
    (work / "data").mkdir()
    (work / relative).write_bytes(data.read_bytes())
    out = ["--brief", "-o", "report.json"] if fmt == "brief" else ["-o", f"report.{fmt}"]
    res = run_cli("analyze", str(relative), *out, cwd=work)
    assert res.returncode == 0, res.stderr
    if fmt == "brief":
        (work / "report.brief.json").write_text(res.stdout, encoding="utf-8")
    written = work / ("report.brief.json" if fmt == "brief" else f"report.{fmt}")
    for claim in _ids(data):
        for command in _named_commands(fmt, written, claim):
            args = [a for a in shlex.split(command)[2:] if a not in ("--format", "json")]
            assert _evidence(*args, cwd=work)["evidence"] == _evidence(str(data), claim)["evidence"], command
    if fmt == "md":
        assert _evidence("report.md", "F1", cwd=work)["evidence"] == _evidence(str(data), "F1")["evidence"]


@pytest.mark.parametrize(
    "data", [TORCH / "nccl_a100_1rank" / "nccl_data.json.gz", TORCH / "serving_llama_cpu_mixed" / "trace.json.gz"]
)
def test_the_workbook_of_a_single_trace_holds_the_drill_down_itself(data, tmp_path):
    """The xlsx names no command: its Evidence sheet is the drill-down. Each of its rows for F1 and C1 is, parsed,
    the trace's event at the row's locator — the same rows `profan evidence` prints, in the same order."""
    import openpyxl

    res = run_cli("analyze", str(data), "-o", str(tmp_path / "report.xlsx"))
    assert res.returncode == 0, res.stderr
    sheet = openpyxl.load_workbook(tmp_path / "report.xlsx", read_only=True)["Evidence"]
    rows = [(r[0], r[4], r[9]) for r in sheet.iter_rows(min_row=2, values_only=True)]
    events = _events(data)
    for claim in _ids(data):
        mine = [(locator, raw) for owner, locator, raw in rows if owner == claim and raw is not None]
        printed = [
            (row["locator"], row["text"]) for item in _evidence(str(data), claim)["evidence"] for row in item["rows"]
        ]
        assert mine and [locator for locator, _ in mine] == [locator for locator, _ in printed][: len(mine)]
        for locator, raw in mine:
            assert json.loads(raw) == events[int(locator.partition(" ")[2])]
