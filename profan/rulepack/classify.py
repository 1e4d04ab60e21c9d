"""Apply bucket rules to a kernel table: each row gets ``bucket`` and the ``rule_id`` that decided it.

Rules become one polars ``when/then`` chain (first match wins), so classification is a vectorised expression.
It is meant to run on the *distinct* kernels (name/type/core) rather than on every row: the per-rank pass
aggregates first, then classifies the small result.
"""

from __future__ import annotations

import polars as pl

from profan.rulepack.pack import BucketRule

UNCLASSIFIED = "unclassified"


def _condition(rule: BucketRule) -> pl.Expr:
    cond: pl.Expr | None = None
    for fld, pattern in rule.match.items():
        c = pl.col(fld).fill_null("").str.contains(pattern)
        cond = c if cond is None else cond & c
    assert cond is not None
    return cond


def rule_fields(rules: list[BucketRule]) -> list[str]:
    """The columns the rules read: a kernel's verdict depends on these alone, so it can be reused for any row
    with the same values."""
    return sorted({f for r in rules for f in r.match})


def classify(frame: pl.DataFrame | pl.LazyFrame, rules: list[BucketRule]):
    """Add ``bucket`` and ``rule_id``. The frame needs the columns the rules match on (op, name, type, core)."""
    if not rules:
        return frame.with_columns(pl.lit(UNCLASSIFIED).alias("bucket"), pl.lit(None, pl.Utf8).alias("rule_id"))
    bucket: pl.Expr | pl.Then | None = None
    rule_id: pl.Expr | pl.Then | None = None
    for r in rules:
        cond = _condition(r)
        if bucket is None:
            bucket = pl.when(cond).then(pl.lit(r.bucket))
            rule_id = pl.when(cond).then(pl.lit(r.id))
        else:
            bucket = bucket.when(cond).then(pl.lit(r.bucket))  # type: ignore[union-attr]
            rule_id = rule_id.when(cond).then(pl.lit(r.id))  # type: ignore[union-attr]
    return frame.with_columns(
        bucket.otherwise(pl.lit(UNCLASSIFIED)).alias("bucket"),  # type: ignore[union-attr]
        rule_id.otherwise(pl.lit(None, pl.Utf8)).alias("rule_id"),
    )  # type: ignore[union-attr]
