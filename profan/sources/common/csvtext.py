"""Small helpers shared by the CSV readers: header sniffing, tolerant number parsing, physical line numbers."""

from __future__ import annotations

import csv
import functools
import io
import os
import re
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.files import check_regular, open_regular
from profan.rulepack import limits

NULL_TOKENS = ("", "N/A", "NA", "n/a", "null", "None")
_STRIP = ' \t\r\n"'


def read_header(path: Path) -> list[str]:
    """The header row of a CSV, each name without surrounding blanks (`header_cells`)."""
    return [c.strip() for c in header_cells(path)]


def header_cells(path: Path) -> list[str]:
    """The header row of a CSV as written, tolerant of a BOM, CRLF and a missing trailing newline. A first line
    longer than ``max_line_bytes`` is refused (`too_long`): no more than that much of it is read."""
    most = limits.active().max_line_bytes
    try:
        with open_regular(path) as handle:
            limits.check_size(path, os.fstat(handle.fileno()).st_size, "max_csv_bytes", "a CSV file")
            first = handle.readline(most + 1)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(first.rstrip(b"\r\n")) > most:
        raise ProfanInputError(path, too_long(1, most))
    if not first.strip():
        raise ProfanInputError(path, "empty file (no header row)")
    if first.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ProfanInputError(path, "encoded as UTF-16; profiler CSVs are UTF-8 (re-save the file as UTF-8)")
    text = first.decode("utf-8-sig", errors="replace").rstrip("\r\n")
    try:
        return next(csv.reader([text]))
    except csv.Error as exc:
        raise ProfanInputError(
            path, f"the header row cannot be read as CSV ({exc}); profiler CSVs end lines with LF or CRLF"
        ) from None


# terminal escape sequences (CSI, OSC, two-character), then any other C0/C1 control and the invisible
# direction and width marks that can make shown text lie about what it is
_CONTROL = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])?"
    r"|[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)
SHOWN_NAMES, NAME_CHARS = 12, 40


def shown_header(header: list[str]) -> str:
    """The header's first names as an error message may show them: a missing-column error says what the file
    holds instead, but its first line can be anything (a binary file, a log, a terminal escape sequence). So at
    most `SHOWN_NAMES` names, each cut to `NAME_CHARS`, with every control character or escape sequence replaced
    by one "?" (removed, yet seen: a name that looks like ``Step`` but is not is why Step is missing)."""
    names = []
    for name in header[:SHOWN_NAMES]:
        clean = _CONTROL.sub("?", name).strip()
        names.append(clean if len(clean) <= NAME_CHARS else clean[: NAME_CHARS - 1] + "…")
    more = f" and {len(header) - SHOWN_NAMES} more" if len(header) > SHOWN_NAMES else ""
    return f"the header has {len(header)} name(s): {', '.join(repr(n) for n in names)}{more}"


def missing_columns(path: Path, missing: list[str], header: list[str], known: Iterable[str]) -> ProfanInputError:
    """One line naming the file, every missing column, and what the header holds: its names (`shown_header`)
    when the file is recognisably this profiler file (a name of its own among them: ``known``, the reader's
    columns), else only how many. A file that shares no column may be anything the name was given to — a link
    to ``/etc/passwd`` named kernel_details.csv — and an error must not print its first line."""
    if {h.strip() for h in header} & set(known):
        return ProfanInputError(path, f"missing column(s) {', '.join(missing)}; {shown_header(header)}")
    return ProfanInputError(
        path,
        f"missing column(s) {', '.join(missing)}; its first line has {len(header)} field(s), none a column of this "
        "profiler file (not shown: it does not look like profiler output)",
    )


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
    """Number of physical lines (a last line without a newline counts), from the pass of `check_lines`: a file it
    refuses is refused here too."""
    return _line_pass(path)


def check_lines(path: Path) -> None:
    """Refuse, in one line, a CSV file that must not reach the CSV parser: a line longer than ``max_line_bytes``
    (polars must hold a line whole, and a 2 GiB one aborts the process inside it), or a carriage return not
    followed by a line feed inside the file — polars takes only LF (and CRLF) for a line end, so a lone CR would
    silently merge two rows into one, and the lines evidence cites would no longer be the rows read."""
    _line_pass(path)


def _line_pass(path: Path) -> int:
    most = limits.active().max_line_bytes
    try:
        st = os.stat(path)
        limits.check_size(path, st.st_size, "max_csv_bytes", "a CSV file")
        lines, problem = _count_lines(str(path), st.st_size, st.st_mtime_ns, most)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if problem is not None:
        raise ProfanInputError(path, problem)
    return lines


_LONE_CR = re.compile(rb"\r(?!\n)")
SMALL_COUNT_BYTES = 8 << 20  # files up to this size are read in one block (most files of a cluster)


@functools.lru_cache(maxsize=64)
def _count_lines(path: str, size: int, _mtime_ns: int, most: int) -> tuple[int, str | None]:
    """(physical lines, what `check_lines` refuses or None), in one streaming pass.

    Remembered per (path, size, mtime, bound): the kernel pass, the collectives and a drill-down all ask about
    the same big file, and a pass costs about 0.2 s per GB. One reused buffer, unbuffered reads: no allocation
    per block and no page-cache mapping of the whole file (a memory-mapped pass would hold the file's pages in
    this process's RSS). Newlines are counted by polars over a zero-copy Arrow view of each block (0.07 s per GB,
    where ``bytes.count`` takes 0.3 s); the first and last newline of a block (memchr) give the line running
    across blocks, and blocks are no longer than the bound, so a line inside one block is within it. A CR is
    looked at only in a block that has one (CRLF files: counted; a lone CR located by a regex)."""
    import pyarrow as pa

    buf = bytearray(max(1, min(size + 1 if size <= SMALL_COUNT_BYTES else 1 << 22, most)))
    view = pa.py_buffer(buf)
    n = 0
    pos = line_start = 0  # file offsets of buf[0] and of the current line's first byte
    last = 10
    with open_regular(path) as handle:
        while k := handle.readinto(buf):
            if last == 13 and buf[0] != 10:
                return n, _lone_cr(n + 1)
            block = pl.from_arrow(pa.Array.from_buffers(pa.uint8(), k, [None, view]))
            first = buf.find(b"\n", 0, k)
            if first >= 0:
                if pos + first - line_start > most:
                    return n, too_long(n + 1, most)
                n += int((block == 10).sum())
                line_start = pos + buf.rfind(b"\n", 0, k) + 1
            if pos + k - line_start > most:
                return n, too_long(n + 1, most)
            if buf.find(b"\r", 0, k) >= 0 and ((block == 13) & (block.shift(-1) != 10)).any():
                at = _LONE_CR.search(buf, 0, k).start()  # the last byte is never found: shift(-1) is null there
                return n, _lone_cr(n - buf.count(b"\n", at, k) + 1)
            last = buf[k - 1]
            pos += k
    return n + (0 if last == 10 else 1), None  # a CR that ends the file merges no rows: a cut CRLF line end


def too_long(line: int, most: int) -> str:
    return (
        f"line {line} is longer than {most:,} bytes (max_line_bytes): no row of a profiler CSV is; if the "
        "file is real, raise the bound under [limits] in a rules file (--rules FILE)"
    )


def _lone_cr(line: int) -> str:
    return (
        f"line {line} holds a carriage return (CR) not followed by a line feed: a line end the CSV reader "
        "does not take, which would merge two rows into one; profiler CSVs end lines with LF or CRLF "
        "(convert the file's line ends)"
    )


def record_start_lines(path: Path) -> list[int]:
    """Physical line (1-based) where each data record starts — the slow, exact path for files whose quoted
    fields contain line breaks. Record 0 is the first data row."""
    starts: list[int] = []
    with io.TextIOWrapper(open_regular(path), encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle)
        prev = 0
        for index, _row in enumerate(reader):
            if index > 0:
                starts.append(prev + 1)
            prev = reader.line_num
    return starts


def require_columns(path: Path, header: list[str], required: tuple[str, ...]) -> None:
    """One clear error naming the file and every missing column (`missing_columns`)."""
    missing = [c for c in required if c not in header]
    if missing:
        raise missing_columns(path, missing, header, required)


def scan_text_csv(
    path: Path, columns: list[str], floats: tuple[str, ...] = (), categorical: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """Lazy scan reading every column as text (types are decided by the readers, tolerantly).

    ``floats``: columns the CSV reader parses as numbers itself, ``N/A`` read as null — much cheaper than text on
    big files. Strict: any other cell that is not a plain number (``NA``, ``0.5 `` with a trailing blank, …)
    makes the scan raise, and the caller re-reads those columns as text with `num`; where it does not raise, the
    values equal `num`'s.

    ``categorical``: text columns read as Categorical — the same text, but grouping on them hashes a small
    integer instead of the string (kernel names repeat millions of times in a big file). Cast to String before
    any string operation.

    Every scan is preceded by `check_lines`: what polars cannot be given safely is refused first. Columns are named
    as `read_header` gives them: a header padded with blanks (`` Name ``) is read under its names without them.
    """
    check_lines(path)
    written = header_cells(path)
    padded = {w: w.strip() for w in written if w != w.strip() and w.strip() not in written}
    as_written = {value: key for key, value in padded.items()}
    overrides: dict[str, pl.DataType] = {
        **{as_written.get(c, c): pl.Categorical() for c in categorical},
        **{as_written.get(c, c): pl.Float64() for c in floats},
    }
    check_regular(path)  # polars opens it itself: a FIFO swapped in since the walk must not block it
    scan = pl.scan_csv(
        path,
        glob=False,  # the path as named: "run[1]" or "job_*" is a folder name, never a pattern over its neighbours
        infer_schema=False,
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
        quote_char='"',
        schema_overrides=overrides or None,
        null_values={as_written.get(c, c): "N/A" for c in floats} if floats else None,
    )
    return (scan.rename(padded) if padded else scan).select(columns)


def small_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Read a small CSV fully with exact line numbers: (header, [(line, cells), …]). For step/statistic files.
    `check_lines` first: the whole file is read, and the csv module would take a lone CR for a line end (then
    its line numbers are not the lines evidence cites)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # the open below says what is wrong
    limits.check_size(path, size, "max_side_file_bytes", "a CSV file read whole")
    check_lines(path)
    try:
        with io.TextIOWrapper(open_regular(path), encoding="utf-8-sig", errors="replace", newline="") as handle:
            data = handle.read()
    except OSError as exc:  # unreadable, or a folder of that name
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(data, newline=""))
    rows: list[tuple[int, list[str]]] = []
    header: list[str] = []
    prev = 0
    try:
        for index, row in enumerate(reader):
            start = prev + 1
            prev = reader.line_num
            if index == 0:
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
