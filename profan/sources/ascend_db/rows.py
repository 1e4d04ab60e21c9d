"""Reading cited rows back from torch_npu's DB export: ``/TABLE/ROWID`` pointers (see `profan.model.evidence`).

A row is printed as the DB holds it, every column by its name, with the ids into ``STRING_IDS`` resolved to their
text — a kernel's TASK row also with its COMPUTE_TASK_INFO columns (name, op type, core, shapes) or, for a
communication task, its COMMUNICATION_OP (op name and span), which is what the analysis read for it. The table
and row ids come from a report, which is untrusted: a table must be one the DB has (quoted, never pasted), a row id
an integer, and a row that is not there any more is the file's one-line error, as a CSV line past the end is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError
from profan.sources.ascend_db.sqlite import connect, is_sqlite, quote, schema, texts

# columns that hold ids into STRING_IDS, per table of torch_npu's DB export (its schema, not kernel knowledge)
STRING_COLUMNS: dict[str, tuple[str, ...]] = {
    "TASK": ("taskType",),
    "COMPUTE_TASK_INFO": (
        "name",
        "taskType",
        "opType",
        "inputFormats",
        "inputDataTypes",
        "inputShapes",
        "outputFormats",
        "outputDataTypes",
        "outputShapes",
        "attrInfo",
    ),
    "COMMUNICATION_OP": ("opName", "groupName", "algType", "opType"),
    "COMMUNICATION_TASK_INFO": ("name", "groupName", "taskType"),
    "TASK_PMU_INFO": ("name",),
    "PYTORCH_API": ("name", "inputDtypes", "inputShapes"),
    "CANN_API": ("name",),
    "OP_MEMORY": ("name",),
    "NPU_OP_MEM": ("operatorName",),
}
# TASK rows are shown with what the analysis joined to them
TASK_JOINS: dict[str, tuple[str, ...]] = {
    "COMPUTE_TASK_INFO": ("name", "opType", "taskType", "inputShapes", "blockDim", "mixBlockDim", "waitNs"),
    "COMMUNICATION_OP": ("opName", "opType", "startNs", "endNs", "waitNs"),
}
CHUNK = 500  # row ids per query


def is_db(path: Path) -> bool:
    return is_sqlite(path)


def parse(path: Path, pointer: str) -> tuple[str, int]:
    """(table, rowid) of a ``/TABLE/ROWID`` pointer; any other text is the file's one-line error."""
    parts = pointer.split("/") if isinstance(pointer, str) else []
    if len(parts) != 3 or parts[0] or not parts[1] or not parts[2].isdigit() or len(parts[2]) > 19:
        raise ProfanInputError(path, f"cited as {str(pointer)[:60]!r}, which is no /TABLE/ROWID row of a DB")
    return parts[1], int(parts[2])


def read_rows(path: Path, pointers: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The cited rows, in the cited order, as {column: value} with STRING_IDS resolved."""
    wanted = [(pointer, *parse(path, pointer)) for pointer in pointers]
    conn = connect(path)
    try:
        tables = schema(conn)
        got: dict[tuple[str, int], dict[str, Any]] = {}
        for table in dict.fromkeys(t for _, t, _ in wanted):
            if table not in tables:
                raise ProfanInputError(path, f"has no table {table[:60]!r}: the report does not fit this file")
            ids = sorted({r for _, t, r in wanted if t == table})
            for index in range(0, len(ids), CHUNK):
                for rowid, row in _fetch(conn, tables, table, ids[index : index + CHUNK]):
                    got[(table, rowid)] = row
        _resolve(conn, tables, list(got.values()))
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as an SQLite database ({exc})") from None
    finally:
        conn.close()
    out = []
    for pointer, table, rowid in wanted:
        if (table, rowid) not in got:
            raise ProfanInputError(
                path, f"has no row {rowid} in {table} any more: the file changed since the report; analyse it again"
            )
        out.append((pointer, got[(table, rowid)]))
    return out


def _fetch(
    conn: sqlite3.Connection, tables: dict[str, list[str]], table: str, ids: list[int]
) -> list[tuple[int, dict[str, Any]]]:
    """(rowid, row) of the ids present; a TASK row carries its joined columns as ``TABLE.column``."""
    cols = [f"t.{quote(c)}" for c in tables[table]]
    names = list(tables[table])
    joins = ""
    if table == "TASK" and "globalTaskId" in tables["TASK"]:
        if "globalTaskId" in tables.get("COMPUTE_TASK_INFO", ()):
            joins += " LEFT JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
            have = [c for c in TASK_JOINS["COMPUTE_TASK_INFO"] if c in tables["COMPUTE_TASK_INFO"]]
            cols += [f"c.{quote(c)}" for c in have]
            names += [f"COMPUTE_TASK_INFO.{c}" for c in have]
        ti, op = tables.get("COMMUNICATION_TASK_INFO", ()), tables.get("COMMUNICATION_OP", ())
        if {"globalTaskId", "opId"} <= set(ti) and "opId" in op:
            joins += (
                " LEFT JOIN COMMUNICATION_OP o ON o.opId = (SELECT i.opId FROM COMMUNICATION_TASK_INFO i "
                "WHERE i.globalTaskId = t.globalTaskId LIMIT 1)"
            )
            have = [c for c in TASK_JOINS["COMMUNICATION_OP"] if c in op]
            cols += [f"o.{quote(c)}" for c in have]
            names += [f"COMMUNICATION_OP.{c}" for c in have]
    sql = (
        f"SELECT t.rowid, {', '.join(cols)} FROM {quote(table)} t{joins} WHERE t.rowid IN ({','.join('?' * len(ids))})"
    )
    out = []
    own = len(tables[table])
    for rowid, *values in conn.execute(sql, ids):
        row = {"table": table, "rowid": rowid, **dict(zip(names[:own], values[:own], strict=True))}
        # the joined table's columns only where it has the task (a compute task has no COMMUNICATION_OP)
        row.update((name, value) for name, value in zip(names[own:], values[own:], strict=True) if value is not None)
        out.append((rowid, row))
    return out


def _string_keys(table: str, column: str) -> bool:
    owner, _, col = column.rpartition(".")
    return col in STRING_COLUMNS.get(owner or table, ())


def _resolve(conn: sqlite3.Connection, tables: dict[str, list[str]], rows: list[dict[str, Any]]) -> None:
    """Every STRING_IDS id of the rows replaced by its text, in place (one query for all of them); an id the
    table does not hold stays the number it is."""
    if "STRING_IDS" not in tables:
        return
    keys = [(row, k) for row in rows for k in row if _string_keys(row["table"], k) and isinstance(row[k], int)]
    ids = sorted({row[k] for row, k in keys})
    text, _ = texts(conn, "STRING_IDS", ids)  # a value past max_string_bytes is shown cut, as the report read it
    for row, k in keys:
        row[k] = str(text[row[k]]) if row[k] in text else row[k]
