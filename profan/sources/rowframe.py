"""Tables built from rows that a reader collected in Python (JSON side files)."""

from __future__ import annotations

import polars as pl


def rows_frame(rows: list[tuple], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A DataFrame from tuples in ``schema`` order; empty (with the schema) when there are none.

    Built column by column: about twice as fast as polars' row orientation, which matters for readers that
    produce thousands of rows per rank of a cluster (communication ops, matrix links, packet sizes)."""
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame(dict(zip(schema, zip(*rows, strict=True), strict=True)), schema=schema)
