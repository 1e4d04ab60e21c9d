"""The chrome-trace reader on the real traces: every kept row is the event at its index, variants are tolerated,
bad files fail with one clear line, and the Parquet cache serves the same table."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import polars as pl
import pytest
from conftest import run_cli

from profan.model.errors import ProfanInputError
from profan.sources.common.cache import cached_parse
from profan.sources.trace import chunks as trace_json_module
from profan.sources.trace.chrome import parse

ROOT = Path(__file__).resolve().parents[2]
TORCH = ROOT / "fixtures" / "torch"
DLRM0 = TORCH / "dlrm_v100_8rank" / "worker0_step_12.1694128201545.pt.trace.json"
QWEN = TORCH / "qwen1.5-0.5b_h100_1rank" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NCCL = TORCH / "nccl_a100_1rank" / "nccl_data.json.gz"
MOE = TORCH / "moe_b200_rank0" / "eager_trace.json.gz"
TRACE_VIEW = (
    ROOT
    / "fixtures"
    / "ascend"
    / "msinsight-alexnet-2rank-2025"
    / "level2"
    / "rank0_ascend_pt"
    / "ASCEND_PROFILER_OUTPUT"
    / "trace_view.json"
)


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize("path", [DLRM0, QWEN, NCCL, MOE, TRACE_VIEW], ids=lambda p: p.parent.name)
def test_every_row_is_the_event_at_its_index(path):
    raw = raw_events(path)
    tr = parse(path)
    ev = tr.events.with_columns(pl.col("ph", "cat", "name", "pid", "tid").cast(pl.String))
    want = [i for i, e in enumerate(raw) if e.get("ph") in ("X", "M")]
    assert ev["event_idx"].to_list() == want  # default keep: complete and metadata events, in file order
    for row in ev.iter_rows(named=True):
        e = raw[row["event_idx"]]
        assert row["name"] == e["name"] and row["ph"] == e["ph"] and row["cat"] == e.get("cat")
        assert row["pid"] == str(e["pid"]) and row["tid"] == str(e["tid"])
        assert row["ts_us"] == (pytest.approx(float(e["ts"]), abs=1e-3, rel=0) if "ts" in e else None)
        assert row["dur_us"] == (pytest.approx(float(e["dur"])) if "dur" in e else None)
        args = e.get("args", {})
        assert row["ext_id"] == args.get("External id")
        assert row["correlation"] == args.get("correlation")


def test_kernel_details_carry_the_nccl_args():
    raw = raw_events(NCCL)
    tr = parse(NCCL)
    k = tr.with_details(tr.events.filter(pl.col("cat").cast(pl.String) == "kernel"))
    nccl = k.filter(pl.col("coll_name").is_not_null())
    assert nccl.height == 21
    for row in nccl.iter_rows(named=True):
        a = raw[row["event_idx"]]["args"]
        assert (row["coll_name"], row["in_nelems"], row["dtype"], row["group_size"], row["stream"]) == (
            a["Collective name"],
            a["In msg nelems"],
            a["dtype"],
            a["Group size"],
            a["stream"],
        )
        assert json.loads(row["pg_ranks"]) == json.loads(a["Process Group Ranks"])


def test_ascend_bare_array_with_string_timestamps():
    raw = raw_events(TRACE_VIEW)
    tr = parse(TRACE_VIEW)
    assert tr.layout == "array" and tr.meta == {}
    assert isinstance(raw[tr.events["event_idx"][0]]["ts"], str)
    x = tr.with_details(tr.events.filter(pl.col("ph").cast(pl.String) == "X"))
    planes = x.filter(pl.col("link_type").is_not_null())
    want = [
        (i, e["args"]["link type"], e["args"]["size(Byte)"])
        for i, e in enumerate(raw)
        if e.get("ph") == "X" and "link type" in e.get("args", {})
    ]
    assert planes.select("event_idx", "link_type", "size_bytes").rows() == [(i, lt, float(s)) for i, lt, s in want]


def test_variants_are_tolerated(tmp_path):
    """Compact, shuffled, string ts/pid/tid, an int beyond int64, no distributedInfo/deviceProperties."""
    raw = raw_events(QWEN)
    order = list(range(len(raw)))
    random.Random(7).shuffle(order)
    events = []
    for i in order:
        e = dict(raw[i])
        if i % 3 == 0 and "ts" in e:
            e["ts"] = f"{e['ts']:.3f}"
        if i % 5 == 0:
            e["pid"], e["tid"] = str(e["pid"]), str(e["tid"])
        if i % 7 == 0:
            e["args"] = {**e.get("args", {}), "Comms Id": 2**70 + i}
        events.append(e)
    out = tmp_path / "variant.json"
    out.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}, separators=(",", ":")))
    tr = parse(out)
    assert "distributedInfo" not in tr.meta and "deviceProperties" not in tr.meta
    got = tr.events.with_columns(pl.col("name", "pid").cast(pl.String))
    assert got.height == sum(1 for e in raw if e.get("ph") in ("X", "M"))
    for row in got.iter_rows(named=True):
        e = raw[order[row["event_idx"]]]
        assert row["name"] == e["name"] and row["pid"] == str(e["pid"])
        assert row["ts_us"] == pytest.approx(e["ts"], abs=1e-3, rel=0)


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    text = DLRM0.read_bytes()
    cut = tmp_path / "cut" / "truncated.json"
    cut.parent.mkdir()
    cut.write_bytes(text[: len(text) // 2])
    fake = tmp_path / "fake" / "trace.json.gz"
    fake.parent.mkdir()
    fake.write_bytes(text)
    empty = tmp_path / "empty" / "trace.json"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    noev = tmp_path / "noev" / "trace.json"
    noev.parent.mkdir()
    noev.write_text('{"schemaVersion": 1, "traceEvents": []}')
    nokern = tmp_path / "nokern" / "trace.json"
    nokern.parent.mkdir()
    meta_only = [e for e in raw_events(DLRM0) if e.get("ph") in ("M", "i") or e.get("cat") == "Trace"]
    nokern.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta_only}))
    return {
        "truncated": (cut, "truncated"),
        "not-gzip": (fake, "not gzip"),
        "empty": (empty, "empty"),
        "no-events": (noev, "no events"),
        "no-kernels": (nokern, "nothing to analyse"),
    }


def test_bad_files_raise_one_clear_error(tmp_path):
    for name, (path, words) in _bad_inputs(tmp_path).items():
        if name == "no-kernels":
            continue  # parses fine; the per-rank map refuses it (see the CLI test)
        with pytest.raises(ProfanInputError) as exc:
            parse(path)
        assert words in exc.value.problem, (name, exc.value.problem)


@pytest.mark.parametrize(
    ("case", "as_dir"),
    [
        ("truncated", False),
        ("not-gzip", True),
        ("empty", False),
        ("no-events", True),
        ("no-kernels", False),
        ("no-kernels", True),
    ],
)
def test_cli_bad_trace_one_line_exit_2(tmp_path, monkeypatch, case, as_dir):
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    path, words = _bad_inputs(tmp_path)[case]
    res = run_cli("analyze", str(path.parent if as_dir else path), "-q")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert words in lines[0] and path.name in lines[0], lines[0]


def test_cache_serves_the_same_table_and_follows_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "c"))
    src = tmp_path / "t.json.gz"
    src.write_bytes(QWEN.read_bytes())
    first, hit1 = cached_parse(src, "test", parse)
    second, hit2 = cached_parse(src, "test", parse)
    assert (hit1, hit2) == (False, True)
    assert second.events.equals(first.events) and second.details.equals(first.details)
    assert second.meta == first.meta and second.layout == first.layout
    os.utime(src, ns=(1, 1))  # another mtime: a new key, parsed again
    _, hit3 = cached_parse(src, "test", parse)
    assert hit3 is False
    monkeypatch.setenv("PROFAN_NO_CACHE", "1")
    _, hit4 = cached_parse(src, "test", parse)
    assert hit4 is False


def test_chunked_split_is_exact(monkeypatch, tmp_path):
    """Tiny chunks on a real trace, plus '},{' inside names and nested args: the rows do not change."""
    whole = parse(DLRM0).events
    monkeypatch.setattr("profan.sources.trace.chunks.CHUNK_BYTES", 4096)
    assert parse(DLRM0).events.equals(whole)
    events = raw_events(DLRM0)[:300]
    for e in events[::7]:
        e["name"] = e["name"] + "},{x"
        e["args"] = {**e.get("args", {}), "nested": [{"a": 1}, {"b": "},{"}]}
    out = tmp_path / "sep.json"
    out.write_text(json.dumps(events, indent=1))
    got = parse(out).events.with_columns(pl.col("name").cast(pl.String))
    want = [(i, e["name"]) for i, e in enumerate(events) if e.get("ph") in ("X", "M")]
    assert got.select("event_idx", "name").rows() == want


class _CountingDecoder:
    """`trace_json._ARRAY` with a count of its decodes: how many times the event array's pieces were parsed."""

    def __init__(self, real) -> None:
        self.real, self.calls = real, 0

    def decode(self, piece: bytes):
        self.calls += 1
        return self.real.decode(piece)


@pytest.fixture
def counting(monkeypatch) -> _CountingDecoder:
    spy = _CountingDecoder(trace_json_module._ARRAY)
    monkeypatch.setattr(trace_json_module, "_ARRAY", spy)
    monkeypatch.setattr(trace_json_module, "CHUNK_BYTES", 4096)
    return spy


def test_bad_json_mid_array_is_named_at_its_byte_after_one_parse(counting, tmp_path):
    """A token that is no JSON (Python's ``Infinity``) inside one event's args, halfway through a real trace: the
    reader stops at the first piece holding it, naming the byte of the event array where it is, instead of
    extending that piece separator by separator to the end of the file (which made a 20 MB trace take minutes)."""
    events = raw_events(DLRM0)
    text = json.dumps(events)
    at = text.index('"ts"', len(text) // 2)
    bad = text[:at] + '"bad": Infinity, ' + text[at:]
    out = tmp_path / "inf.json"
    out.write_text('{"traceEvents": ' + bad + "}")
    with pytest.raises(ProfanInputError) as exc:
        parse(out)
    msg = str(exc.value)
    byte = int(msg.split("(byte ")[1].split(" ")[0])
    assert "invalid JSON trace" in msg and "of the traceEvents array" in msg
    assert bad[byte:].startswith("Infinity")
    assert counting.calls <= len(text[:at]) // 4096 + 2  # one parse per chunk up to the bad one, no retries


def test_separators_inside_values_cost_few_parses(counting, tmp_path):
    """An event whose args hold thousands of ``}, {`` (a list of objects): each is a false place to cut, so a cut
    there is refused; the piece grows by a doubling step, and the array still splits exactly."""
    events = raw_events(DLRM0)[:200]
    events[50]["args"] = {**events[50].get("args", {}), "blocks": [{"i": i} for i in range(20000)]}
    out = tmp_path / "nested.json"
    out.write_text(json.dumps(events))
    got = parse(out).events
    assert got["event_idx"].to_list() == [i for i, e in enumerate(events) if e.get("ph") in ("X", "M")]
    assert counting.calls < 60  # about one per 4 KB chunk plus a few doublings over the 250 KB event


def test_a_bare_array_padded_with_blanks_reads_its_events(monkeypatch, tmp_path):
    """A bare event array followed by blanks over several blocks (blocks of 8 bytes here): the array's end is
    found a block at a time, and the events are those of the array."""
    events = raw_events(DLRM0)[:50]
    out = tmp_path / "padded.json"
    out.write_text(json.dumps(events) + " \r\n\t" * 100)
    monkeypatch.setattr(trace_json_module, "BLOCK", 8)
    assert parse(out).events["event_idx"].to_list() == [i for i, e in enumerate(events) if e.get("ph") in ("X", "M")]
    out.write_text(json.dumps(events)[:-1] + " " * 100)
    with pytest.raises(ProfanInputError, match="the event array is not closed"):
        parse(out)


def test_events_array_found_among_decoys(tmp_path):
    """'"traceEvents": [' inside a string before the array, and list-valued keys after it (INFO/ERROR logs)."""
    events = raw_events(DLRM0)
    doc = (
        '{"INFO": ["log line with \\"traceEvents\\": [ in it"], "distributedInfo": {"rank": 5}, '
        '"traceEvents": ' + json.dumps(events) + ', "ERROR": ["x]", ["y"]], "traceName": "t.json"}'
    )
    out = tmp_path / "decoy.json"
    out.write_text(doc)
    tr = parse(out)
    assert tr.meta["distributedInfo"] == {"rank": 5} and tr.meta["traceName"] == "t.json"
    assert tr.events["event_idx"].to_list() == [i for i, e in enumerate(events) if e.get("ph") in ("X", "M")]


@pytest.mark.parametrize("path", [DLRM0, TRACE_VIEW], ids=lambda p: p.parent.name)
def test_a_mapped_file_reads_as_a_read_one(monkeypatch, path, tmp_path):
    """A big file is mapped (`trace_json.MAP_FROM`) and its raw line breaks flattened piece by piece: the same
    table as reading it into a flattened buffer, also for pretty-printed JSON and tiny chunks (pages handed back
    as they go)."""
    read = parse(path)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(raw_events(path)[:400], indent=2).replace("\n", "\r\n"))
    read_pretty = parse(pretty)
    monkeypatch.setattr("profan.sources.trace.chunks.MAP_FROM", 0)
    monkeypatch.setattr("profan.sources.trace.chunks.CHUNK_BYTES", 1 << 14)
    for whole, file in ((read, path), (read_pretty, pretty)):
        mapped = parse(file)
        assert mapped.events.equals(whole.events) and mapped.details.equals(whole.details)
        assert (mapped.meta, mapped.layout, mapped.no_phase) == (whole.meta, whole.layout, whole.no_phase)


def test_ascend_core_reads_no_args_but_the_metadata_names():
    """trace_view.json's core pass reads no args (`_LEAN_CORE_SCHEMA`); the process and thread names the lanes are
    found by still come from the metadata events."""
    raw = raw_events(TRACE_VIEW)
    ev = parse(TRACE_VIEW).events
    meta = ev.filter(pl.col("ph").cast(pl.String) == "M")
    assert meta.height and meta.select("event_idx", "arg_name").rows() == [
        (i, raw[i].get("args", {}).get("name")) for i in meta["event_idx"].to_list()
    ]
    assert ev.select(pl.col("seq", "fwd_tid", "ext_id", "correlation").null_count()).row(0) == (ev.height,) * 4
