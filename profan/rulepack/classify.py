"""Apply bucket rules to a kernel table: each row gets ``bucket``, the ``rule_id`` that decided it and
``decided_by``, the context values that rule matched.

Rules become one polars ``when/then`` chain (first match wins), so classification is a vectorised expression.
It is meant to run on the *distinct* kernels (name/type/core/context…) rather than on every row: the per-rank pass
aggregates first, then classifies the small result.

A kernel's name is the weakest evidence of what it serves; the fields beside it say more where a trace has them,
and the rule files order their rules strongest evidence first: the launching op (``context``), the forward op of
a backward kernel (``fwd_context``), the nn.Module around the launch (``module``), the kernel's place among its
neighbours in issue order (``neighbors``, see `with_neighbors`), and only then the name. A field a table lacks
matches nothing, so one rule file serves traces with and without that evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from profan.rulepack.pack import BucketRule

UNCLASSIFIED = "unclassified"

# The fields a rule may match. The first four describe the kernel itself; the others are its context.
KERNEL_FIELDS = ("op", "name", "type", "core")
CONTEXT_FIELDS = ("context", "fwd_context", "module", "annotation", "neighbors")
MATCH_FIELDS = (*KERNEL_FIELDS, *CONTEXT_FIELDS)
NEIGHBORS = "neighbors"  # "<previous anchor>|<next anchor>", each "<bucket>:<op or context>" (`with_neighbors`)


def _condition(rule: BucketRule, columns: set[str]) -> pl.Expr:
    cond: pl.Expr | None = None
    for fld, pattern in rule.match.items():
        c = pl.col(fld).fill_null("").str.contains(pattern) if fld in columns else pl.lit(False)
        cond = c if cond is None else cond & c
    assert cond is not None
    return cond


def _evidence(rule: BucketRule, columns: set[str]) -> pl.Expr:
    """What decided a row beyond its name: ``field=value`` of each context field the rule matched."""
    parts = [pl.lit(f"{f}=") + pl.col(f).fill_null("") for f in CONTEXT_FIELDS if f in rule.match and f in columns]
    if not parts:
        return pl.lit(None, pl.Utf8)
    return pl.concat_str(parts, separator="; ")


def rule_fields(rules: list[BucketRule]) -> list[str]:
    """The columns the rules read: a kernel's verdict depends on these alone, so it can be reused for any row
    with the same values."""
    return sorted({f for rule in rules for f in rule.match})


def classify(frame: pl.DataFrame | pl.LazyFrame, rules: list[BucketRule]):
    """Add ``bucket``, ``rule_id`` and ``decided_by``. The frame needs the kernel columns the rules match on
    (op, name, type, core); a context column it lacks matches nothing.

    Each rule's condition is evaluated once: one chain gives the index of the first rule that matches, and the
    three columns are read from it (its regexes, not the lookups, are what a classification costs)."""
    none = pl.lit(None, pl.Utf8)
    if not rules:
        return frame.with_columns(pl.lit(UNCLASSIFIED).alias("bucket"), none.alias("rule_id"), none.alias("decided_by"))
    columns = set(frame.collect_schema().names())
    first: pl.Expr | pl.Then | None = None
    why: pl.Expr | pl.Then | None = None
    rule = pl.col("_rule")
    for i, r in enumerate(rules):
        cond, n = _condition(r, columns), pl.lit(i, pl.Int32)
        first = pl.when(cond).then(n) if first is None else first.when(cond).then(n)  # type: ignore[union-attr]
        if any(f in r.match and f in columns for f in CONTEXT_FIELDS):
            evidence = _evidence(r, columns)
            why = pl.when(rule == i).then(evidence) if why is None else why.when(rule == i).then(evidence)  # type: ignore[union-attr]
    index = list(range(len(rules)))
    return (
        frame.with_columns(first.otherwise(pl.lit(None, pl.Int32)).alias("_rule"))  # type: ignore[union-attr]
        .with_columns(
            rule.replace_strict(index, [r.bucket for r in rules], default=UNCLASSIFIED, return_dtype=pl.Utf8).alias(
                "bucket"
            ),
            rule.replace_strict(index, [r.id for r in rules], default=None, return_dtype=pl.Utf8).alias("rule_id"),
            (why.otherwise(none) if why is not None else none).alias("decided_by"),  # type: ignore[union-attr]
        )
        .drop("_rule")
    )


MEMO_ROWS = 20_000  # distinct kernels remembered per rule list: a job's kernels, not a file's renamed copies
MEMO_LISTS = 32  # (rule list, fields) keys remembered at once: a job uses a few (a pass with neighbours and one
# without, Ascend's rows and groups), and a long-lived process may be given many rules files
_verdicts: dict[tuple, pl.DataFrame] = {}


def classify_distinct(frame: pl.DataFrame, rules: list[BucketRule]) -> pl.DataFrame:
    """`classify` of ``frame``, decided once per distinct value of the fields the rules read (a verdict depends on
    those alone) and joined back in the frame's order.

    The verdicts are remembered in this process by rule list and fields: the ranks of one job share most of
    their kernels, and a classification costs its rules' regexes, which polars compiles at every call (about
    10 ms for 30 rules on 100 kernels), not its rows. Threads may read ranks at once: two that miss together
    both classify, and either's verdicts are the same."""
    fields = [
        field for field in rule_fields(rules) if field in frame.columns
    ]  # a context column a frame lacks matches nothing
    if not fields or frame.is_empty():
        return classify(frame, rules)
    kinds = frame.select(fields).unique()
    if kinds.height > MEMO_ROWS:  # names made unique (suffixed per row or step): nothing to share
        if kinds.height * 4 > frame.height:  # … nor to save by joining
            return classify(frame, rules)
        return frame.join(classify(kinds, rules), on=fields, how="left", nulls_equal=True, maintain_order="left")
    key = (_rules_key(rules), *((field, str(frame.schema[field])) for field in fields))
    known = _verdicts.get(key)
    new = kinds if known is None else kinds.join(known, on=fields, how="anti", nulls_equal=True)
    if not new.is_empty():
        known = classify(new, rules) if known is None else pl.concat([known, classify(new, rules)])
        if known.height <= MEMO_ROWS:
            if key not in _verdicts and len(_verdicts) >= MEMO_LISTS:
                _verdicts.clear()
            _verdicts[key] = known
    return frame.join(known, on=fields, how="left", nulls_equal=True, maintain_order="left")


def _rules_key(rules: list[BucketRule]) -> tuple:
    return tuple((rule.id, rule.bucket, tuple(rule.match.items())) for rule in rules)


def uses_neighbors(rules: list[BucketRule]) -> bool:
    return any(NEIGHBORS in rule.match for rule in rules)


def with_neighbors(frame: pl.DataFrame, order: list[str], over: list[str], anchors: tuple[str, ...], label: str):
    """``frame`` (classified once) with ``neighbors``: the nearest anchor kernels before and after each row in
    issue order (``order`` within each ``over`` partition, e.g. a stream or a step), as ``prev|next``, each
    ``<bucket>:<label>``.

    Anchors are the rows whose first verdict is one of ``anchors`` (roles ``layer_anchor_buckets``: attention,
    matmuls, MLP activations): the skeleton of a transformer layer, with the elementwise and copy kernels
    between them skipped. A GEMM right before or after an attention kernel is then a QKV or output projection,
    one beside an MLP activation an MLP matmul — what rules on ``neighbors`` say, used only where no stronger
    evidence decided (their place in the rule files)."""
    key = pl.col("bucket") + ":" + pl.col(label).fill_null("")
    anchor = pl.when(pl.col("bucket").is_in(list(anchors))).then(key)
    f = frame.with_row_index("_n").sort([*over, *order, "_n"], nulls_last=True)
    prev = anchor.shift(1).forward_fill().over(over) if over else anchor.shift(1).forward_fill()
    nxt = anchor.shift(-1).backward_fill().over(over) if over else anchor.shift(-1).backward_fill()
    f = f.with_columns((prev.fill_null("") + "|" + nxt.fill_null("")).alias(NEIGHBORS))
    return f.sort("_n").drop("_n")
