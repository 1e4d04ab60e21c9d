"""Every row of a kernel file that an evidence item's ``select`` covers, re-read and re-classified as the kernel
pass reads them: what reproduces an aggregate claim (a bucket's time in a step, an op's count) from the raw rows.
Here, beside the kernel pass, because it must key, size and classify rows exactly as the pass does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profan.ranks.kernel_pass import group_neighbors
from profan.sources.ascend_db import rows as ascend_db_rows
from profan.sources.discovery.discover import base_dir


def select_filter(select: dict[str, Any]):
    """The polars predicate a kernel evidence item's `select` stands for."""
    import polars as pl

    cond = pl.lit(True)
    for key, value in select.items():
        if key == "source":
            continue
        if key == "bucket_not":
            cond = cond & (pl.col("bucket") != value)
        elif key in ("step", "bucket", "op", "input_shapes", "core", "name"):
            cond = cond & pl.col(key).eq_missing(value)
    return cond


def select_kernel_rows(root: Path, file: str, select: dict[str, Any], rules: list | None = None):
    """Every row of a kernel file that a `select` covers: src_line, step, name, bucket, dur_us.

    Re-reads and re-classifies the file, so it reproduces an aggregate claim from the raw rows — with each row's
    ``neighbors`` where the rules read it, as the kernel pass gives them (the mode over the row's group)."""
    import polars as pl

    from profan.rulepack.classify import classify
    from profan.rulepack.pack import load
    from profan.sources.ascend_text import kernels as ascend_kernels

    base = base_dir(root)
    pack = load(rules or [])
    rules_ = pack.rules_for("ascend")
    if ascend_db_rows.is_db(base / file):
        frame = _db_kernel_rows(base / file, pack, rules_)
    else:
        kernel_file = ascend_kernels.inspect(base / file)
        lazy = ascend_kernels.scan(kernel_file)
        n = lazy.select(pl.len()).collect().item()
        frame = ascend_kernels.with_exact_lines(kernel_file, lazy, n).filter(~pl.col("bad")).collect()
        frame = group_neighbors(frame, ascend_kernels.scanned(kernel_file, pl.LazyFrame.collect), kernel_file, rules_)
    frame = classify(frame, rules_).filter(select_filter(select))
    return frame.select("src_line", "step", "name", "op", "core", "bucket", "rule_id", "dur_us").sort("src_line")


def _db_kernel_rows(path: Path, pack, rules: list):
    """Every kernel row of torch_npu's DB export, one per task (``src_line`` = the TASK rowid the evidence cites),
    keyed and sized as the reader keys them, bad rows left out."""
    import polars as pl

    from profan.sources.ascend_db import reader as ascend_db
    from profan.sources.ascend_text.kernels import op_expr

    got = ascend_db.read(path, None, pack.roles.comm_cores[0])
    rows = got.kernel_rows.filter(~pl.col("bad"))
    frame = rows.lazy().select("src_line", *got.keyed[1], "dur_us").with_columns(op_expr()).collect()
    return group_neighbors(frame, got.kernel_rows, None, rules, keys=got.keyed[1])
