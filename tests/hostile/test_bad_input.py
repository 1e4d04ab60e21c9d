"""Bad input: one clear line on stderr naming the file and the problem, exit 2, never a traceback; unreadable rows
are counted and reported, not dropped silently."""

from __future__ import annotations

import pytest
from conftest import QWEN3, TORCH, assert_one_line_error, one_rank, run_cli

import profan

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"


def test_missing_directory(tmp_path):
    assert_one_line_error(run_cli("analyze", str(tmp_path / "nope"), "-q"), "nope", "no such file or directory")


def test_directory_without_profiler_output(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert_one_line_error(run_cli("analyze", str(tmp_path), "-q"), "no profiler output found")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file (no header row)"),
        (None, "no data rows (header only)"),
        (b"Step Id,Name,Type\n13,Add,Add\n", "missing column(s) Start Time(us), Duration(us)"),
        (b"\x00\x01\x02garbage\xff\xfe\n\x00,\x00\n", "missing column(s)"),
    ],
)
def test_broken_kernel_details(tmp_path, content, problem):
    rank = one_rank(tmp_path)
    path = rank / KD
    if content is None:  # header only
        content = path.read_bytes().splitlines(keepends=True)[0]
    path.write_bytes(content)
    assert_one_line_error(run_cli("analyze", str(tmp_path), "-q"), "kernel_details.csv", problem)


def test_truncated_communication_json(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT/communication.json"
    path.write_bytes(path.read_bytes()[:5000])
    assert_one_line_error(run_cli("analyze", str(tmp_path), "-q"), "communication.json", "not valid JSON")


def test_step_trace_missing_columns(tmp_path):
    rank = one_rank(tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv").write_text("Step,Computing\n13,1.0\n")
    assert_one_line_error(
        run_cli("analyze", str(tmp_path), "-q"),
        "step_trace_time.csv",
        "missing column(s) Communication(Not Overlapped), Free",
    )


def test_unparseable_rows_are_counted_not_dropped(tmp_path):
    """A truncated last row and a row with text in Duration are skipped, counted, and reported."""
    rank = one_rank(tmp_path)
    path = rank / KD
    lines = path.read_bytes().splitlines(keepends=True)
    bad = lines[3].replace(b",16.620,", b",sixteen,")
    assert b"sixteen" in bad
    truncated = lines[-1][: lines[-1].index(b"\t,") + 2]  # cut right after the start time: no duration
    path.write_bytes(b"".join([*lines[:3], bad, *lines[4:-1], truncated]))
    report = profan.analyze(tmp_path)
    (r,) = report.source["ranks"]
    assert r["rows_skipped"] == {"kernel_details": 2}
    assert r["rows_read"]["kernel_details"] == len(lines) - 1
    assert any("skipped 2 of 2463 rows" in w for w in report.warnings)
    res = run_cli("analyze", str(tmp_path), "-q")
    assert res.returncode == 0 and "skipped 2 of 2463 rows" in res.stdout


def test_unknown_format_option():
    res = run_cli("analyze", str(QWEN3), "--format", "pdf", "-q")
    assert_one_line_error(res, "unknown format 'pdf'")


def test_unknown_finding_id(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(QWEN3), "-f", "json", "-o", str(out), "-q").returncode == 0
    assert_one_line_error(run_cli("evidence", str(out), "F999"), "no finding F999")


def test_invalid_user_rules(tmp_path):
    rules = tmp_path / "mine.toml"
    rules.write_text('[[rule]]\nid = "X1"\nbucket = "moe"\nmatch = { op = "(unclosed" }\n')
    assert_one_line_error(
        run_cli("analyze", str(QWEN3), "--rules", str(rules), "-q"), "mine.toml", "rule X1: invalid regular expression"
    )


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            'id = "unfused-elementwise"\nelementwise_kernel = "(unclosed"',
            "check unfused-elementwise: elementwise_kernel",
        ),
        ('id = "unfused-attention"\nscore_kernel = "(unclosed"', "check unfused-attention: score_kernel"),
        ('id = "memory-peak"\nphases = { optimizer = "(unclosed" }', "check memory-peak: phases.optimizer"),
    ],
)
def test_invalid_pattern_in_a_check_setting(tmp_path, setting, said):
    """A check's pattern settings are refused at load, naming the file and the setting (they used to surface as an
    internal error from deep inside the analysis that first used them)."""
    rules = tmp_path / "mine.toml"
    rules.write_text(f"[[check]]\n{setting}\n")
    res = run_cli("analyze", str(TORCH / "qwen1.5-0.5b_h100_1rank"), "--rules", str(rules), "-q")
    assert_one_line_error(res, "mine.toml", f"{said}: invalid regular expression '(unclosed'")


def test_bandwidth_info_of_another_json_type_is_no_crash(tmp_path):
    """An op of communication.json whose "Communication Bandwidth Info" is a list, not an object of transports:
    the op is still read (its time split), it has no bandwidth or packet rows, and every other op keeps its own."""
    import json

    from profan.sources.ascend_text import comm as ascend_comm
    from profan.sources.ascend_text import packets as ascend_packets

    rank = one_rank(tmp_path)
    f = rank / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    doc = json.loads(f.read_text())
    step_key = next(iter(doc))
    op = next(k for k in doc[step_key]["collective"] if k != "Total Op Info")
    doc[step_key]["collective"][op]["Communication Bandwidth Info"] = [1, 2]
    f.write_text(json.dumps(doc))
    items, bad = ascend_comm.entries(f)
    ops, bws, skipped = ascend_comm.tables(items, bad)
    packets, _ = ascend_packets.read(items)
    good_items, _ = ascend_comm.entries(QWEN3 / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json")
    good_ops, good_bws, _ = ascend_comm.tables(good_items)
    good_packets, _ = ascend_packets.read(good_items)
    assert skipped == 0 and ops.height == good_ops.height and op in ops["op"].to_list()
    assert bws.height == good_bws.height - good_bws.filter(good_bws["op"] == op).height > 0
    assert op not in packets["op"].to_list() and packets.height < good_packets.height
    res = run_cli("analyze", str(rank), "-o", str(tmp_path / "r.md"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


def test_packet_sizes_that_are_no_count_and_time_are_skipped_and_counted(tmp_path):
    """Size Distribution entries that are not [count, ms] pairs of numbers — an infinite or huge count, an
    object, text, a negative time, a size that is no number — are skipped, counted and said; the other entries of
    the file are read as before. (An infinite count used to stop the analysis with an internal error.)"""
    import json

    rank = one_rank(tmp_path)
    f = rank / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    doc = json.loads(f.read_text())
    dists = [
        b["Size Distribution"]
        for sec in doc.values()
        for items in sec.values()
        for op, body in items.items()
        if op != "Total Op Info"
        for b in body["Communication Bandwidth Info"].values()
        if b.get("Size Distribution")
    ]
    dist = dists[0]
    before = sum(len(d) for d in dists)
    odd = {"1": [1e300, 1], "2": {"0": 1}, "3": [10000000000000000000, 1], "4": ["5", 1], "5": [3, -1.0], "x": [1, 1.0]}
    dist.update(odd)
    f.write_text(json.dumps(doc).replace('"1": [1e+300, 1]', '"1": [1e400, 1]'))
    res = run_cli("analyze", str(rank), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [w for w in report["warnings"] if "packet-size" in w] == [
        "rank 0: ASCEND_PROFILER_OUTPUT/communication.json: skipped 6 packet-size entries that "
        "are not [count, ms] pairs of numbers"
    ]
    from profan.sources.ascend_text import comm as ascend_comm
    from profan.sources.ascend_text import packets as ascend_packets

    packets, skipped = ascend_packets.read(ascend_comm.entries(f)[0])
    assert skipped == len(odd) and packets.height == before


def test_matrix_value_of_another_json_type_is_coerced_not_a_crash(tmp_path):
    """A link whose "Op Name" is a number and whose size is text (a hand-edited or foreign writer's file) is read:
    the name as its text, the size as unknown — no traceback, the rest of the file intact."""
    import json

    from profan.sources.ascend_text import matrix as ascend_matrix

    src = QWEN3 / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    doc = json.loads(src.read_text())
    step_key, kind, key = next(
        (sk, kd, k)
        for sk, sec in doc.items()
        for kd, items in sec.items()
        for k, v in items.items()
        if isinstance(v, dict) and v
    )
    links = doc[step_key][kind][key]
    first = next(iter(links))
    links[first]["Op Name"] = 12345
    links[first]["Transit Size(MB)"] = "garbage"
    f = tmp_path / "communication_matrix.json"
    f.write_text(json.dumps(doc))
    good, _ = ascend_matrix.read(src)
    got, skipped = ascend_matrix.read(f)
    assert got.height == good.height and skipped == 0
    from profan.model.evidence import make_pointer

    (row,) = got.filter(got["pointer"] == make_pointer(step_key, kind, key, first)).iter_rows(named=True)
    assert row["shape"] == "aggregated"  # this shape carries the op name inside each link
    assert row["size_mb"] is None and row["op_name"] == "12345"


ALEXNET = QWEN3.parent / "msinsight-alexnet-2rank-2025"


def test_an_empty_type_cell_is_named_not_a_crash(tmp_path):
    """A kernel row whose Type cell is empty (a hand-edited or cut file) makes kernel_details.csv disagree with
    op_statistic.csv for that type: the finding names it "(empty Type)", where joining the names crashed."""
    import csv
    import io
    import shutil

    shutil.copytree(ALEXNET / "level1" / "rank0_ascend_pt", tmp_path / "rank0_ascend_pt")
    path = tmp_path / "rank0_ascend_pt" / KD
    lines = path.read_text(encoding="utf-8").split("\n")
    header = next(csv.reader([lines[0]]))
    cells = next(csv.reader([lines[4]]))
    kind = cells[header.index("Type")]
    cells[header.index("Type")] = ""
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)  # quoted as the profiler quotes: inner quotes doubled
    lines[4] = out.getvalue()
    path.write_text("\n".join(lines), encoding="utf-8")
    report = profan.analyze(tmp_path)
    (f,) = [f for f in report.findings if f.check == "kernels-vs-op-statistic"]
    assert "(empty Type)" in f.message and kind in f.message  # the row left its type, and lacks one itself


@pytest.mark.parametrize("name", ["kernel_details.csv", "memory_record.csv", "operator_memory.csv"])
def test_a_header_padded_with_blanks_reads_as_the_plain_one(tmp_path, name):
    """Every name of the header written as `` Name `` (a writer that pads cells): the same tables as the file as
    the profiler wrote it, where the memory readers failed to find their columns."""
    import shutil

    plain, padded = tmp_path / "plain" / "rank0_ascend_pt", tmp_path / "padded" / "rank0_ascend_pt"
    for d in (plain, padded):
        shutil.copytree(ALEXNET / "level0" / "rank0_ascend_pt", d)
    path = padded / "ASCEND_PROFILER_OUTPUT" / name
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[0] = ",".join(f" {c} " for c in lines[0].split(","))
    path.write_text("\n".join(lines), encoding="utf-8")
    a, b = profan.analyze(plain.parent), profan.analyze(padded.parent)
    from polars.testing import assert_frame_equal

    for table in ("breakdown", "memory_curve", "memory_peaks"):
        if table in a.tables:  # sums may add in another order across threads: equal to the last few ulps
            assert_frame_equal(a.tables[table], b.tables[table], check_exact=False, rel_tol=1e-12)
    assert [c.title for c in a.causes] == [c.title for c in b.causes]
    assert not b.warnings or b.warnings == a.warnings


def test_kernel_events_without_a_name_are_named_not_a_crash(tmp_path):
    """Every kernel event of a real DLRM rank with its "name" cut: they match no bucket rule, and the finding that
    says so names them "(no name)", where joining the names crashed."""
    import json

    (trace,) = (TORCH / "dlrm_v100_8rank").glob("worker0_*")
    doc = json.loads(trace.read_text())
    cut = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            del e["name"]
            cut += 1
    (tmp_path / "trace.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    (f,) = [f for f in report.findings if f.check == "unclassified-time"]
    assert cut > 100 and "(largest: (no name))" in f.message


def test_hccl_tasks_whose_args_are_cut_name_no_peer(tmp_path):
    """AlexNet level1 with the args of every trace_view.json event cut away: the HCCL plane tasks name no peer,
    so no collective is said to wait for one (the waited-peer cause crashed on a peer of None)."""
    import json
    import shutil

    src = ALEXNET / "level1"
    shutil.copytree(src, tmp_path / "job")
    for path in (tmp_path / "job").rglob("trace_view.json"):
        events = json.loads(path.read_text())
        for e in events:
            e.pop("args", None)
        path.write_text(json.dumps(events))
    report = profan.analyze(tmp_path / "job")
    assert not [f for f in report.findings if f.check == "comm-waited-peer"]
    assert [f.metrics["peer"] for f in analysed_peer(src)] == [5, 5]


def analysed_peer(root):
    from conftest import analysed

    return [f for m in analysed(root).findings if m.check == "comm-waited-peer" for f in (m.members or (m,))]


def test_quotes_that_pair_across_lines_are_one_line(tmp_path):
    """A column cut out by a tool that splits lines on every comma (the header's aicore_time(us)): in rows whose
    quoted shapes hold commas it cuts a shape's end and its closing quotes, so quotes pair across lines. The CSV
    reader and the line-by-line reader then end the quoted fields each its own way and the rows could not be
    told their lines (they were cited as no line and the Markdown report crashed): the file is one line naming
    it."""
    import shutil

    src = QWEN3.parent / "msinsight-gpt3-2rank-2023" / "test_rank_1"
    shutil.copytree(src, tmp_path / "test_rank_1")
    path = tmp_path / "test_rank_1" / KD
    lines = path.read_text(encoding="utf-8").split("\n")
    cut = lines[0].split(",").index("aicore_time(us)")
    lines = [",".join(f[:cut] + f[cut + 1 :]) for f in (line.split(",") for line in lines)]
    path.write_text("\n".join(lines), encoding="utf-8")
    res = run_cli("analyze", str(tmp_path), "-o", str(tmp_path / "r.md"), "-q")
    assert_one_line_error(res, "kernel_details.csv", "cannot be matched to their lines", "a quoted field is not closed")
    assert not (tmp_path / "r.md").exists()
