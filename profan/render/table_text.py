"""A report table as the text reports show it (HTML and Markdown): each column's kind and label, each cell's text.

Why one module: the HTML and the Markdown report print the same generic tables, and a reader comparing them must
read the same thing — durations in ms with the unit in the header, shares as percentages, timestamps as ms from
the table's first one (t0, stated under the table) rather than sixteen-digit clock values. The workbook keeps the
numbers (its number formats say the units); the JSON report keeps them as measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profan.model.textfmt import column_kind, column_label, fmt_cell, origin_note, time_origin


@dataclass(frozen=True)
class TextColumn:
    """One column of a table as text: its name in the report, its kind (`textfmt.column_kind`), its header."""

    name: str
    kind: str
    label: str


@dataclass(frozen=True)
class TextTable:
    """A table's first rows as text, and what its timestamp columns count from (``note``; empty without any)."""

    columns: list[TextColumn]
    rows: list[list[str]]
    origin: float | None
    note: str


def text_columns(frame: pl.DataFrame) -> list[TextColumn]:
    """The columns of ``frame``, kinds from their names and dtypes, headers with the units the text shows."""
    columns = []
    for key, dtype in frame.schema.items():
        kind = column_kind(key, str(dtype))
        columns.append(TextColumn(key, kind, column_label(key, kind, ms_for_us=True)))
    return columns


def frame_origin(frame: pl.DataFrame, columns: list[TextColumn]) -> float | None:
    """t0 of ``frame``: the earliest value of its timestamp columns (None when it has none)."""
    stamps = [column.name for column in columns if column.kind == "timestamp"]
    if not stamps or frame.is_empty():
        return None
    row = frame.select(pl.col(name).min() for name in stamps).row(0)
    return time_origin(row)


def text_table(frame: pl.DataFrame, max_rows: int, origin_of: pl.DataFrame | None = None) -> TextTable:
    """The first ``max_rows`` rows of ``frame`` as text. ``origin_of``: the whole table ``frame`` is a part of,
    so that t0 is the table's first timestamp however it was cut (default: ``frame``)."""
    columns = text_columns(frame)
    origin = frame_origin(frame if origin_of is None else origin_of, columns)
    rows = [
        [fmt_cell(value, column.kind, origin=origin) for column, value in zip(columns, rec, strict=True)]
        for rec in frame.head(max_rows).iter_rows()
    ]
    return TextTable(columns, rows, origin, origin_note(origin, (column.label for column in columns)))
