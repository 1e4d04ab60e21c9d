"""Hostile input meeting the outputs: a damaged cache entry, a file rewritten under the cache's feet, kernel names
carrying control characters or Markdown, and comparisons of sides that do not line up. Each gives the same report
as a clean run, text that shows what the source holds (and forms no link, image or markup), or a said difference —
never a traceback, a stale or silently different report, or a dropped step."""

from __future__ import annotations

import gzip
import html
import json
import os
import re
import shutil

import openpyxl
import polars as pl
import pytest
from conftest import FIXTURES, QWEN3, assert_one_line_error, fnum, one_rank, raw_rows, run_cli

import profan
from profan.ranks import kernel_pass

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
NCCL = FIXTURES / "torch" / "nccl_a100_1rank"
CONTROLS = ("\r", "\x00", "\x1b", "\x0b", "\x0c")


def _set_op(path, op: str, new: str) -> float:
    """Give every row of op type ``op`` the Type and Name ``new`` (written as it is: no quoting); return the
    rows' summed duration, read with the csv module before the edit."""
    _, rows = raw_rows(path)
    total = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Type"] == op)
    header, *lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    cols = header.rstrip("\r\n").split(",")
    name, typ = cols.index("Name"), cols.index("Type")
    for i, line in enumerate(lines):
        cells = line.split(",")  # the first 16 cells of the Qwen3 rows hold no quoted commas
        if cells[typ] == op:
            cells[name] = cells[typ] = new
            lines[i] = ",".join(cells)
    path.write_text(header + "".join(lines), encoding="utf-8", newline="")
    assert total > 0
    return total


# ------------------------------------------------------------------------------------------ 1. the cache


def _doc(path) -> str:
    """The JSON report without its timings and cache flags, as comparable text (NaN included)."""
    d = profan.analyze(path).to_dict()
    d["meta"].pop("timings_s", None)
    for r in d["source"]["ranks"]:
        r.get("info", {}).pop("cache", None)
    return json.dumps(d, sort_keys=True, default=str)


def _drop_key(entry, kind):
    name = "meta.json" if kind == "trace" else "facts.json"
    doc = json.loads((entry / name).read_text())
    facts = doc if kind == "trace" else doc["facts"]
    facts.pop("layout" if kind == "trace" else next(iter(facts)))
    (entry / name).write_text(json.dumps(doc))


def _retype(entry, kind):
    f = entry / ("events.parquet" if kind == "trace" else "table.parquet")
    df = pl.read_parquet(f)
    col = next(c for c, t in df.schema.items() if t == pl.Float64)
    df.with_columns(pl.col(col).cast(pl.String)).write_parquet(f)


def _drop_rows(entry, kind, name=None):
    f = entry / (name or ("events.parquet" if kind == "trace" else "table.parquet"))
    df = pl.read_parquet(f)
    df.head(df.height // 2).write_parquet(f)


def _garbage(entry, kind):
    (entry / ("details.parquet" if kind == "trace" else "table.parquet")).write_bytes(b"not parquet\x00" * 300)


DAMAGE = {
    "meta key deleted": _drop_key,
    "column re-typed": _retype,
    "rows dropped": _drop_rows,
    "garbage bytes": _garbage,
}


def _snapshot(entry) -> dict:
    return {
        f.name: pl.read_parquet(f) if f.suffix == ".parquet" else json.loads(f.read_text())
        for f in sorted(entry.iterdir())
    }


def _same(a: dict, b: dict) -> bool:
    """The same files with the same JSON and tables (a kernel file's groups come in hash order: rows compared as
    a set)."""

    def rows(df: pl.DataFrame) -> list:
        return sorted(map(repr, df.rows()))

    return a.keys() == b.keys() and all(
        x.schema == b[k].schema and rows(x) == rows(b[k]) if isinstance(x, pl.DataFrame) else x == b[k]
        for k, x in a.items()
    )


@pytest.mark.parametrize("kind", ["trace", "table"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cache_entry_is_a_miss_and_is_rewritten(tmp_path, monkeypatch, kind, damage):
    """A Kineto trace's parsed entry and a kernel file's reduced groups (forced through the cache): after each
    kind of damage the next run reports exactly what a run without the cache reports, and leaves the entry as a
    clean run writes it."""
    if kind == "trace":
        src = tmp_path / "data" / "nccl_data.json.gz"
        src.parent.mkdir()
        shutil.copy(NCCL / "nccl_data.json.gz", src)
    else:
        src = tmp_path / "kernel_details.csv"
        shutil.copy(QWEN3 / "rank_0_ascend_pt" / KD, src)
        monkeypatch.setattr(kernel_pass, "CACHE_BYTES", 0)  # the real file is small; treat it as big
    monkeypatch.setenv("PROFAN_NO_CACHE", "1")
    clean = _doc(src)
    monkeypatch.delenv("PROFAN_NO_CACHE")
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    assert _doc(src) == clean
    # a trace has one entry; a big kernel file two (its groups, and its timeline blocks): each is damaged
    entries = sorted((tmp_path / "cache" / ("traces" if kind == "trace" else "tables")).iterdir())
    assert len(entries) == (1 if kind == "trace" else 2)
    written = {entry: _snapshot(entry) for entry in entries}
    for entry in entries:
        DAMAGE[damage](entry, kind)
    assert _doc(src) == clean
    assert all(_same(_snapshot(entry), before) for entry, before in written.items())
    assert _doc(src) == clean  # and the rewritten entries serve


def test_dropped_detail_rows_of_a_trace_entry_are_a_miss_too(tmp_path, monkeypatch):
    src = tmp_path / "nccl_data.json.gz"
    shutil.copy(NCCL / "nccl_data.json.gz", src)
    monkeypatch.setenv("PROFAN_NO_CACHE", "1")
    clean = _doc(src)
    monkeypatch.delenv("PROFAN_NO_CACHE")
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    _doc(src)
    (entry,) = (tmp_path / "cache" / "traces").iterdir()
    written = _snapshot(entry)
    _drop_rows(entry, "trace", "details.parquet")
    assert _doc(src) == clean
    assert _same(_snapshot(entry), written)


def test_a_file_rewritten_with_the_same_size_and_mtime_is_read_afresh(tmp_path, monkeypatch):
    """A copy tool that keeps size and mtime (or an edit within the mtime's resolution) must not be served the old
    groups: the key also hashes the file's ends."""
    f = tmp_path / "kernel_details.csv"
    shutil.copy(QWEN3 / "rank_0_ascend_pt" / KD, f)
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel_pass, "CACHE_BYTES", 0)
    before = profan.analyze(f).breakdown["time_us"].sum()
    st = f.stat()
    header, *lines = f.read_text().splitlines(keepends=True)
    cells = lines[-1].split(",")
    idx = header.split(",").index("Duration(us)")
    old = cells[idx]
    cells[idx] = ("1" if old[0] != "1" else "2") + old[1:]  # same length: the size does not change
    lines[-1] = ",".join(cells)
    f.write_text(header + "".join(lines))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    after = profan.analyze(f).breakdown["time_us"].sum()
    _, rows = raw_rows(f)
    assert after == pytest.approx(sum(fnum(r["Duration(us)"]) for r in rows.values()), rel=1e-12)
    assert after - before == pytest.approx(fnum(cells[idx]) - fnum(old), abs=1e-6)


# ------------------------------------------------------------------------------------------ 2. control characters


def _visible(text: str) -> str:
    return "".join("\\r" if c == "\r" else f"\\x{ord(c):02x}" if c in CONTROLS else c for c in text)


def _trace_with_name(tmp_path, new: str) -> tuple[list[int], float]:
    """The NCCL sample with its broadcast kernels renamed; their event indexes and summed duration."""
    doc = json.loads(gzip.decompress((NCCL / "nccl_data.json.gz").read_bytes()))
    hit = [
        i
        for i, e in enumerate(doc["traceEvents"])
        if e.get("cat") == "kernel" and e.get("name", "").startswith("ncclKernel_Broadcast_RING_LL_Sum_int8_t(")
    ]
    assert len(hit) == 6
    for i in hit:
        doc["traceEvents"][i]["name"] = new
    (tmp_path / "nccl_data.json").write_text(json.dumps(doc))
    return hit, sum(doc["traceEvents"][i]["dur"] for i in hit)


def _check_rendered(out, fmt: str, new: str, time_us: float, calls: int) -> None:
    if fmt == "json":
        top = [k for k in json.loads(out.read_text())["tables"]["top_kernels"] if new in (k["op"], k["name"])]
        assert sum(k["count"] for k in top) == calls
        assert sum(k["time_us"] for k in top) == pytest.approx(time_us, rel=1e-9)
    elif fmt == "xlsx":
        cells = [
            v
            for ws in openpyxl.load_workbook(out)
            for row in ws.iter_rows(values_only=True)
            for v in row
            if isinstance(v, str)
        ]
        assert _visible(new) in cells
        assert not any(c in v for v in cells for c in CONTROLS)
    else:
        text = out.read_bytes().decode("utf-8")
        assert not any(c in text for c in CONTROLS), [c for c in CONTROLS if c in text]
        assert _visible(new) in (html.unescape(text) if fmt == "html" else text)


@pytest.mark.parametrize("fmt", ["md", "json", "html", "xlsx"])
def test_control_characters_in_trace_kernel_names_are_shown_as_escapes(tmp_path, fmt):
    """Every control character a kernel name may carry — CR, NUL, ESC, VT, FF — written in every format: the same
    visible escape in Markdown, HTML and Excel (no raw ESC sequence for a terminal, nothing XML refuses), the exact
    name in JSON."""
    new = "ncclKernel_Broadcast\r\x00\x1b[31m\x0b\x0c_int8_t"
    hit, total = _trace_with_name(tmp_path, new)
    out = tmp_path / f"r.{fmt}"
    res = run_cli("analyze", str(tmp_path), "-f", fmt, "-o", str(out), "-q")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    _check_rendered(out, fmt, new, total, len(hit))


@pytest.mark.parametrize("fmt", ["md", "json", "html", "xlsx"])
def test_control_characters_in_kernel_details_names_are_shown_as_escapes(tmp_path, fmt):
    rank = one_rank(tmp_path)
    new = "Flash\x00Att\x1b[31mention\x0bScore\x0c"
    total = _set_op(rank / KD, "FlashAttentionScore", new)
    out = tmp_path / f"r.{fmt}"
    res = run_cli("analyze", str(tmp_path), "-f", fmt, "-o", str(out), "-q")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    _check_rendered(out, fmt, new, total, 28)


@pytest.mark.parametrize("fmt", ["html", "xlsx"])
def test_a_cr_in_a_kernel_details_name_is_never_an_internal_error(tmp_path, fmt):
    """A bare CR inside a name: read (and shown as an escape) or refused in one line — the formats that read cited
    rows back must not fail on it either."""
    rank = one_rank(tmp_path)
    _set_op(rank / KD, "FlashAttentionScore", "Flash\rAttentionScore")
    out = tmp_path / f"r.{fmt}"
    res = run_cli("analyze", str(tmp_path), "-f", fmt, "-o", str(out), "-q")
    if res.returncode == 2:
        assert_one_line_error(res, "kernel_details.csv")
    else:
        assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
        _check_rendered(out, fmt, "Flash\rAttentionScore", 0.0, 0)


# ------------------------------------------------------------------------------------------ 3. Markdown syntax

EVIL = (
    "![x](http://evil/p.png)[click](javascript:alert(1))<img src=x onerror=alert(1)>`tick`|pipe|"
    "<b>bold</b><http://auto.link>www.evil.example\\[esc]"
)


def _outside_code(md: str) -> str:
    """The Markdown with its code spans removed (inside one nothing is interpreted); escaped backticks open none."""
    return re.sub(r"(?<![`\\])(`+)(?!`).*?(?<!`)\1(?!`)", "", md)


def _unescape(md: str) -> str:
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md))


def _assert_inert(md: str) -> None:
    """No image, link, autolink or HTML element can form outside code spans — but the report's own links between
    its ids (``[F3](#F3)``) and their anchors (``<a id="F3"></a>``) — and every table row has its header's number
    of cells (a ``|`` in a name ends none)."""
    out = _outside_code(md)
    assert "![" not in out and "<img" not in out and "<b>" not in out and "<http" not in out
    own = re.compile(r"(?<!\\)\[([CF][0-9.]+)\]\(#\1\)|\[Findings\]\(#findings\)")
    assert not re.search(r"(?<!\\)\]\(", own.sub("", out))  # no other link text closes into a destination
    anchors = re.compile(r'<a id="([A-Za-z0-9.-]+)"></a>')
    source = re.compile(r"^<!-- profan-source: [^<>\n]* -->$", re.M)  # the line naming the data (no `-` or `>` inside)
    assert "<" not in source.sub("", anchors.sub("", out))  # no element but those anchors and that line
    assert not re.search(r"(?<!\\):(?=//)", out) and "www.evil" not in out  # no bare-URL autolink
    for block in re.findall(r"(?m)^\|.*\|\n\|[-:|]+\|\n(?:\|.*\n?)*", md):
        head, _, *rows = block.strip("\n").split("\n")
        width = len(re.findall(r"(?<!\\)\|", head))
        assert all(len(re.findall(r"(?<!\\)\|", r)) == width for r in rows), (head, rows[:3])


def test_markdown_in_kernel_names_forms_no_link_image_or_html(tmp_path):
    rank = one_rank(tmp_path)
    total = _set_op(rank / KD, "FlashAttentionScore", EVIL)
    md = tmp_path / "r.md"
    assert run_cli("analyze", str(tmp_path), "-f", "md", "-o", str(md), "-q").returncode in (0, 1)
    text = md.read_text()
    _assert_inert(text)
    # the name is still there to read: in the finding's title (escaped), in the action of the cause it is the
    # source of, and in the top-kernels table (a code span)
    titles = [ln for ln in text.splitlines() if ln.startswith("#### ") and "scalar-bound" in ln]
    assert len(titles) == 1 and EVIL in _unescape(titles[0])
    verdict = text[: text.index("## What was read")]
    actions = [ln for ln in verdict.splitlines() if ln.startswith("- **Action:**") and "tick" in ln]
    assert len(actions) == 1 and f"Kernels: {EVIL}" in _unescape(actions[0])
    row = next(ln for ln in text.splitlines() if ln.startswith("| 0 | 13 | other |") and "tick" in ln)
    assert EVIL.replace("|", "\\|") in row and "| 28 |" in row and f"| {total / 1000:,.2f} |" in row


def test_markdown_in_kernel_names_forms_nothing_in_compare_markdown(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    one_rank(a)
    total = _set_op(one_rank(b) / KD, "FlashAttentionScore", EVIL)
    res = run_cli("compare", str(a), str(b), "-q")
    assert res.returncode in (0, 1), res.stderr
    _assert_inert(res.stdout)
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("| ``") and "tick" in ln]
    assert len(rows) == 1 and EVIL.replace("|", "\\|") in rows[0] and "| new |" in rows[0]
    assert f"| {total / 1000:,.2f} |" in rows[0]
    assert any(EVIL in _unescape(ln) for ln in res.stdout.splitlines() if ln.startswith("Kernels only in B"))


# ------------------------------------------------------------------------------------------ 4-5. compare


def _two_copies(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    return one_rank(a), one_rank(b)


def test_compare_with_one_renamed_kernel_row_shows_it_on_one_side(tmp_path):
    """A's first row (a ZerosLike whose name runs on both sides with other shapes) renamed: the renamed kernel is
    only in A and the original only in B, each with that row's duration — not an internal error."""
    ra, _ = _two_copies(tmp_path)
    _, rows = raw_rows(ra / KD)
    first = rows[2]
    assert first["Name"] == "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike"
    text = (ra / KD).read_text()
    (ra / KD).write_text(text.replace(",aclnnInplaceZero_ZerosLike", ",renamed_ZerosLike", 1))
    out = tmp_path / "cmp.json"
    res = run_cli("compare", str(tmp_path / "A"), str(tmp_path / "B"), "-f", "json", "-o", str(out), "-q")
    assert res.returncode in (0, 1), res.stderr
    kernels = json.loads(out.read_text())["tables"]["compare_kernels"]
    moved = {k["name"]: k for k in kernels if k["status"] != "both"}
    dur = fnum(first["Duration(us)"])
    assert set(moved) == {"renamed_ZerosLikeAiCore_ZerosLike", first["Name"]}
    gone, back = moved["renamed_ZerosLikeAiCore_ZerosLike"], moved[first["Name"]]
    assert (gone["status"], gone["a_time_us"], gone["b_time_us"], gone["a_locs"]) == ("missing", dur, 0.0, [2])
    assert (back["status"], back["a_time_us"], back["b_time_us"], back["b_locs"]) == ("new", 0.0, dur, [2])
    assert gone["op"] == back["op"] == "ZerosLike"


def test_compare_says_which_step_has_device_work_on_one_side_only(tmp_path):
    """A's last 100 kernel rows moved to step 14, which B does not have: the comparison covers step 13 and says
    that A's step 14 — its time from the CSV — is left out."""
    ra, _ = _two_copies(tmp_path)
    header, *lines = (ra / KD).read_text().splitlines(keepends=True)
    lines[-100:] = ["14" + ln[2:] for ln in lines[-100:]]
    assert all(ln.startswith("13,") for ln in lines[:-100])
    (ra / KD).write_text(header + "".join(lines))
    _, rows = raw_rows(ra / KD)
    moved_ms = sum(fnum(r["Duration(us)"]) for r in rows.values() if r["Step Id"] == "14") / 1000
    out = tmp_path / "cmp.json"
    res = run_cli("compare", str(tmp_path / "A"), str(tmp_path / "B"), "-f", "json", "-o", str(out), "-q")
    assert res.returncode in (0, 1), res.stderr
    doc = json.loads(out.read_text())
    assert doc["source"]["a"]["steps"] == [13] and doc["source"]["b"]["steps"] == [13]
    said = [w for w in doc["warnings"] if "step 14 of A" in w]
    assert len(said) == 1 and "no counterpart in B" in said[0] and "left out" in said[0]
    assert f"{moved_ms:,.2f} ms" in said[0] or f"{moved_ms:.1f} ms" in said[0], said[0]
    assert not [w for w in doc["warnings"] if "of B" in w]
