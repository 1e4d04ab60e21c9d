"""Small helpers shared by the CSV readers: header sniffing, tolerant number parsing, physical line numbers."""

from __future__ import annotations

import csv
import functools
import io
import os
from pathlib import Path

import polars as pl

from profan.errors import ProfanInputError

NULL_TOKENS = ("", "N/A", "NA", "n/a", "null", "None")
_STRIP = " \t\r\n\""


def read_header(path: Path) -> list[str]:
    """The header row of a CSV, tolerant of a BOM, CRLF and a missing trailing newline."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not first.strip():
        raise ProfanInputError(path, "empty file (no header row)")
    if first.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ProfanInputError(path, "encoded as UTF-16; profiler CSVs are UTF-8 (re-save the file as UTF-8)")
    text = first.decode("utf-8-sig", errors="replace").rstrip("\r\n")
    try:
        return [c.strip() for c in next(csv.reader([text]))]
    except csv.Error as exc:
        raise ProfanInputError(path, f"the header row cannot be read as CSV ({exc}); profiler CSVs end lines with "
                                     "LF or CRLF") from None


def _stripped(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.String).str.strip_chars(_STRIP)


def num(col: str) -> pl.Expr:
    """Parse a numeric CSV text column: strip the TAB torch_npu appends to timestamps, quotes, CR; N/A -> null."""
    return _stripped(col).cast(pl.Float64, strict=False)


def is_bad_number(col: str) -> pl.Expr:
    """True where a cell holds text that is neither a number nor a null marker (so the row cannot be used).
    Built from the same sub-expressions as `num`, so a query computing both strips the text once."""
    raw = _stripped(col)
    return num(col).is_null() & raw.is_not_null() & ~raw.is_in(list(NULL_TOKENS))


def text(col: str) -> pl.Expr:
    """A text cell without surrounding blanks (a Categorical column is read as its text)."""
    return pl.col(col).cast(pl.String).str.strip_chars(" \t\r")


def count_lines(path: Path) -> int:
    """Number of physical lines (a last line without a newline counts).

    Remembered per (path, size, mtime): several readers verify the same big file, and counting a GB costs about
    half a CPU-second."""
    st = os.stat(path)
    return _count_lines(str(path), st.st_size, st.st_mtime_ns)


SMALL_COUNT_BYTES = 8 << 20  # files up to this size are counted in one read: no buffer, no Arrow view


@functools.lru_cache(maxsize=64)
def _count_lines(path: str, size: int, _mtime_ns: int) -> int:
    if size <= SMALL_COUNT_BYTES:  # most files of a cluster: a read and bytes.count beat setting up the blocks
        with open(path, "rb") as fh:
            data = fh.read()
        return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    # One reused buffer, unbuffered reads: no allocation per block and no page-cache mapping of the whole file (a
    # memory-mapped count would hold the file's pages in this process's RSS). The newlines of each block are
    # counted by polars over a zero-copy Arrow view of the buffer: 0.1 s per GB, where bytes.count takes 0.45 s —
    # and the count runs beside the kernel pass, competing for the same cores.
    import pyarrow as pa

    buf = bytearray(1 << 22)
    view = pa.py_buffer(buf)
    n, last = 0, 10
    with open(path, "rb", buffering=0) as fh:
        while k := fh.readinto(buf):
            block = pl.from_arrow(pa.Array.from_buffers(pa.uint8(), k, [None, view]))
            n += int((block == 10).sum())
            last = buf[k - 1]
    return n + (0 if last == 10 else 1)


def record_start_lines(path: Path) -> list[int]:
    """Physical line (1-based) where each data record starts — the slow, exact path for files whose quoted
    fields contain line breaks. Record 0 is the first data row."""
    starts: list[int] = []
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        prev = 0
        for i, _row in enumerate(reader):
            if i > 0:
                starts.append(prev + 1)
            prev = reader.line_num
    return starts


def require_columns(path: Path, header: list[str], required: tuple[str, ...]) -> None:
    """One clear error naming the file and every missing column."""
    missing = [c for c in required if c not in header]
    if missing:
        raise ProfanInputError(path, f"missing column(s) {', '.join(missing)}")


def scan_text_csv(path: Path, columns: list[str], floats: tuple[str, ...] = (),
                  categorical: tuple[str, ...] = ()) -> pl.LazyFrame:
    """Lazy scan reading every column as text (types are decided by the readers, tolerantly).

    ``floats``: columns the CSV reader parses as numbers itself, ``N/A`` read as null — much cheaper than text on
    big files. Strict: any other cell that is not a plain number (``NA``, ``0.5 `` with a trailing blank, …)
    makes the scan raise, and the caller re-reads those columns as text with `num`; where it does not raise, the
    values equal `num`'s.

    ``categorical``: text columns read as Categorical — the same text, but grouping on them hashes a small
    integer instead of the string (kernel names repeat millions of times in a big file). Cast to String before
    any string operation.
    """
    overrides: dict[str, pl.DataType] = {**dict.fromkeys(categorical, pl.Categorical()),
                                         **dict.fromkeys(floats, pl.Float64())}
    return pl.scan_csv(path, infer_schema=False, truncate_ragged_lines=True, encoding="utf8-lossy",
                       quote_char='"', schema_overrides=overrides or None,
                       null_values=dict.fromkeys(floats, "N/A") if floats else None).select(columns)


def small_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Read a small CSV fully with exact line numbers: (header, [(line, cells), …]). For step/statistic files."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
            data = fh.read()
    except OSError as exc:  # unreadable, or a folder of that name
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(data, newline=""))
    rows: list[tuple[int, list[str]]] = []
    header: list[str] = []
    prev = 0
    try:
        for i, row in enumerate(reader):
            start = prev + 1
            prev = reader.line_num
            if i == 0:
                header = [c.strip() for c in row]
                continue
            if not any(c.strip() for c in row):
                continue
            rows.append((start, [c.strip(" \t\r") for c in row]))
    except csv.Error as exc:  # a NUL byte (UTF-16, binary), a CR-only line end
        raise ProfanInputError(path, f"cannot be read as CSV (line {reader.line_num + 1}: {exc})") from None
    if not header:
        raise ProfanInputError(path, "empty file (no header row)")
    return header, rows
