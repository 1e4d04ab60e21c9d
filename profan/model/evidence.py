"""Evidence: the source rows behind a claim, and reading them back from the original files.

A locator is one of three kinds, each exact and stable across caching because it is computed from the source
file itself, never from a derived table:

* ``lines``    — 1-based physical line numbers of a CSV file (header = line 1), as an editor shows them;
* ``events``   — indexes into a chrome trace's event array (``traceEvents`` or the bare array);
* ``pointers`` — RFC 6901 JSON pointers into a JSON document (``communication.json`` and friends), or, in an
  SQLite file (torch_npu's DB export), ``/TABLE/ROWID``: the DB read as a document of tables of rows by rowid
  (a table's integer primary key where it has one). Readers name a DB table as the file ``<db>#TABLE`` and cite
  its rowids as lines; the evidence turns them into those pointers (`db_table`), so analyses cite a DB without
  knowing it is one.

``lines``/``events``/``pointers`` list the cited rows (for an aggregate: the largest ones); ``row_count`` says how
many rows the claim covers in total and ``select`` is the filter that selects all of them again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_CITED = 20  # locators listed per evidence item; the rest are reachable through `select`


@dataclass(frozen=True)
class Evidence:
    """Rows of one source file that support a claim."""

    file: str  # path relative to the analysed root, '/'-separated
    row_count: int
    select: dict[str, Any]
    lines: tuple[int, ...] = ()
    events: tuple[int, ...] = ()
    pointers: tuple[str, ...] = ()
    note: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # the summed/compared value(s) the rows produce

    def __post_init__(self) -> None:
        file, table = db_table(self.file)
        if table and (self.lines or self.events):  # rows of a DB table: /TABLE/ROWID pointers into the DB file
            object.__setattr__(self, "pointers", tuple(make_pointer(table, n) for n in self.lines or self.events))
            object.__setattr__(self, "lines", ())
            object.__setattr__(self, "events", ())
            object.__setattr__(self, "file", file)
        kinds = [k for k in (self.lines, self.events, self.pointers) if k]
        if len(kinds) != 1:
            raise ValueError(f"evidence for {self.file} needs exactly one kind of locator (lines/events/pointers)")
        if self.row_count < len(kinds[0]):
            raise ValueError(f"evidence for {self.file}: row_count {self.row_count} < cited {len(kinds[0])}")
        if not self.file:
            raise ValueError("evidence needs a file")
        if not all(isinstance(pointer, str) for pointer in self.pointers):
            raise TypeError(f"evidence for {self.file}: pointers must be text")

    @property
    def kind(self) -> str:
        return "lines" if self.lines else "events" if self.events else "pointers"

    @property
    def locators(self) -> tuple:
        return self.lines or self.events or self.pointers

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            self.kind: list(self.locators),
            "row_count": self.row_count,
            "truncated": self.row_count > len(self.locators),
            "select": self.select,
        }
        if self.values:
            out["values"] = self.values
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        """An evidence item of a report read from a file: every field of the type it is written with (a report
        is untrusted input), else TypeError naming the field."""
        return cls(
            file=typed(d, "file", str),
            row_count=typed(d, "row_count", int),
            select=typed(d, "select", dict, {}),
            lines=whole_numbers(d, "lines"),
            events=whole_numbers(d, "events"),
            pointers=tuple(typed(d, "pointers", list, [])),
            note=typed(d, "note", str, ""),
            values=typed(d, "values", dict, {}),
        )


_MISSING = object()
_DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def db_table(file: str) -> tuple[str, str]:
    """(file, table) of a DB table named ``<db>#TABLE`` (a file ending in .db whose ``#`` suffix is an SQL
    identifier); (file, "") for any other name, a file whose own name holds ``#`` included."""
    path, sep, table = file.rpartition("#")
    if sep and path.endswith(_DB_SUFFIXES) and table.isidentifier():
        return path, table
    return file, ""


def typed(d: Any, key: str, kind: type, default: Any = _MISSING) -> Any:
    """``d[key]`` when it is a ``kind`` (a bool is no int); ``default`` when absent, if one is given."""
    if not isinstance(d, dict):
        raise TypeError(f"expected an object holding {key!r}, got a JSON {type(d).__name__}")
    if key not in d and default is not _MISSING:
        return default
    value = d.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{key!r} is {str(value)[:40]!r}, not a {kind.__name__}")
    return value


def whole_numbers(d: dict[str, Any], key: str) -> tuple[int, ...]:
    items = typed(d, key, list, [])
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        raise TypeError(f"{key!r} holds something other than whole numbers")
    return tuple(items)


def cite_lines(file: str, lines: Iterable[int], row_count: int, select: dict[str, Any], **kw: Any) -> Evidence:
    """Evidence on CSV lines, keeping at most MAX_CITED of them (callers pass largest first)."""
    cited = tuple(int(x) for x in list(lines)[:MAX_CITED])
    return Evidence(file=file, lines=cited, row_count=max(row_count, len(cited)), select=select, **kw)


def cite_pointers(file: str, pointers: Sequence[str], select: dict[str, Any], **kw: Any) -> Evidence:
    ptrs = tuple(pointers)
    return Evidence(file=file, pointers=ptrs[:MAX_CITED], row_count=len(ptrs), select=select, **kw)


def cite_events(file: str, events: Iterable[int], row_count: int, select: dict[str, Any], **kw: Any) -> Evidence:
    cited = tuple(int(x) for x in list(events)[:MAX_CITED])
    return Evidence(file=file, events=cited, row_count=max(row_count, len(cited)), select=select, **kw)


def make_pointer(*parts: str | int) -> str:
    """RFC 6901 pointer from its reference tokens (``~`` and ``/`` escaped); no tokens: the whole document."""
    return "".join("/" + _escape_token(part) for part in parts)


@functools.lru_cache(maxsize=1 << 14)
def _escape_token(part: str | int) -> str:
    # tokens repeat (step keys, sections, op keys): readers build a pointer per row of large documents
    return str(part).replace("~", "~0").replace("/", "~1")
