"""Hostile input aimed at the readers themselves: gzip streams that inflate without end or lie about their size,
CSV lines that no parser should hold, line ends of another kind, text that is not UTF-8, numbers that are no
JSON (NaN, Infinity) or no measurement (1e300 µs), integers past int64, and a first line that is no header.
Each gives a counted skip, a warning or one clear line (exit 2) naming the file and the bound — never a
traceback, an internal error, a silent drop or gigabytes of memory. Inputs are real samples, mutated."""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import tracemalloc

import polars as pl
import pytest
from conftest import FIXTURES, QWEN3, analysed, assert_one_line_error, fnum, one_rank, raw_rows, run_cli

import profan
from profan.model.errors import ProfanInputError
from profan.rulepack import limits
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.ascend_text import matrix as ascend_matrix
from profan.sources.trace import chunks as trace_json

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
COMM = "ASCEND_PROFILER_OUTPUT/communication.json"
MATRIX = "ASCEND_PROFILER_OUTPUT/communication_matrix.json"
NCCL_GZ = FIXTURES / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"
MOE_GZ = FIXTURES / "torch" / "moe_b200_rank0" / "eager_trace.json.gz"
ALEX2 = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025" / "level2" / "rank0_ascend_pt"


@pytest.fixture(autouse=True)
def _default_limits():
    """Readers called directly use the bounds in force: start and end every test with the rule pack's own (an
    in-process analysis with a rules file leaves its bounds set for the process)."""
    with limits.scoped(limits.defaults()):
        yield


def _rules(tmp_path, **bounds) -> str:
    path = tmp_path / "limits.toml"
    path.write_text("[limits]\n" + "".join(f"{k} = {v}\n" for k, v in bounds.items()))
    return str(path)


def _set_cells(path, column: str, every: int, value: str) -> list[int]:
    """``column`` of every ``every``-th data row set to ``value``; the changed physical lines."""
    header, *rows = path.read_text().splitlines(keepends=True)
    idx = header.rstrip("\r\n").split(",").index(column)
    assert idx < 15  # the first 16 cells of the Qwen3 rows hold no quoted commas
    changed = []
    for i in range(0, len(rows), every):
        cells = rows[i].split(",")
        cells[idx] = value
        rows[i] = ",".join(cells)
        changed.append(i + 2)
    path.write_text(header + "".join(rows))
    return changed


def _nccl_doc() -> dict:
    return json.loads(gzip.decompress(NCCL_GZ.read_bytes()))


# --------------------------------------------------------------------------- 1. gzip: bombs and lying trailers


def _gzip_bomb(path, mib: int) -> None:
    """A valid trace document whose event array is ``mib`` MiB of blanks: gzip members (a file may hold several)
    of one compressed MiB each, so the bomb is made in milliseconds and is about a thousand times smaller than
    what it inflates to."""
    blank = gzip.compress(b" " * (1 << 20), 9)
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + blank * mib + gzip.compress(b"]}"))


def test_a_gzip_bomb_stops_at_the_inflate_ratio(tmp_path):
    _gzip_bomb(tmp_path / "bomb.json.gz", 96)
    size = (tmp_path / "bomb.json.gz").stat().st_size
    assert size * 100 < 64 << 20  # past 64 MiB of output it is over the ratio
    res = run_cli("analyze", str(tmp_path), "-q")
    assert_one_line_error(
        res,
        "bomb.json.gz",
        f"decompresses to more than 100 times its {size:,} bytes on disk",
        "max_inflate_ratio",
        "[limits] in a rules file",
    )


def test_a_trace_past_max_inflated_bytes_is_one_line_and_the_bound_can_be_raised(tmp_path):
    """A real trace (750 kB inflating to 9.8 MB) under a bound of 8 MB: refused, naming the bound; a rules file
    that raises it again lets the same trace through."""
    shutil.copy(NCCL_GZ, tmp_path / NCCL_GZ.name)
    res = run_cli("analyze", str(tmp_path), "-q", "--rules", _rules(tmp_path, max_inflated_bytes=8_000_000))
    assert_one_line_error(
        res,
        "nccl_data.json.gz",
        "decompresses to more than 8,000,000 bytes",
        "max_inflated_bytes",
        "[limits] in a rules file",
    )
    res = run_cli(
        "analyze",
        str(tmp_path),
        "-q",
        "-o",
        str(tmp_path / "r.md"),
        "--rules",
        _rules(tmp_path, max_inflated_bytes=10_000_000),
    )
    assert res.returncode in (0, 1), res.stderr


def _peak_reading(path) -> tuple[str, int]:
    """(the error `read_bytes` raises, peak bytes the read allocated)."""
    tracemalloc.start()
    try:
        with pytest.raises(ProfanInputError) as err:
            trace_json.read_bytes(path)
        return err.value.problem, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_trailer_that_lies_costs_no_memory(tmp_path):
    """The trailer's size is a hint: 40 bytes claiming 4 GiB used to be trusted (4.2 GB of RSS)."""
    data = gzip.compress(b'{"traceEvents": []}')
    crafted = tmp_path / "t.json.gz"
    crafted.write_bytes(data[:-4] + (0xFFFFFFF0).to_bytes(4, "little"))
    problem, peak = _peak_reading(crafted)
    assert problem.startswith("corrupt gzip data") and peak < 48 << 20, (problem, peak)  # a block: 16 MiB
    assert_one_line_error(run_cli("analyze", str(tmp_path), "-q"), "t.json.gz", "corrupt gzip data")


def test_a_truncated_gzip_stays_one_line_with_bounded_memory(tmp_path):
    """Half of a real .json.gz, cut where its last four bytes read as a size past 2 GiB (what the trailer of a
    cut file holds is whatever bytes happen to be there)."""
    raw = MOE_GZ.read_bytes()
    cut = next(n for n in range(len(raw) // 2, len(raw)) if int.from_bytes(raw[n - 4 : n], "little") >= 2**31)
    f = tmp_path / MOE_GZ.name
    f.write_bytes(raw[:cut])
    problem, peak = _peak_reading(f)
    assert problem == "gzip stream is truncated (file cut off)" and peak < 64 << 20, (problem, peak)
    assert_one_line_error(run_cli("analyze", str(f), "-q"), MOE_GZ.name, "gzip stream is truncated")


# --------------------------------------------------------------------------- 2. a CSV line longer than the bound


@pytest.mark.parametrize("line", [1, 501])
def test_a_csv_line_past_max_line_bytes_is_one_line(tmp_path, line):
    rank = one_rank(tmp_path)
    lines = (rank / KD).read_bytes().split(b"\n")
    lines[line - 1] += b"x" * 200_000
    (rank / KD).write_bytes(b"\n".join(lines))
    res = run_cli("analyze", str(tmp_path), "-q", "--rules", _rules(tmp_path, max_line_bytes=100_000))
    assert_one_line_error(
        res,
        "kernel_details.csv",
        f"line {line} is longer than 100,000 bytes (max_line_bytes)",
        "[limits] in a rules file",
    )


def test_a_long_line_in_one_file_of_a_batch_names_that_file(tmp_path):
    """Small kernel files of several ranks are read as one batch; the file with the long line is the one named,
    and a side CSV (step_trace_time.csv, read whole by the csv module) is bounded the same way."""
    data = shutil.copytree(QWEN3, tmp_path / "job")
    kd = data / "rank_2_ascend_pt" / KD
    lines = kd.read_bytes().split(b"\n")
    lines[99] = lines[99].replace(b",", b"," + b"y" * 60_000, 1)
    kd.write_bytes(b"\n".join(lines))
    res = run_cli("analyze", str(data), "-q", "-j", "1", "--rules", _rules(tmp_path, max_line_bytes=50_000))
    assert_one_line_error(res, "rank_2_ascend_pt", "kernel_details.csv", "line 100 is longer than 50,000 bytes")
    kd.write_bytes(b"\n".join(lines[:99] + lines[100:]))
    st = data / "rank_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_bytes(st.read_bytes() + b"1," + b"9" * 60_000 + b"\n")
    res = run_cli("analyze", str(data), "-q", "-j", "1", "--rules", _rules(tmp_path, max_line_bytes=50_000))
    assert_one_line_error(res, "rank_1_ascend_pt", "step_trace_time.csv", "line 3 is longer than 50,000 bytes")


# --------------------------------------------------------------------------- 3. a lone CR inside an LF file


def test_a_lone_cr_inside_the_file_is_said_not_a_silent_merge(tmp_path):
    """A CR without LF between two rows made polars read them as one row: 2462 rows counted, one lost."""
    rank = one_rank(tmp_path)
    lines = (rank / KD).read_bytes().split(b"\n")
    lines[10:12] = [lines[10] + b"\r" + lines[11]]
    (rank / KD).write_bytes(b"\n".join(lines))
    assert_one_line_error(
        run_cli("analyze", str(tmp_path), "-q"),
        "kernel_details.csv",
        "line 11 holds a carriage return (CR) not followed by a line feed",
        "LF or CRLF",
    )


def test_a_cr_that_ends_the_file_is_a_cut_crlf_and_reads(tmp_path):
    rank = one_rank(tmp_path)
    (rank / KD).write_bytes((rank / KD).read_bytes().rstrip(b"\n").replace(b"\n", b"\r\n") + b"\r")
    report = profan.analyze(tmp_path)
    _, rows = raw_rows(rank / KD)
    assert report.source["ranks"][0]["rows_read"]["kernel_details"] == len(rows) == 2463
    assert report.breakdown["time_us"].sum() == pytest.approx(
        sum(fnum(r["Duration(us)"]) for r in rows.values()), rel=1e-9
    )


# --------------------------------------------------------------------------- 4. event text that is not UTF-8


@pytest.mark.parametrize("pyarrow_reads", [True, False])
def test_event_names_that_are_not_utf8_are_read_with_replacement_characters(tmp_path, pyarrow_reads):
    """Invalid bytes in the name of the busiest NCCL kernel (every one of its 15 events). They used to reach
    polars as invalid strings (a panic when read back) or stop the analysis with a misleading line; read as
    U+FFFD, the kernel keeps its time, and the count is said. ``pyarrow_reads``: a string ``pid`` makes
    pyarrow's reader refuse the chunk, so polars' NDJSON reader takes it."""
    doc = _nccl_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    hot = [e for e in kernels if e["name"] == name]
    assert len(hot) == 15
    if not pyarrow_reads:
        doc["traceEvents"][0]["pid"] = "not a number"
    text = json.dumps(doc).encode()
    assert text.count(json.dumps(name).encode()) == 15
    text = text.replace(b'"ncclKernel_AllReduce_RING_LL', b'"nccl\xffKernel_AllReduce_RING_LL')
    (tmp_path / "nccl_data.json").write_bytes(text)
    res = run_cli("analyze", str(tmp_path), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert (
        "rank 0: nccl_data.json: read 15 byte sequence(s) of event text that are not UTF-8 as the replacement "
        "character U+FFFD" in report["warnings"]
    )
    rows = [r for r in report["tables"]["top_kernels"] if r["name"] == "nccl\ufffd" + name[4:]]
    assert rows and sum(r["time_us"] for r in rows) == pytest.approx(sum(e["dur"] for e in hot), rel=1e-9)
    again = profan.analyze(tmp_path)  # the parse now comes from the cache, which must keep the count
    assert again.source["ranks"][0]["info"].get("cache") == "hit"
    assert [w for w in again.warnings if "not UTF-8" in w] == [w for w in report["warnings"] if "not UTF-8" in w]


@pytest.mark.parametrize("column", ["Name", "Type"])
def test_kernel_text_that_is_not_utf8_is_read_with_replacement_characters(tmp_path, column):
    """A byte that is not UTF-8 in the kernel text of every 10th row: polars' fast reader refused it as a
    category and the whole file was refused. Read as U+FFFD, every row keeps its time, and the rows are counted."""
    rank = one_rank(tmp_path)
    _, raw = raw_rows(rank / KD)
    total = sum(fnum(r["Duration(us)"]) for r in raw.values())
    header, *rows = (rank / KD).read_bytes().split(b"\n")
    idx = header.split(b",").index(column.encode())
    changed = 0
    for i in range(0, len(rows), 10):
        cells = rows[i].split(b",")
        if len(cells) > idx and cells[idx]:
            cells[idx] += b"\xff"
            rows[i] = b",".join(cells)
            changed += 1
    (rank / KD).write_bytes(b"\n".join([header, *rows]))
    report = profan.analyze(tmp_path)
    assert report.breakdown["time_us"].sum() == pytest.approx(total, rel=1e-9)
    assert "kernel_details" not in report.source["ranks"][0]["rows_skipped"]
    assert changed == 247
    assert (
        f"rank 0: rank_0_ascend_pt/{KD}: read the text of {changed} row(s) that is not UTF-8 with the replacement "
        "character U+FFFD in place of the bad bytes" in report.warnings
    )


def test_a_side_json_file_that_is_not_utf8_names_the_byte(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / COMM
    raw = path.read_bytes()
    at = raw.index(b"hcom_") + 5
    path.write_bytes(raw[:at] + b"\xff" + raw[at:])
    assert_one_line_error(
        run_cli("analyze", str(tmp_path), "-q"),
        "communication.json",
        f"not valid JSON (not UTF-8 text: byte 0xff at offset {at};",
    )


# --------------------------------------------------------------------------- 5. NaN and Infinity in the JSON files


def _bad_numbers(path, field: str, literal: str, every: int) -> str:
    """``field`` of every ``every``-th object holding it set to the (non-JSON) literal; the new text."""
    text = path.read_text()
    hits = iter(range(10**6))
    new = re.sub(
        rf'"{re.escape(field)}": [-0-9.eE+]+',
        lambda m: f'"{field}": {literal}' if next(hits) % every == 0 else m.group(0),
        text,
    )
    assert new != text
    path.write_text(new)
    return new


def _unusable_ops(doc: dict) -> int:
    """Ground truth with the stdlib (which reads the literals): op entries holding a number that is not finite."""

    def bad(v) -> bool:
        return isinstance(v, float) and not math.isfinite(v)

    n = 0
    for sections in doc.values():
        for ops in sections.values():
            for key, body in ops.items():
                if key == "Total Op Info":
                    continue
                nums = list(body["Communication Time Info"].values())
                nums += [v for b in body.get("Communication Bandwidth Info", {}).values() for v in b.values()]
                n += any(bad(v) for v in nums)
    return n


def _finite(frame, *cols: str) -> bool:
    """No NaN and nothing past 1e9 left in ``cols`` (nulls are missing values, allowed)."""
    return frame.select(pl.all_horizontal(pl.col(c).is_null() | (pl.col(c).abs() < 1e9) for c in cols).all()).item()


def test_nan_and_infinity_in_communication_json_skip_their_ops_and_are_counted(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / COMM
    _bad_numbers(path, "Elapse Time(ms)", "NaN", 4)
    _bad_numbers(path, "Wait Time(ms)", "Infinity", 7)
    text = _bad_numbers(path, "Transit Time(ms)", "-Infinity", 23)
    doc = json.loads(text)
    bad = _unusable_ops(doc)
    total = sum(len([k for k in ops if k != "Total Op Info"]) for s in doc.values() for ops in s.values())
    assert total == 15 and 4 <= bad < total
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["communication"] == bad
    assert any(f"communication.json: skipped {bad} of {total} entries" in w for w in report.warnings)
    comm = report.tables["communication"]
    assert comm.height == total - bad
    assert _finite(comm, "elapse_ms", "wait_ms", "transit_ms")
    assert all("nan" not in f.message.lower() and "inf " not in f.message.lower() for f in report.findings)


def test_nan_and_infinity_in_the_matrix_skip_their_links(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / MATRIX
    clean, n_clean = ascend_matrix.read(path)[0].height, ascend_matrix.read(path)[1]
    text = path.read_text()
    total_keys = re.findall(r'"([a-zA-Z]+-total@\d+)": \{', text)
    assert total_keys
    # the first link of every "-total" entry: a NaN size (it used to pass every "> 0" filter) or an infinite time
    for i, key in enumerate(total_keys):
        at = text.index(f'"{key}"')
        field = "Transit Size(MB)" if i % 2 == 0 else "Transit Time(ms)"
        j = text.index(f'"{field}": ', at)
        end = min(text.index(",", j), text.index("}", j))
        text = text[:j] + f'"{field}": {"NaN" if i % 2 == 0 else "Infinity"}' + text[end:]
    path.write_text(text)
    links, skipped = ascend_matrix.read(path)
    assert links.height == clean - len(total_keys) and skipped == n_clean + len(total_keys)
    assert _finite(links, "size_mb", "time_ms", "bandwidth_gbps")
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["communication_matrix"] == len(total_keys)


# --------------------------------------------------------------------------- 6. absurd finite durations


def test_absurd_kernel_durations_are_skipped_like_missing_ones(tmp_path):
    rank = one_rank(tmp_path)
    changed = _set_cells(rank / KD, "Duration(us)", 10, "1e300")
    report = profan.analyze(tmp_path)
    _, rows = raw_rows(rank / KD)
    good = sum(fnum(r["Duration(us)"]) for line, r in rows.items() if line not in changed)
    assert report.breakdown["time_us"].sum() == pytest.approx(good, rel=1e-9)
    assert report.source["ranks"][0]["rows_skipped"]["kernel_details"] == len(changed) == 247
    assert any(f"skipped {len(changed)} of 2463 rows" in w for w in report.warnings)


def test_the_duration_bound_comes_from_the_rules_file(tmp_path):
    """Under ``max_duration_us = 1000`` every row longer than 1 ms is skipped: counted, and the rest summed
    exactly. The bound is read per analysis, never hard-coded; the default analysis counts them again."""
    rank = one_rank(tmp_path)
    _, rows = raw_rows(rank / KD)
    long = [r for r in rows.values() if fnum(r["Duration(us)"]) > 1000]
    assert 0 < len(long) < len(rows)
    report = profan.analyze(tmp_path, rules=[_rules(tmp_path, max_duration_us=1000)])
    assert report.source["ranks"][0]["rows_skipped"]["kernel_details"] == len(long)
    assert report.breakdown["time_us"].sum() == pytest.approx(
        sum(fnum(r["Duration(us)"]) for r in rows.values() if fnum(r["Duration(us)"]) <= 1000), rel=1e-9
    )
    assert "kernel_details" not in profan.analyze(tmp_path).source["ranks"][0]["rows_skipped"]


@pytest.mark.parametrize("value", [1e300, 2**70])
def test_absurd_trace_event_durations_are_skipped_like_missing_ones(tmp_path, value):
    doc = _nccl_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    bad = kernels[::50]
    removed_us = sum(e["dur"] for e in bad)
    for e in bad:
        e["dur"] = value
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["kineto_trace"] == len(bad)
    assert any(f"skipped {len(bad)} of" in w and "max_duration_us" in w for w in report.warnings)
    before = analysed(NCCL_GZ.parent).breakdown["time_us"].sum()
    assert report.breakdown["time_us"].sum() == pytest.approx(before - removed_us, rel=1e-9)


def test_absurd_durations_in_trace_view_are_skipped_and_counted(tmp_path):
    rank = shutil.copytree(ALEX2, tmp_path / ALEX2.name)
    tv = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(tv.read_text())
    overlap_pid = next(
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "Overlap Analysis"
    )
    lane = [e for e in events if e.get("ph") == "X" and e["pid"] == overlap_pid]
    for e in lane[::3]:
        e["dur"] = 1e300
    tv.write_text(json.dumps(events))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["trace_view"] == len(lane[::3])
    assert any(f"trace_view.json: skipped {len(lane[::3])} of" in w and "max_duration_us" in w for w in report.warnings)
    split = report.tables["trace_steps"]
    kept = sum(
        e["dur"]
        for e in lane
        if e["dur"] < 1e300 and e.get("name") in ("Computing", "Communication(Not Overlapped)", "Free")
    )
    assert split["step_us"].sum() == pytest.approx(kept, rel=1e-9)


# --------------------------------------------------------------------------- 7. integers past int64, inf ids


def test_kernel_step_ids_that_are_no_step_numbers_are_counted_skips(tmp_path):
    """Step Id cells of text, fractions, negatives, inf and past int64: each row is skipped and counted (read as
    "no step" it made a step of its own, and ``-3`` a step -3 with findings); the others keep every microsecond."""
    rank = one_rank(tmp_path)
    odd = ["abc", "50.5", "-3", "inf", "1e30", "99999999999999999999"]
    _, raw = raw_rows(rank / KD)
    changed = _set_cells(rank / KD, "Step Id", 41, "")  # placeholder: the lines, then one value each below
    text = (rank / KD).read_text().splitlines(keepends=True)
    for k, line in enumerate(changed):
        text[line - 1] = odd[k % len(odd)] + text[line - 1]
    (rank / KD).write_text("".join(text))
    report = profan.analyze(tmp_path)
    kept = sum(fnum(r["Duration(us)"]) for line, r in raw.items() if line not in changed)
    assert report.breakdown["time_us"].sum() == pytest.approx(kept, rel=1e-9)
    assert report.source["ranks"][0]["rows_skipped"]["kernel_details"] == len(changed) == 61
    assert sorted(report.breakdown["step"].unique().to_list()) == sorted({int(r["Step Id"]) for r in raw.values()})
    said = [w for w in report.warnings if f"skipped {len(changed)} of 2463 rows" in w]
    assert said and "Step Id is no step number" in said[0]


@pytest.mark.parametrize("column", ["Step", "Device_id"])
@pytest.mark.parametrize("value", ["inf", "1e30"])
def test_step_trace_ids_that_are_no_int64_are_counted_skips(tmp_path, column, value):
    rank = one_rank(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    _set_cells(path, column, 1, value)
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["step_trace_time"] == 1


def test_an_op_statistic_count_past_int64_is_a_counted_skip(tmp_path):
    rank = one_rank(tmp_path)
    _set_cells(rank / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv", "Count", 5, "1e30")
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rows_skipped"]["op_statistic"] == 7  # rows 1, 6, …, 31 of 35


@pytest.mark.parametrize("where", ["kineto", "trace_view"])
def test_a_profiler_step_number_past_int64_is_said(tmp_path, where):
    if where == "kineto":
        doc = _nccl_doc()
        steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
        steps[0]["name"] = "ProfilerStep#99999999999999999999"
        n = sum(1 for e in steps if e["name"] == steps[0]["name"])
        (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
        file = "nccl_data.json"
    else:
        rank = shutil.copytree(ALEX2, tmp_path / ALEX2.name)
        tv = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        text, n = re.subn(r"ProfilerStep#\d+", "ProfilerStep#99999999999999999999", tv.read_text(), count=1)
        tv.write_text(text)
        file = "trace_view.json"
    res = run_cli("analyze", str(tmp_path), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    assert any(
        f"{file}: ignored {n} ProfilerStep annotation(s) whose step number does not fit a 64-bit integer" in w
        for w in warnings
    ), warnings


@pytest.mark.parametrize("rank", [2**70, "99999999999999999999999", "1e30"])
def test_a_distributed_rank_past_int64_is_said(tmp_path, rank):
    doc = _nccl_doc()
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank}
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rank"] == 0
    assert any(f"distributedInfo.rank {json.dumps(rank)} is not a rank number" in w for w in report.warnings)


@pytest.mark.parametrize("rank_id", ["Infinity", "NaN", "1e30", "99999999999999999999"])
def test_a_profiler_info_rank_id_that_is_no_int64_is_no_crash(tmp_path, rank_id):
    rank = one_rank(tmp_path)
    info = rank / "profiler_info_0.json"
    info.write_text(re.sub(r'"rank_id": "?-?\d+"?', f'"rank_id": {rank_id}', info.read_text()))
    report = profan.analyze(tmp_path)
    assert report.source["ranks"][0]["rank"] == 0 and "rank_id" not in report.source["ranks"][0]["info"]


def test_a_communication_step_past_int64_is_a_counted_skip(tmp_path):
    rank = one_rank(tmp_path)
    for name in (COMM, MATRIX):
        path = rank / name
        path.write_text(path.read_text().replace('"step13"', '"step99999999999999999999"'))
    report = profan.analyze(tmp_path)
    skipped = report.source["ranks"][0]["rows_skipped"]
    assert skipped["communication"] == 1 and skipped["communication_matrix"] == 1
    assert report.tables.get("communication") is None or report.tables["communication"].is_empty()


def test_a_matrix_link_of_ranks_past_int64_is_a_counted_skip(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / MATRIX
    clean = ascend_matrix.read(path)
    key = re.search(r'"([a-zA-Z]+-total@\d+)": \{"(\d+-\d+)"', path.read_text())
    path.write_text(
        path.read_text().replace(
            f'"{key.group(1)}": {{"{key.group(2)}"', f'"{key.group(1)}": {{"99999999999999999999-1"', 1
        )
    )
    links, skipped = ascend_matrix.read(path)
    assert links.height == clean[0].height - 1 and skipped == clean[1] + 1
    assert links["src_local"].null_count() == 0
    assert ascend_comm.step_of("step99999999999999999999") == (False, None)
    assert ascend_comm.step_of("step" + "9" * 5000) == (False, None)  # past Python's int-from-text limit


# --------------------------------------------------------------------------- 8. a first line that is no header


def test_the_missing_column_error_shows_a_cleaned_short_header(tmp_path):
    rank = one_rank(tmp_path)
    names = [
        "\x1b[31mRED\x1b[0m",
        "\x1b]0;owned\x07Title",
        "Bell\x07\x00Nul",
        "Bidi\u202eTxet",
        "x" * 500,
        *[f"col{i}" for i in range(20)],
        "Step Id",  # a column of kernel_details.csv: the file is recognisably one, so its header is shown
    ]
    (rank / KD).write_text(",".join(names) + "\n1,2,3\n", encoding="utf-8")
    res = run_cli("analyze", str(tmp_path), "-q")
    assert_one_line_error(
        res,
        "kernel_details.csv",
        "missing column(s) Name, Start Time(us), Duration(us)",
        f"the header has 26 name(s): '?RED?', '?Title', 'Bell??Nul', 'Bidi?Txet', '{'x' * 39}…', 'col0',",
        "'col6' and 14 more",
    )
    line = res.stderr.strip()
    assert not re.search(r"[\x00-\x1f\x7f\u202e]", line) and "col7" not in line and len(line) < 600


@pytest.mark.parametrize("name", ["kernel_details.csv", "step_trace_time.csv", "op_statistic.csv"])
def test_a_file_that_is_no_profiler_file_is_described_not_quoted(tmp_path, name):
    """A profiler file's name linked to a file of another kind (``/etc/passwd``'s lines, here a copy of their
    shape): the error names the file and says how many fields its first line has, and quotes none of it."""
    secret = tmp_path / "passwd"
    secret.write_text("SECRETUSER:x:0:0:SECRETUSER:/home:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    rank = one_rank(tmp_path)
    target = rank / "ASCEND_PROFILER_OUTPUT" / name
    target.unlink()
    target.symlink_to(secret)
    named = target if name == "kernel_details.csv" else tmp_path  # named on the command line, or found in a walk
    res = run_cli("analyze", str(named), "-q")
    if name != "kernel_details.csv" and res.returncode == 0:  # a link out of the walked folder is skipped
        assert "SECRETUSER" not in res.stdout + res.stderr
        return
    assert_one_line_error(res, name, "its first line has 1 field(s), none a column of this profiler file")
    assert "SECRETUSER" not in res.stderr and "bash" not in res.stderr


def test_the_missing_column_error_of_a_side_csv_is_cleaned_too(tmp_path):
    rank = one_rank(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    path.write_text("\x1b[2J\x1b[HStep," + "y" * 300 + ",Computing\n1,2,3\n", encoding="utf-8")
    res = run_cli("analyze", str(tmp_path), "-q")
    # each escape sequence is one "?": the name shown is not "Step", which is why Step is missing
    assert_one_line_error(
        res,
        "step_trace_time.csv",
        "missing column(s) Step, Communication(Not Overlapped), Free",
        f"the header has 3 name(s): '??Step', '{'y' * 39}…', 'Computing'",
    )
    assert "\x1b" not in res.stderr
