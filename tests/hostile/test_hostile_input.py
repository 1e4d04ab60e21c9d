"""Hostile and odd input, built by corrupting real samples: numbers that are no durations, JSON of the wrong
shape, files that are folders, encodings and line ends the readers cannot take, reports that cite files outside
their data, and kernel names that carry HTML. Each gives a counted skip, a warning or one clear line (exit 2) —
never a traceback, a silent drop or markup that runs."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest
from conftest import FIXTURES, QWEN3, analysed, assert_one_line_error, fnum, one_rank, raw_rows, run_cli

import profan

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
NCCL = FIXTURES / "torch" / "nccl_a100_1rank"


def _set_cells(path, column: str, every: int, value: str) -> list[int]:
    """Replace ``column`` in every ``every``-th data row by ``value``; return the changed physical lines."""
    header, *rows = path.read_text().splitlines(keepends=True)
    idx = header.rstrip("\r\n").split(",").index(column)
    changed = []
    for i in range(0, len(rows), every):
        cells = rows[i].split(",")  # the first 16 cells of the Qwen3 rows hold no quoted commas
        assert idx < 15
        cells[idx] = value
        rows[i] = ",".join(cells)
        changed.append(i + 2)
    path.write_text(header + "".join(rows))
    return changed


@pytest.mark.parametrize("value", ["nan", "inf", "-5000.0", "NaN"])
def test_durations_that_are_no_durations_are_skipped_and_counted(tmp_path, value):
    rank = one_rank(tmp_path)
    changed = _set_cells(rank / KD, "Duration(us)", 10, value)
    report = profan.analyze(tmp_path)
    _, rows = raw_rows(rank / KD)
    good = sum(fnum(r["Duration(us)"]) for line, r in rows.items() if line not in changed)
    assert report.breakdown["time_us"].sum() == pytest.approx(good, rel=1e-9)
    assert report.source["ranks"][0]["rows_skipped"]["kernel_details"] == len(changed) == 247
    assert any(f"skipped {len(changed)} of 2463 rows" in w for w in report.warnings)


def test_start_time_text_never_decides_whether_a_row_counts(tmp_path):
    """Text in a start cell reads as "no start" on both scans: adding a bad duration elsewhere (which sends the
    file down the text scan) must not make the start-text rows count as bad too."""
    rank = one_rank(tmp_path)
    _set_cells(rank / KD, "Start Time(us)", 10, "abc")
    total = profan.analyze(tmp_path).breakdown["time_us"].sum()
    _, rows = raw_rows(rank / KD)
    assert total == pytest.approx(sum(fnum(r["Duration(us)"]) for r in rows.values()), rel=1e-9)
    line = _set_cells(rank / KD, "Duration(us)", 5000, "NA")[0]  # one text duration: the text scan
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["kernel_details"] == 1
    _, rows = raw_rows(rank / KD)
    assert report.breakdown["time_us"].sum() == pytest.approx(
        sum(fnum(r["Duration(us)"]) for ln, r in rows.items() if ln != line), rel=1e-9
    )


@pytest.mark.parametrize(
    ("field", "value"), [("dur", None), ("dur", -5000), ("dur", "NaN"), ("ts", None), ("ts", "abc")]
)
def test_trace_events_without_a_usable_duration_are_counted(tmp_path, field, value):
    doc = json.loads(gzip.decompress((NCCL / "nccl_data.json.gz").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    bad = kernels[::50]
    removed_us = sum(e["dur"] for e in bad)
    for e in bad:
        if value is None:
            del e[field]
        else:
            e[field] = value
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["kineto_trace"] == len(bad)
    assert any(f"skipped {len(bad)} of" in w and "start or duration" in w for w in report.warnings)
    before = analysed(NCCL).breakdown["time_us"].sum()
    after = report.breakdown["time_us"].sum()
    # the rest is summed as before: nothing negative or NaN comes in (a NaN fails both comparisons)
    assert before - removed_us - 1e-6 <= after <= before
    assert all("nan" not in f.message.lower() for f in report.findings)


def test_side_files_of_the_wrong_json_shape_are_warnings(tmp_path):
    rank = one_rank(tmp_path)
    info = next(rank.glob("profiler_info_*.json"))
    doc = json.loads(info.read_text())
    doc["config"] = "not an object"
    info.write_text(json.dumps(doc))
    meta = rank / "profiler_metadata.json"
    doc = json.loads(meta.read_text())
    doc["parallel_group_info"] = ["pp", "dp"]
    meta.write_text(json.dumps(doc))
    res = run_cli("analyze", str(tmp_path), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode in (0, 1), res.stderr
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    assert any("profiler_metadata.json" in w and "parallel_group_info is a JSON list" in w for w in warnings)


def test_op_statistic_count_of_inf_is_a_counted_skip(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT/op_statistic.csv"
    header, first, *rest = path.read_text().splitlines(keepends=True)
    cells = first.split(",")
    cells[header.split(",").index("Count")] = "inf"
    path.write_text(header + ",".join(cells) + "".join(rest))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["op_statistic"] == 1


@pytest.mark.parametrize("name", ["ASCEND_PROFILER_OUTPUT/op_statistic.csv", "profiler_info_0.json"])
def test_a_folder_named_like_a_profiler_file_is_said_and_ignored(tmp_path, name):
    rank = one_rank(tmp_path)
    (rank / name).unlink()
    (rank / name).mkdir()
    report = profan.analyze(tmp_path)
    assert any(f"{name} is a folder, not a file; ignored" in w for w in report.warnings)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("op_statistic.csv", None, "op_statistic.csv: no data rows (header only)"),
        ("communication.json", "{}", "communication.json: holds no communication ops"),
    ],
)
def test_side_files_that_hold_nothing_are_said(tmp_path, name, content, said):
    path = one_rank(tmp_path) / "ASCEND_PROFILER_OUTPUT" / name
    path.write_text(content if content is not None else path.read_text().splitlines(keepends=True)[0])
    assert any(said in w for w in profan.analyze(tmp_path).warnings)


@pytest.mark.parametrize(
    ("encode", "problem"),
    [
        (lambda text: text.replace("\n", "\r").encode(), "cannot be read as CSV"),
        (lambda text: text.encode("utf-16"), "encoded as UTF-16"),
    ],
)
def test_line_ends_and_encodings_the_reader_cannot_take(tmp_path, encode, problem):
    rank = one_rank(tmp_path)
    (rank / KD).write_bytes(encode((rank / KD).read_text()))
    assert_one_line_error(run_cli("analyze", str(tmp_path), "-q"), "kernel_details.csv", problem)


@pytest.fixture()
def report_file(tmp_path):
    out = tmp_path / "report.json"
    assert run_cli("analyze", str(QWEN3), "-f", "json", "-o", str(out), "-q").returncode in (0, 1)
    return out


def test_a_report_may_only_cite_files_of_its_own_data(tmp_path, report_file):
    doc = json.loads(report_file.read_text())
    doc["findings"][0]["evidence"][0]["file"] = "../../../../../../../../etc/passwd"
    doc["findings"][0]["evidence"][0]["lines"] = [1]
    report_file.write_text(json.dumps(doc))
    res = run_cli("evidence", str(report_file), doc["findings"][0]["id"])
    assert_one_line_error(res, "outside the analysed folder")
    assert "root:" not in res.stdout


def test_a_cited_line_past_the_end_says_the_file_changed(tmp_path, report_file):
    doc = json.loads(report_file.read_text())
    ev = next(e for f in doc["findings"] for e in f["evidence"] if "lines" in e)
    fid = next(f["id"] for f in doc["findings"] if ev in f["evidence"])
    ev["lines"] = [10**9]
    report_file.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("evidence", str(report_file), fid), "has no line 1000000000", "changed")


def test_a_report_that_is_not_an_object(tmp_path):
    (tmp_path / "r.json").write_text("[]")
    assert_one_line_error(run_cli("evidence", str(tmp_path / "r.json"), "F1"), "not a profan JSON report")


def test_kernel_names_carrying_html_do_not_become_markup_in_markdown(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / KD
    text = path.read_text()
    evil = "<img src=x onerror=alert(1)>`<script>alert(2)</script>"
    path.write_text(text.replace(",FlashAttentionScore,", f",{evil}FlashAttentionScore,"))
    md = tmp_path / "r.md"
    assert run_cli("analyze", str(tmp_path), "-f", "md", "-o", str(md), "-q").returncode in (0, 1)
    out = md.read_text()
    assert "onerror" in out  # the name is reported …
    # … but outside code spans only as entities, and no code span is closed early by the backtick
    outside = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", out)
    assert "<img" not in outside and "<script" not in outside
    assert "&lt;img src=x onerror=alert(1)&gt;" in out


@pytest.mark.parametrize(
    ("rank", "taken", "warned"), [("three", 0, True), (1.5, 0, True), (-1, 0, True), ("2", 2, False), (3, 3, False)]
)
def test_unusable_distributed_rank_is_said(tmp_path, rank, taken, warned):
    doc = json.loads(gzip.decompress((NCCL / "nccl_data.json.gz").read_bytes()))
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank}
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rank"] == taken
    said = [w for w in report.warnings if "is not a rank number" in w]
    assert bool(said) == warned
    if warned:
        assert json.dumps(rank) in said[0] and "the rank was taken as 0" in said[0]


def test_ranks_of_two_kinds_in_one_folder_are_said(tmp_path):
    one_rank(tmp_path)
    doc = json.loads(gzip.decompress((NCCL / "nccl_data.json.gz").read_bytes()))
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": 1}
    (tmp_path / "rank_1.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert report.source["format"] == "ascend+kineto"
    assert any("ranks of 2 kinds (ascend, kineto)" in w for w in report.warnings)


def test_header_only_step_trace_is_said(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    report = profan.analyze(tmp_path)
    assert any("step_trace_time.csv: no data rows (header only)" in w for w in report.warnings)


def test_evidence_from_a_file_edited_since_the_report_is_refused(tmp_path):
    """One row deleted from kernel_details.csv: every later line now holds the next row. The report recorded the
    file's size, so the evidence of a kernel finding is refused instead of quoting the wrong rows."""
    data = tmp_path / "data"
    shutil.copytree(QWEN3, data)
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(data), "-f", "json", "-o", str(out), "-q").returncode in (0, 1)
    doc = json.loads(out.read_text())
    kd = "rank_0_ascend_pt/" + KD
    assert doc["source"]["file_bytes"][kd] == (data / kd).stat().st_size
    fid = next(f["id"] for f in doc["findings"] if any(e["file"] == kd for e in f["evidence"]))
    assert run_cli("evidence", str(out), fid).returncode == 0
    lines = (data / kd).read_text().splitlines(keepends=True)
    (data / kd).write_text("".join(lines[:100] + lines[101:]))
    assert_one_line_error(run_cli("evidence", str(out), fid), "kernel_details.csv", "changed since the report")


def test_the_html_and_excel_row_reader_reads_nothing_outside_the_data(tmp_path):
    from profan.render.evidence_rows import RowReader

    rows = RowReader(QWEN3)
    rows.load({"../../../../../../../../etc/passwd": ("lines", {1}), "rank_0_ascend_pt/" + KD: ("lines", {2})})
    assert "outside the analysed folder" in rows._errors["../../../../../../../../etc/passwd"]
    assert not any(f.startswith("..") for f, _ in rows._rows)
    assert ("rank_0_ascend_pt/" + KD, "line 2") in rows._rows


def test_trace_elements_without_a_phase_are_counted(tmp_path):
    doc = json.loads(gzip.decompress((NCCL / "nccl_data.json.gz").read_bytes()))
    stripped = 0
    for i, e in enumerate(doc["traceEvents"]):
        if i % 7 == 0 and "ph" in e:
            del e["ph"]
            stripped += 1
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert any(f"ignored {stripped} elements of the event array" in w for w in report.warnings)


def test_trace_view_elements_without_a_phase_are_said(tmp_path):
    src = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025" / "level2" / "rank0_ascend_pt"
    rank = shutil.copytree(src, tmp_path / "rank0_ascend_pt")
    tv = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(tv.read_text())
    stripped = 0
    for i, e in enumerate(events):
        if i % 11 == 0 and "ph" in e:
            del e["ph"]
            stripped += 1
    tv.write_text(json.dumps(events))
    report = profan.analyze(tmp_path)
    said = [w for w in report.warnings if "trace_view.json" in w and "elements of the event array" in w]
    assert len(said) == 1 and f"ignored {stripped} elements" in said[0]
    assert not any("elements of the event array" in w for w in profan.analyze(src.parent).warnings)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_null_elements_of_the_event_array_are_counted_not_a_crash(tmp_path, where):
    """A ``null`` element in a trace's event array (pyarrow's reader crashed the process on one at the start of
    the array): counted and said like any element that is no event. The events around it keep their indexes,
    so every other finding and locator is that of the clean trace."""
    src = FIXTURES / "torch" / "dlrm_v100_8rank" / "worker4_step_12.1694128201547.pt.trace.json"
    doc = json.loads(src.read_text())
    at = {"first": 0, "middle": len(doc["traceEvents"]) // 2, "last": len(doc["traceEvents"]) - 1}[where]
    doc["traceEvents"][at] = None
    f = tmp_path / src.name
    f.write_text(json.dumps(doc))
    res = run_cli("analyze", str(f), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr, (res.returncode, res.stderr)
    report = json.loads((tmp_path / "r.json").read_text())
    assert [w for w in report["warnings"] if "event array" in w] == [
        f'rank 4: {src.name}: ignored 1 elements of the event array that have no "ph" (phase) field, so are no '
        "chrome-trace events"
    ]
    clean = profan.analyze(src).to_dict()
    events = [(f["id"], [e.get("events") for e in f["evidence"]]) for f in report["findings"]]
    if where != "first":  # the middle and last elements are events no finding cites
        assert events == [(f["id"], [e.get("events") for e in f["evidence"]]) for f in clean["findings"]]


@pytest.mark.parametrize("where", ["communication_matrix.json", "trace_view.json"])
def test_json_nested_too_deeply_is_one_line(tmp_path, where):
    """3,000 nested arrays inside one value: the JSON readers recurse, and that used to end in an internal error."""
    src = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025" / "level2" / "rank0_ascend_pt"
    rank = shutil.copytree(src, tmp_path / "rank0_ascend_pt")
    f = rank / "ASCEND_PROFILER_OUTPUT" / where
    text = f.read_text()
    at = text.index('"Transport Type"' if where.startswith("communication") else '"args"')
    f.write_text(text[:at] + '"deep": ' + "[" * 3000 + "]" * 3000 + ", " + text[at:])
    assert_one_line_error(
        run_cli("analyze", str(rank), "-q", "-o", str(tmp_path / "r.md")), where, "nests JSON values more deeply"
    )


def test_a_lone_surrogate_escape_in_json_text_is_read(tmp_path):
    """JSON may escape half a UTF-16 pair ("\\ud800"); no UTF-8 column can hold it. The op key that carries one
    is read with "?" in its place, and the analysis goes on (it used to stop with an internal error)."""
    rank = one_rank(tmp_path)
    f = rank / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    text = f.read_text()
    key = re.search(r'"([a-zA-Z]+-total@\d+)"', text).group(1)
    f.write_text(text.replace(f'"{key}"', f'"{key}\\ud800"', 1))
    res = run_cli("analyze", str(rank), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    from profan.sources.ascend_text import matrix as ascend_matrix

    links, _ = ascend_matrix.read(f)
    assert (links["key"] == key + "?").sum() > 0


@pytest.mark.parametrize(("world_size", "said"), [([1, 2], None), ("8", 8), (8.5, None), (True, None), (-3, None)])
def test_a_world_size_that_is_no_count_is_ignored(tmp_path, world_size, said):
    """distributedInfo.world_size of another JSON type (a list used to end in an internal error): a whole
    positive number, or its text, is used; anything else is ignored."""
    src = FIXTURES / "torch" / "dlrm_v100_8rank" / "worker4_step_12.1694128201547.pt.trace.json"
    doc = json.loads(src.read_text())
    doc["distributedInfo"]["world_size"] = world_size
    f = tmp_path / src.name
    f.write_text(json.dumps(doc))
    res = run_cli("analyze", str(f), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["source"]["ranks"][0]["info"].get("world_size") == said
