"""Reader for ``op_statistic.csv`` (and msprof ``op_statistic_*.csv``): the profiler's own per-op-type totals.

Header: ``[Device_id,]OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)``.
It covers compute kernels only (no communication rows) and is used to cross-check what kernel_details.csv lists.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from profan.rulepack import limits
from profan.sources.common.csvtext import require_columns, small_csv

REQUIRED = ("OP Type", "Core Type", "Count", "Total Time(us)")
SCHEMA = {"src_line": pl.Int64, "op_type": pl.Utf8, "core": pl.Utf8, "count": pl.Int64, "total_us": pl.Float64}


def read(path: Path) -> tuple[pl.DataFrame, int]:
    """(table, skipped row count)."""
    header, rows = small_csv(path)
    require_columns(path, header, REQUIRED)
    idx = {h: index for index, h in enumerate(header)}
    records, skipped = [], 0
    longest = limits.active().max_duration_us
    for line, cells in rows:
        try:
            count, total = float(cells[idx["Count"]]), float(cells[idx["Total Time(us)"]].strip(' \t"'))
            # a count that is no int64 (inf, 1e30) or a total that is no time (nan, 1e300 µs): skipped, counted
            if not (abs(count) < 2**63 and math.isfinite(total) and abs(total) <= longest):
                raise ValueError(cells[idx["Count"]])
            records.append(
                {
                    "src_line": line,
                    "op_type": cells[idx["OP Type"]],
                    "core": cells[idx["Core Type"]],
                    "count": int(count),
                    "total_us": total,
                }
            )
        except (ValueError, IndexError):
            skipped += 1
    frame = pl.DataFrame(records, schema=SCHEMA, orient="row") if records else pl.DataFrame(schema=SCHEMA)
    return frame, skipped
