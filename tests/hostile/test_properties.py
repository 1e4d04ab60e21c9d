"""Property tests (hypothesis) of the parts of profan that read numbers and cite rows.

(a) the kernel reader's duration parsing, against a reference parser that shares no code with profan;
(b) evidence locators: RFC 6901 pointers round-trip, ``read_lines`` returns exactly the physical lines asked
    for, an ``Evidence`` survives its JSON form;
(c) ``inside_root`` never accepts a cited path that escapes the analysed folder.

Each property runs at most 100 examples; the file takes a few seconds.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
from pathlib import Path

import pytest
from hostile_corpus import KD, QWEN_R0, csv_quote, ref_duration, set_cells
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import profan
from profan.model.evidence import Evidence, make_pointer
from profan.sources.common.readback import inside_root, read_lines, resolve_pointer

pytestmark = pytest.mark.slow  # large generated inputs or many examples: left out of the fast loop

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    database=None,  # no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow],
)

# ------------------------------------------------------------------------------------------ (a) durations

_HEADER, _ROW = (QWEN_R0 / KD).read_text(encoding="utf-8").splitlines(keepends=True)[:2]

SPECIAL = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "-0",
    "0",
    "1e309",
    "1e300",
    "-1e-300",
    " 12.5\t",
    "",
    "N/A",
    "NA",
    "null",
    "None",
    "-5",
    "+5",
    ".5",
    "5.",
    "1E3",
    "0001.5",
    "1_0",
    "0x10",
    "86400000000",
    "86400000000.5",
    "86400000001",
    "1e-320",
    "\t7",
    "abc",
    "12,5",
    '"8"',
]
# a CSV cell without line breaks or NUL (those are the hostile corpus's business: the reader may refuse the file)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=10)
CELLS = st.one_of(
    st.sampled_from(SPECIAL),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=0, max_value=1e7, allow_nan=False).map(lambda v: f"{v:.3f}"),
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    _TEXT,
)


@SETTINGS
@given(st.lists(CELLS, min_size=1, max_size=25))
@example([" 12.5\t", "nan", "inf", "-0", "1e309", "", "abc"])
@example(["1e300", "5"])
@example(["86400000001", "86400000000"])
def test_breakdown_sums_exactly_the_durations_the_reference_accepts(cells):
    """A kernel_details.csv of the real Qwen3 header and one real row repeated, whose Duration(us) cells are the
    drawn text: the breakdown total is the sum of the cells the reference accepts (a plain number, finite, 0 or
    more, at most one day — rules/limits.toml max_duration_us) and every other row is skipped and counted."""
    accepted = [v for v in map(ref_duration, cells) if v is not None]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel_details.csv"
        path.write_text(_HEADER + "".join(set_cells(_ROW, {10: c}) for c in cells), encoding="utf-8", newline="")
        report = profan.analyze(d)
    total = float(report.breakdown["time_us"].sum()) if not report.breakdown.is_empty() else 0.0
    skipped = report.source["ranks"][0]["rows_skipped"].get("kernel_details", 0)
    assert skipped == len(cells) - len(accepted), (cells, skipped)
    assert abs(total - sum(accepted)) <= 1e-9 * max(1.0, abs(sum(accepted))), (cells, total, sum(accepted))


def test_the_cells_are_written_as_drawn():
    """The property's file holds the drawn text in Duration(us) (the helper quotes what needs quoting)."""
    import csv
    import io

    cells = [" 12.5\t", "12,5", '"8"', "nan"]
    text = _HEADER + "".join(set_cells(_ROW, {10: c}) for c in cells)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    idx = rows[0].index("Duration(us)")
    assert [r[idx] for r in rows[1:]] == cells
    assert csv_quote("a,b") == '"a,b"'


# ------------------------------------------------------------------------------------------ (b) evidence

TOKENS = st.lists(st.sampled_from(["a", "b", "/", "~", "0", "1", "~0", "~1", "é", " "]), max_size=4).map("".join)


@SETTINGS
@given(st.lists(TOKENS, min_size=1, max_size=6))
@example(["a/b", "~1", "~"])
@example([""])
@example(["", "a"])
def test_pointer_round_trip(tokens):
    """make_pointer escapes '~' and '/'; resolve_pointer finds the same value again (RFC 6901), for any keys —
    the empty key included (the pointer "/" is the key "" of the root, not the root)."""
    doc: dict = {}
    node = doc
    for t in tokens[:-1]:
        node = node.setdefault(t, {})
    node[tokens[-1]] = "LEAF"
    assert resolve_pointer(doc, make_pointer(*tokens)) == "LEAF", make_pointer(*tokens)


@SETTINGS
@given(st.lists(st.one_of(TOKENS.filter(bool), st.integers(min_value=0, max_value=3)), min_size=1, max_size=5))
def test_pointer_round_trip_through_lists(path):
    """Integer tokens index arrays: build the document the path walks, then resolve its pointer (non-empty keys:
    the empty key is `test_pointer_round_trip`'s)."""

    def build(rest):
        if not rest:
            return "LEAF"
        head, tail = rest[0], rest[1:]
        if isinstance(head, int):
            return [None] * head + [build(tail)]
        node = {"other": 1}
        node[head] = build(tail)
        return node

    assert resolve_pointer(build(path), make_pointer(*path)) == "LEAF"


LINE_BYTES = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b""))
LINE_ENDS = st.sampled_from([b"\n", b"\r\n"])


@SETTINGS
@given(st.lists(st.tuples(LINE_BYTES, LINE_ENDS), min_size=1, max_size=30), st.booleans(), st.data())
@example([(b"a,b\r", b"\r\n")], False, None)
def test_read_lines_returns_exactly_the_requested_physical_lines(lines, last_unterminated, data):
    """A file of mixed content (any bytes but LF: CR inside a line, invalid UTF-8, NUL, commas, quotes), lines
    ended by LF or CRLF, the last one maybe by nothing: read_lines gives each wanted line's text without its
    terminator (exactly one LF or CRLF), decoded as UTF-8 with replacement, and nothing for lines past the end."""
    raw = b"".join(content + end for content, end in lines)
    if last_unterminated:
        raw = raw[: -len(lines[-1][1])]
    expected_lines = _reference_lines(raw)
    n = len(expected_lines)
    wanted = (
        data.draw(st.sets(st.integers(min_value=1, max_value=n + 3), max_size=8), label="wanted")
        if data is not None
        else {1}
    )
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.csv"
        path.write_bytes(raw)
        got = read_lines(path, wanted)
    assert got == {i: expected_lines[i - 1] for i in wanted if i <= n}


def _reference_lines(raw: bytes) -> list[str]:
    """Physical lines: split at LF; each line loses exactly one terminator (LF, CRLF, or a lone CR at the end of
    the file); the rest is content, decoded as UTF-8 with replacement. An empty file has no line."""
    if not raw:
        return []
    parts = raw.split(b"\n")
    ended = raw.endswith(b"\n")
    if ended:
        parts.pop()
    out = []
    for p in parts:
        if p.endswith(b"\r"):
            p = p[:-1]
        out.append(p.decode("utf-8", "replace"))
    return out


JSONABLE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def evidences(draw):
    kind = draw(st.sampled_from(["lines", "events", "pointers"]))
    if kind == "pointers":
        locs = tuple(draw(st.lists(TOKENS.map(lambda t: make_pointer(t)), min_size=1, max_size=5)))
    else:
        locs = tuple(
            draw(st.lists(st.integers(min_value=1 if kind == "lines" else 0, max_value=10**9), min_size=1, max_size=5))
        )
    return Evidence(
        file=draw(st.text(min_size=1, max_size=20)),
        row_count=len(locs) + draw(st.integers(0, 10**6)),
        select=draw(st.dictionaries(st.text(max_size=5), JSONABLE, max_size=4)),
        **{kind: locs},
        note=draw(st.text(max_size=10)),
        values=draw(st.dictionaries(st.text(max_size=5), JSONABLE, max_size=3)),
    )


@SETTINGS
@given(evidences())
def test_evidence_survives_its_dict_and_its_json(ev):
    assert Evidence.from_dict(ev.to_dict()) == ev
    assert Evidence.from_dict(json.loads(json.dumps(ev.to_dict()))) == ev


# ------------------------------------------------------------------------------------------ (c) inside_root

SEGMENTS = st.lists(st.sampled_from(["..", ".", "a", "/", "//"]), max_size=10)


def _escapes(rel: str) -> bool:
    """The reference: where ``rel`` lands when joined to a root folder, by string arithmetic alone."""
    root = "/data/root"
    landed = posixpath.normpath(posixpath.join(root, rel))
    return not (landed == root or landed.startswith(root + "/"))


@SETTINGS
@given(SEGMENTS, st.sampled_from(["/", ""]))
@example(["..", "a"], "/")
@example(["/", "..", "etc"], "")
@example(["a", "..", "..", "a"], "/")
def test_inside_root_never_accepts_a_path_that_escapes(segments, sep):
    """Paths made of '..', '.', 'a', '/' and '//' (joined by '/' or glued together): whatever inside_root
    accepts stays inside the root once joined to it."""
    rel = sep.join(segments)
    if inside_root(rel):
        assert not _escapes(rel), rel
        # and the way read_back builds the path agrees
        built = os.path.normpath(os.path.join("/data/root", os.path.normpath(rel)))
        assert built == "/data/root" or built.startswith("/data/root/"), rel
