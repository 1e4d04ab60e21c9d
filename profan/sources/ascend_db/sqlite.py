"""SQLite access to torch_npu's DB export (`ascend_db.reader`): a read-only connection that writes nothing
beside the file, the schema read by name, quoted identifiers, queries fetched in bounded batches (or as Arrow
columns through the ADBC driver when it is installed), and ``STRING_IDS`` looked up for the distinct ids only.
A file that is no SQLite database, or lacks the tables the kernel rows need, is one line naming it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.files import open_regular
from profan.rulepack import limits

SQLITE_MAGIC = b"SQLite format 3\x00"


FETCH_ROWS = 1 << 18  # rows fetched per batch: memory holds one batch of Python tuples, never the table


KERNEL_TABLES = ("TASK", "COMPUTE_TASK_INFO", "STRING_IDS")


def is_sqlite(path: Path) -> bool:
    """Whether a file starts with SQLite's magic header (a report may cite any file; only a DB is read by SQL)."""
    try:
        return _head(path) == SQLITE_MAGIC
    except OSError:
        return False


def _head(path: Path) -> bytes:
    with open_regular(path) as handle:
        return handle.read(len(SQLITE_MAGIC))


@contextmanager
def read_errors(path: Path, what: str) -> Iterator[None]:
    """One line naming the file for what a read of it raises: SQLite's own errors, and the conversion errors of a
    value of another type than the export writes (SQLite keeps any value in any column: text or a real where the
    export writes integers). ``what``: the part of the file being read, for the line."""
    try:
        yield
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"{what} cannot be read ({exc})") from None
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ProfanInputError(path, f"{what} holds a value of another type than the export writes ({first})") from None


SIDE_FILES = ("-wal", "-journal")  # what SQLite keeps beside a database it has not finished writing


def side_files(path: Path) -> list[Path]:
    """The ``-wal`` / ``-journal`` files beside a database: committed rows not yet in the file (a WAL), or a
    transaction to roll back (a hot journal). ``immutable`` would read the file as if they were not there."""
    return [Path(f"{path}{s}") for s in SIDE_FILES if os.path.lexists(f"{path}{s}")]


_copies: dict[tuple, Path] = {}


def readable(path: Path) -> Path:
    """The file to open for ``path``: itself, or where a ``-wal`` or ``-journal`` lies beside it, a private copy
    with that file applied (the database's true content; SQLite writes only in the copy, never beside the
    user's data). The copy lives in a folder of mode 700 made by `tempfile.mkdtemp`, once per process and file
    state, removed at exit."""
    sides = side_files(path)
    if not sides:
        return path
    state = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (path, *sides))
    if state in _copies:
        return _copies[state]
    folder = Path(tempfile.mkdtemp(prefix="profan-db-"))
    atexit.register(shutil.rmtree, folder, True)
    copy = folder / path.name
    try:
        shutil.copyfile(path, copy)
        for side in sides:
            shutil.copyfile(side, folder / side.name)
        conn = sqlite3.connect(copy)
        try:  # the WAL folded into the copy (or the hot journal rolled back), then a plain file to read immutable
            conn.execute("PRAGMA journal_mode=DELETE").fetchone()
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ProfanInputError(path, f"has {sides[0].name} beside it, which cannot be applied ({why})") from None
    _copies[state] = copy
    return copy


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection that never writes beside the file (``immutable``: no lock, journal or WAL files
    in the user's folder, which may be read-only); with a ``-wal`` or ``-journal`` beside it, on the private copy
    `readable` makes. A file that is no SQLite database is one line naming it."""
    try:
        head = _head(path)
    except OSError as exc:  # unreadable: say so, not that it is no database
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if head != SQLITE_MAGIC:
        raise ProfanInputError(path, "is not an SQLite database (no SQLite header); refused")
    try:
        source = readable(path)
        conn = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as an SQLite database ({exc})") from None
    return conn


def schema(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Table name -> column names, as the DB declares them (extra columns are kept, never required)."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {table: [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")] for table in tables}


def quote(name: str) -> str:
    """An SQL identifier, quoted (table names come from the DB or from a report: never pasted raw)."""
    return '"' + name.replace('"', '""') + '"'


def frame(conn: sqlite3.Connection, sql: str, schema_: dict[str, pl.DataType], params: tuple = ()) -> pl.DataFrame:
    """A query's rows as a DataFrame of ``schema_`` (column order = the query's), fetched in batches of
    `FETCH_ROWS` so the Python tuples alive at once stay bounded."""
    cur = conn.execute(sql, params)
    parts = []
    while rows := cur.fetchmany(FETCH_ROWS):
        parts.append(pl.DataFrame(rows, schema=schema_, orient="row"))
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema_)


def _adbc():  # -> the ADBC SQLite DB-API module, or None
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:
        return None
    return adbc


def big_frame(db: Db, sql: str, schema_: dict[str, pl.DataType]) -> pl.DataFrame:
    """A query of millions of rows as a DataFrame of ``schema_``: through the ADBC SQLite driver when it is
    installed (the rows reach polars as Arrow columns, never as Python tuples: half the CPU time of the stdlib
    cursor on the 1 GB DB of bench/bench_db.py), else through `frame`. The same rows and types either way
    (tests/sources/test_ascend_db.py compares them)."""
    adbc = _adbc() if not NO_ADBC else None
    if adbc is None:
        return frame(db.conn, sql, schema_)
    try:
        with adbc.connect(f"{readable(db.path).resolve().as_uri()}?mode=ro&immutable=1") as conn, conn.cursor() as cur:
            cur.execute(sql)
            table = cur.fetch_arrow_table()
    except adbc.Error as exc:
        raise ProfanInputError(db.path, f"cannot be read as an SQLite database ({exc})") from None
    got = pl.from_arrow(table)
    assert isinstance(got, pl.DataFrame)
    return got.rename(dict(zip(got.columns, schema_, strict=True))).cast(schema_)


NO_ADBC = False  # tests set it to read through the stdlib cursor


@dataclass
class Db:
    """One DB export file, opened: its path, connection, schema and what was skipped (said as warnings)."""

    path: Path
    conn: sqlite3.Connection
    tables: dict[str, list[str]]
    version: str = ""
    notes: list[str] = field(default_factory=list)

    def has(self, table: str, *cols: str) -> bool:
        return table in self.tables and all(col in self.tables[table] for col in cols)

    def col(self, table: str, column: str, alias: str, prefix: str = "") -> str:
        """``prefix.column AS alias``, or NULL when the column is not in this version of the table."""
        return f"{prefix}{quote(column)} AS {alias}" if self.has(table, column) else f"NULL AS {alias}"


def open_db(path: Path) -> Db:
    """The DB with the tables the kernel rows need checked (names in the error); the schema version noted."""
    limits.check_size(path, path.stat().st_size, "max_db_bytes", "a profiler database")
    conn = connect(path)
    try:
        tables = schema(conn)
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as an SQLite database ({exc})") from None
    db = Db(path, conn, tables)
    if sides := side_files(path):
        names = " and ".join(side.name for side in sides)
        db.notes.append(f"read with {names} beside it applied, as SQLite would (on a private copy of the file)")
    missing = [t for t in KERNEL_TABLES if t not in tables]
    if missing:
        raise ProfanInputError(
            path,
            f"has no {', '.join(missing)} table (is it torch_npu's ascend_pytorch_profiler_*.db?); "
            f"it holds {', '.join(sorted(tables)[:8]) or 'no table'}",
        )
    for table, cols in (("TASK", ("startNs", "endNs", "globalTaskId")), ("COMPUTE_TASK_INFO", ("globalTaskId",))):
        lacking = [col for col in cols if not db.has(table, col)]
        if lacking:
            raise ProfanInputError(path, f"table {table} has no column {', '.join(lacking)}")
    if db.has("META_DATA", "name", "value"):
        got = conn.execute("SELECT value FROM META_DATA WHERE name = 'SCHEMA_VERSION'").fetchone()
        db.version = str(got[0]) if got else ""
    return db


def strings(db: Db, ids: pl.Series) -> dict[int, str]:
    """STRING_IDS values of the given ids (the distinct ids of the groups: never the whole table), each at most
    ``max_string_bytes`` long (`texts`; the cut ones are noted)."""
    want = [int(key) for key in ids.drop_nulls().unique().to_list()]
    got, cut = texts(db.conn, "STRING_IDS", want)
    if cut:
        db.notes.append(cut_note("STRING_IDS", cut))
    return {int(key): "" if value is None else value for key, value in got.items()}


def texts(conn: sqlite3.Connection, table: str, ids: list[int]) -> tuple[dict[int, str | None], int]:
    """(id -> value, how many were cut) of a ``(id, value)`` table such as STRING_IDS, a value longer than
    ``max_string_bytes`` cut to it. The text is read through SQLite's blob I/O, which gives a value's size without
    reading it and reads only its head: a 300 MB value fetched whole (even by ``length()`` or ``substr()`` in
    SQL) costs its size several times over, and held once per kernel group it took 16 GB."""
    most = limits.active().max_string_bytes
    out: dict[int, str | None] = {}
    cut = 0
    for index in range(0, len(ids), 30_000):  # below SQLite's bound on bound parameters
        part = ids[index : index + 30_000]
        sql = (
            "SELECT rowid, id, typeof(value), CASE WHEN typeof(value) IN ('text', 'blob') THEN NULL ELSE value END "
            f"FROM {quote(table)} WHERE id IN ({','.join('?' * len(part))})"
        )
        for rowid, key, kind, plain in conn.execute(sql, part):
            if kind not in ("text", "blob"):
                out[int(key)] = None if plain is None else str(plain)
                continue
            with conn.blobopen(table, "value", rowid, readonly=True) as blob:
                size = len(blob)
                head = blob.read(min(size, most))
            out[int(key)] = head.decode("utf-8", "replace") if kind == "text" else str(head)
            cut += size > most
    return out, cut


def ids_of(conn: sqlite3.Connection, table: str, wanted: set[str]) -> dict[int, str]:
    """id -> value of the rows of an ``(id, value)`` table whose value is one of ``wanted`` (short names). By blob
    I/O, reading a value only when its size is that of a wanted name: ``WHERE value IN (...)`` reads every value
    whole, a huge one included."""
    by_size = {len(w.encode()): set() for w in wanted}
    for w in wanted:
        by_size[len(w.encode())].add(w)
    out: dict[int, str] = {}
    for rowid, key in conn.execute(f"SELECT rowid, id FROM {quote(table)} WHERE typeof(value) = 'text'"):
        with conn.blobopen(table, "value", rowid, readonly=True) as blob:
            names = by_size.get(len(blob))
            value = blob.read().decode("utf-8", "replace") if names else ""
        if value in (names or ()):
            out[int(key)] = value
    return out


def cut_note(table: str, count: int) -> str:
    most = limits.active().max_string_bytes
    return (
        f"{table}: {count} text value(s) longer than max_string_bytes ({most:,} bytes) cut to that length "
        "(raise it under [limits] in a --rules file)"
    )
