"""The text of a chrome-trace JSON file and its event array cut into chunks: what `profan.sources.trace.chrome`
parses into columns.

Why a module of its own: getting the bytes safely and cutting them is format work no column cares about. A
``.gz`` inflates only within ``max_inflated_bytes`` and ``max_inflate_ratio`` (`profan.rulepack.limits`), whatever
its trailer claims; a plain file is read once into one buffer with its line breaks flattened (so any run of events
can become NDJSON) or, from `MAP_FROM` bytes, mapped into memory, its pages handed back once split. msgspec
validates the document and then splits the event array into raw byte spans about `CHUNK_BYTES` at a time,
without a Python object per event (``list[msgspec.Raw]``).
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from profan.model.errors import ProfanInputError
from profan.model.files import open_regular
from profan.rulepack import limits

CHUNK_BYTES = 8 << 20  # event-array text per chunk: bounds the per-chunk spans, NDJSON copy and parse
BLOCK = 16 << 20  # read/decompress block
MAP_FROM = 64 << 20  # an uncompressed trace from this size is mapped, not read into a buffer of its own
_FLATTEN = bytes.maketrans(b"\r\n", b"  ")  # raw line breaks are only whitespace in valid JSON


class _Top(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"null")  # the whole array as one span: validated, not yet split
    distributedInfo: msgspec.Raw = msgspec.Raw(b"null")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"null")
    schemaVersion: msgspec.Raw = msgspec.Raw(b"null")
    traceName: msgspec.Raw = msgspec.Raw(b"null")


_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
_OBJECT = msgspec.json.Decoder(_Top)


def _gzip_size_hint(handle) -> int:
    """Uncompressed size from the gzip trailer (exact below 4 GiB, a hint above; anything at all in a cut-off or
    crafted file)."""
    handle.seek(-4, 2)
    size = int.from_bytes(handle.read(4), "little")
    handle.seek(0)
    return size


PREALLOC_RATIO = 32  # a .gz buffer starts at most this many times the file size: real traces inflate 13-25x
RATIO_FROM = 64 << 20  # `max_inflate_ratio` applies once the output passes this many bytes


@dataclass
class _Inflation:
    """The bounds a .gz is decompressed under: ``max_inflated_bytes`` in all, and past `RATIO_FROM` of output
    ``max_inflate_ratio`` times the compressed bytes read so far (``raw``'s position). Checked after every block,
    so a decompression bomb is stopped within a block of `RATIO_FROM`, while its output is still small: the
    ratio of the whole file on disk would let a 15 MB bomb inflate to 1.5 GB before it is refused."""

    path: Path
    disk: int  # the file's size on disk
    raw: Any = None  # the compressed file being read: its position is the compressed bytes consumed

    def __post_init__(self) -> None:
        lim = limits.active()
        self.most, self.ratio = lim.max_inflated_bytes, lim.max_inflate_ratio
        self.cap = min(self.most, max(RATIO_FROM, self.ratio * self.disk))  # the most output `check` lets pass
        self.planned = 0  # the buffer `first_size` chose; allocated only once the ratio has been seen to hold

    def first_size(self, hint: int) -> int:
        """The buffer to start with: the trailer's size only as far as the compressed size makes it plausible
        (a crafted trailer claims 4 GiB for a few hundred bytes), never past the bounds, and no more than
        `RATIO_FROM` and a block until the output has shown a plausible ratio (`grown`)."""
        self.planned = min(hint, self.disk * PREALLOC_RATIO, self.cap + 1)
        return min(self.planned, RATIO_FROM + BLOCK)

    def grown(self, have: int, more: int) -> int:
        """How much to add to a full buffer of ``have`` bytes: up to the planned size at once, else ``more``,
        never past what the bounds let through (then `check` raises)."""
        want = self.planned - have if self.planned > have else more
        return max(1, min(want, self.cap + 1 - have))

    def check(self, n: int) -> None:
        fix = "; if the trace is real, raise it under [limits] in a rules file (--rules FILE)"
        if n > self.most:
            raise ProfanInputError(
                self.path, f"decompresses to more than {self.most:,} bytes, the bound max_inflated_bytes{fix}"
            )
        if n <= RATIO_FROM:
            return
        if n > self.ratio * self.disk:
            raise ProfanInputError(
                self.path,
                f"decompresses to more than {self.ratio} times its {self.disk:,} "
                f"bytes on disk (max_inflate_ratio), as a decompression bomb does"
                f"{fix}",
            )
        done = self.raw.tell() if self.raw is not None else self.disk
        if n > self.ratio * max(done, 1):
            raise ProfanInputError(
                self.path,
                f"decompresses to more than {self.ratio} times the {done:,} compressed bytes read so far "
                f"(max_inflate_ratio), as a decompression bomb does{fix}",
            )


def read_bytes(path: Path) -> bytearray:
    """The file's JSON text in one buffer, line breaks flattened to spaces; ``.gz`` is decompressed under the
    bounds of `_Inflation`.

    Filled block by block into one buffer sized up front, so peak memory is the text size plus one block (plus
    the growth of a .gz that inflates more than its trailer or `_Inflation.first_size` allows for).
    """
    try:
        with open_regular(path) as handle:
            gz = path.name.endswith(".gz")
            if gz and handle.read(2) != b"\x1f\x8b":
                raise ProfanInputError(path, "named .gz but is not gzip-compressed (no gzip header)")
            disk = os.fstat(handle.fileno()).st_size
            limits.check_size(path, disk, "max_trace_bytes", "a trace")
            if not gz:
                return _fill(handle, disk)
            bound = _Inflation(path, disk, handle)
            size = bound.first_size(_gzip_size_hint(handle))
            try:
                return _fill(gzip.GzipFile(fileobj=handle), size, bound)
            except EOFError:
                raise ProfanInputError(path, "gzip stream is truncated (file cut off)") from None
            except (zlib.error, gzip.BadGzipFile) as exc:
                raise ProfanInputError(path, f"corrupt gzip data: {exc}") from None
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None


def trace_text(path: Path) -> bytearray | mmap.mmap:
    """The trace's JSON text: `read_bytes`, or for an uncompressed regular file from `MAP_FROM` bytes the file
    mapped read-only. A mapped file costs no copy, and the pages already split are handed back as the parse goes
    (`_release`), where a buffer would hold the whole file to the end. Its line breaks are not flattened; every
    piece cut from it is (`_exact_chunk`, `split_events`)."""
    if path.name.endswith(".gz"):
        return read_bytes(path)
    try:
        with open_regular(path) as handle:
            st = os.fstat(handle.fileno())
            if st.st_size < max(MAP_FROM, 1) or not stat.S_ISREG(st.st_mode):
                return read_bytes(path)
            limits.check_size(path, st.st_size, "max_trace_bytes", "a trace")
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    mapped.madvise(mmap.MADV_SEQUENTIAL)
    return mapped


def _release(text: bytearray | mmap.mmap | None, upto: int) -> None:
    """Hand back the mapped pages before ``upto`` (the process stops counting them; the page cache keeps them)."""
    if isinstance(text, mmap.mmap) and upto >= mmap.PAGESIZE:
        text.madvise(mmap.MADV_DONTNEED, 0, upto - upto % mmap.PAGESIZE)


def _flat(piece: bytes) -> bytes:
    """A piece of mapped text with its raw line breaks as spaces (a read buffer has them flattened already)."""
    return piece.translate(_FLATTEN) if piece.find(b"\n") != -1 or piece.find(b"\r") != -1 else piece


def _zeros(count: int) -> mmap.mmap:
    """``count`` zero bytes to extend a buffer with, from pages never written (the kernel's zero page): unlike
    ``bytes(count)`` they cost no memory of their own while the buffer copies them."""
    return mmap.mmap(-1, max(count, 1))


def _fill(src, size: int, bound: _Inflation | None = None) -> bytearray:
    buf = bytearray(max(size, 1) + 1)
    n = 0
    while True:
        if n == len(buf):  # grown by half, but never past what the bounds let through (then `check` raises)
            more = len(buf) // 2 + BLOCK
            buf.extend(_zeros(more if bound is None else bound.grown(n, more)))
        with memoryview(buf) as handle:
            k = src.readinto(handle[n : n + BLOCK])
            if not k:
                break
            if buf.find(b"\n", n, n + k) != -1 or buf.find(b"\r", n, n + k) != -1:
                handle[n : n + k] = bytes(handle[n : n + k]).translate(_FLATTEN)
        n += k
        if bound is not None:
            bound.check(n)
    del buf[n:]
    return buf


_NON_WS = re.compile(rb"[^ \t\r\n]")


def _first_index(buf: bytes | bytearray | mmap.mmap) -> int:
    """Index of the first character that is not whitespace or a UTF-8 byte-order mark (-1 when there is none)."""
    start = 3 if buf[:3] == b"\xef\xbb\xbf" else 0
    match = _NON_WS.search(buf, start)
    return -1 if match is None else match.start()


def _last_index(buf: bytes | bytearray | mmap.mmap, first: int) -> int:
    """Index of the last character from ``first`` on that is not whitespace (``first`` itself is not), found a
    block at a time: a file padded with a GB of blanks costs a few scans, not a Python step per byte."""
    end = len(buf)
    while end > first + 1:
        lo = max(first + 1, end - BLOCK)
        kept = len(bytes(buf[lo:end]).rstrip(b" \t\r\n"))
        if kept:
            return lo + kept - 1
        end = lo
    return first


def _raw_json(raw: msgspec.Raw) -> Any:
    try:
        return json.loads(bytes(raw)) if bytes(raw) != b"null" else None
    except ValueError:
        return None


_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def _decode_error(path: Path, exc: msgspec.DecodeError, array_byte: int | None = None) -> ProfanInputError:
    """The one line for JSON msgspec refused; ``array_byte``: where in the event array, for an error found in a
    piece of it (msgspec's own byte counts from the piece's start)."""
    msg = str(exc)
    if "truncated" in msg:
        return ProfanInputError(path, "JSON is truncated (the file ends mid-document)")
    if array_byte is not None:
        msg = _ERROR_BYTE.sub(f"(byte {array_byte} of the traceEvents array)", msg)
    return ProfanInputError(path, f"invalid JSON trace: {msg}")


def split_events(path: Path, buf: bytes | bytearray | mmap.mmap) -> tuple[memoryview, str, dict[str, Any]]:
    """The event array's text (a zero-copy view from '[' to ']'), the layout, and the small top-level fields.

    For a ``{"traceEvents": …}`` document msgspec validates the whole document once while keeping the array as one
    raw span; a bare array is validated piece by piece in ``event_chunks``.
    """
    i = _first_index(buf)
    if i < 0:
        raise ProfanInputError(path, "empty file: no trace events")
    first = buf[i : i + 1]
    if first == b"[":
        j = _last_index(buf, i)
        if buf[j : j + 1] != b"]":
            raise ProfanInputError(path, "JSON is truncated (the event array is not closed)")
        return memoryview(buf)[i : j + 1], "array", {}
    if first != b"{":
        raise ProfanInputError(path, "not JSON: a chrome trace starts with '{' or '['")
    quick = _locate_events(buf, i)
    if quick is not None:
        return quick
    try:
        top = _OBJECT.decode(buf if isinstance(buf, bytearray) else _flat(buf[:]))
    except msgspec.DecodeError as exc:
        raise _decode_error(path, exc) from None
    except msgspec.ValidationError as exc:
        raise ProfanInputError(path, f"not a chrome trace: {exc}") from None
    arr = memoryview(top.traceEvents)
    if bytes(arr[:1]) != b"[":
        raise ProfanInputError(path, "JSON object has no 'traceEvents' array: not a chrome trace")
    meta = {
        k: v
        for k in ("distributedInfo", "deviceProperties", "schemaVersion", "traceName")
        if (v := _raw_json(getattr(top, k))) is not None
    }
    return arr, "object", meta


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_TAIL = 1 << 16  # a top-level tail after traceEvents (traceName, …) is small


def _locate_events(buf: bytes | bytearray | mmap.mmap, start: int) -> tuple[memoryview, str, dict[str, Any]] | None:
    """Find the traceEvents array without a pass over it: the text before it must decode as the start of the
    top-level object and the text after its closing ']' as the rest of it (then the key is at depth 1, not
    inside a string or a nested value), and ``event_chunks`` validates the array itself. None when unsure: the
    caller then validates the whole document."""
    match = _EVENTS_KEY.search(buf, start, start + (1 << 24))
    if match is None:
        return None
    try:
        head = _OBJECT.decode(_flat(bytes(buf[start : match.start()])) + b'"traceEvents": null}')
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    end = len(buf)
    tail_from = max(match.end(), end - _TAIL)
    j = end
    while True:
        j = buf.rfind(b"]", tail_from, j)
        if j < 0:
            return None
        try:
            tail = _OBJECT.decode(b'{"traceEvents": null' + _flat(bytes(buf[j + 1 : end])))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if _closes_array(buf, match.end() - 1, j):
            break
    meta = {}
    for k in ("distributedInfo", "deviceProperties", "schemaVersion", "traceName"):
        v = _raw_json(getattr(head, k))
        if v is None:
            v = _raw_json(getattr(tail, k))
        if v is not None:
            meta[k] = v
    return memoryview(buf)[match.end() - 1 : j + 1], "object", meta


def _closes_array(buf: bytes | bytearray | mmap.mmap, open_at: int, j: int) -> bool:
    """Whether the ']' at ``j`` closes the array opened at ``open_at``: the text from the last element separator
    before it (or from the '[' itself) to ``j`` must decode as the array's last element(s)."""
    lo = max(open_at, j - _TAIL)
    last = None
    for last in _SEP.finditer(buf, lo, j):  # noqa: B007 — only the last match is needed
        pass
    if last is not None:
        piece = b"[" + _flat(bytes(buf[last.end() - 1 : j + 1]))
    elif lo == open_at:
        piece = _flat(bytes(buf[open_at : j + 1]))
    else:
        return False
    try:
        _ARRAY.decode(piece)
        return True
    except msgspec.DecodeError:
        return False


_SEP = re.compile(rb"\}\s*,\s*\{")


def _array_end(arr: memoryview) -> int:
    hi = len(arr) - 1
    while hi > 1 and arr[hi] != ord("]"):
        hi -= 1
    return hi


def _exact_chunk(path: Path, arr: memoryview, pos: int, hi: int) -> tuple[list[msgspec.Raw], int]:
    """About ``CHUNK_BYTES`` of events from ``pos`` as NDJSON (one element per line), and where the next begins.

    A chunk ends at a ``}`` followed by ``,`` and ``{``. Such a spot can also lie inside a string or a nested value;
    then the piece is not a valid sequence of JSON values and msgspec refuses it at the cut or later, and the piece
    is extended past the next separator, by a step that doubles with each try (so a trace whose separators mostly
    lie inside values costs a few decodes of its text, not one per separator). A piece refused before its cut
    holds bad JSON: the text up to the cut is the file's own. So a piece that decodes is exactly a run of whole
    elements, and the pieces are the array. msgspec only records each element's byte span here
    (``list[msgspec.Raw]``): no Python object per event.
    """
    search, step = pos + CHUNK_BYTES, 0
    while True:
        m = _SEP.search(arr, search, hi) if search < hi else None
        cut, nxt = (m.start() + 1, m.end() - 1) if m is not None else (hi, hi)
        try:
            return _ARRAY.decode(_flat(b"[" + arr[pos:cut] + b"]")), nxt
        except msgspec.DecodeError as exc:
            at = _error_byte(exc)
            if m is None or (at is not None and at <= cut - pos):  # the piece's byte k is the array's pos + k - 1
                raise _decode_error(path, exc, None if at is None else pos + at - 1) from None
            search, step = m.end() + step, max(2 * step, 1 << 12)


def _error_byte(exc: msgspec.DecodeError) -> int | None:
    """Where in its input msgspec found bad JSON (None when the input was cut short)."""
    match = _ERROR_BYTE.search(str(exc))
    return None if match is None else int(match.group(1))


def event_chunks(path: Path, arr: memoryview, text: mmap.mmap | None = None) -> Iterator[list[msgspec.Raw]]:
    """The element spans of the event array, one chunk at a time, in order; ``text``, the mapped file ``arr`` is a
    view of, gets its pages handed back as they are split (`_release`: the array starts at or after the file's
    start, so what lies before a position in ``arr`` lies before the same offset in the file)."""
    pos, hi = 1, _array_end(arr)  # arr starts at '['
    while pos < hi:
        raws, nxt = _exact_chunk(path, arr, pos, hi)
        _release(text, nxt)
        if raws:
            yield raws
        pos = nxt
