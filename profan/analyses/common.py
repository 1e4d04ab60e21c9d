"""Small helpers the analyses share: formatting numbers in messages, grading by thresholds and picking evidence
lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from profan.model.findings import Severity
from profan.rulepack.pack import Check
from profan.sources.common.rowframe import stack


def graded(value: float, chk: Check, kind: str = "share") -> Severity | None:
    """'critical' / 'warning' where `value` reaches the check's critical_<kind> / warning_<kind> threshold, else
    None. The thresholds are named for the severity they give (rules/checks.toml); a check may have only one."""
    for level in ("critical", "warning"):
        limit = chk.params.get(f"{level}_{kind}")
        if limit is not None and value >= limit:
            return level
    return None


def top_lines(groups: pl.DataFrame, k: int) -> list[int]:
    """The k largest rows (by duration) across kernel groups, largest first."""
    if groups.is_empty():
        return []
    ex = groups.select("lines", "line_durs").explode(["lines", "line_durs"]).drop_nulls()
    # ties broken by the earlier line, so the cited rows do not depend on thread scheduling
    return ex.sort(["line_durs", "lines"], descending=[True, False]).head(k)["lines"].to_list()


def top_lines_frame(groups: pl.DataFrame, key: str | list[str], k: int) -> pl.DataFrame:
    """`top_lines` for every value of ``key`` (a column or several) at once, as a frame (``key``, ``lines``): one
    sort instead of one filter and sort per value."""
    keys = [key] if isinstance(key, str) else key
    ex = groups.select(*keys, "lines", "line_durs").explode(["lines", "line_durs"]).drop_nulls(["lines", "line_durs"])
    return (
        ex.sort(["line_durs", "lines"], descending=[True, False])
        .group_by(keys, maintain_order=True)
        .agg(pl.col("lines").head(k))
    )


def top_lines_by(groups: pl.DataFrame, key: str, k: int) -> dict:
    """`top_lines_frame` as a dict: value of ``key`` -> its lines."""
    if groups.is_empty():
        return {}
    tops = top_lines_frame(groups, key, k)
    return dict(zip(tops[key].to_list(), tops["lines"].to_list(), strict=True))


def kernel_table(
    ranks, cols: list[str | pl.Expr], per_rank: Callable[[Any], dict[str, Any]] | None = None
) -> pl.DataFrame | None:
    """``cols`` of the kernel groups of every rank that has some, behind a ``rank`` column, in the order of
    ``ranks`` (discovery sorts them by rank); None when no rank has any. ``per_rank``: more columns, one value
    per rank (e.g. the rank's kernel file). ``cols`` expressions must be row by row (they run on all ranks'
    rows together).

    Why one frame: an analysis then runs each query once over all ranks (``rank`` leading every key) instead of
    once per rank. A polars query costs a fixed 0.1–0.3 ms however few its rows, and a cluster of small ranks
    would pay that per rank and query; one rank's result is the same either way. The ranks' columns are taken
    without a query (`stack`)."""
    with_groups = [
        with_group for with_group in ranks if with_group.groups is not None and not with_group.groups.is_empty()
    ]
    if not with_groups:
        return None
    names = list(dict.fromkeys(n for col in cols for n in ([col] if isinstance(col, str) else col.meta.root_names())))
    extra = [per_rank(with_group) for with_group in with_groups] if per_rank else []
    keys = {
        "rank": [with_group.rank for with_group in with_groups],
        **{key: [e[key] for e in extra] for key in (extra[0] if extra else {})},
    }
    # relaxed: a rank from the cache or another source may hold a column in a wider type
    t = stack([with_group.groups[names] for with_group in with_groups], keys, how="vertical_relaxed")
    return t.select_seq("rank", *cols, *[key for key in keys if key != "rank"])


def first_by_time(cols: tuple[str, ...]) -> list[pl.Expr]:
    """Aggregations: each column's value in the group's row with the most time (ties: the first name) — the
    example a table names for a set of kernel groups, the same on every run whatever order grouping saw."""
    return [pl.col(col).sort_by(["time_us", "name"], descending=[True, False]).first() for col in cols]


def cite_kernels(
    r,
    groups: pl.DataFrame | None,
    row_count: int,
    select: dict,
    *,
    locs: list[int] | None = None,
    **kw,
):
    """Evidence on a rank's kernel rows, in the locator kind of its kernel source.

    ``groups.lines`` holds CSV line numbers of ``kernel_details.csv`` for Ascend ranks and event indexes of the
    trace for Kineto ranks (``RankData.kernel_locator``); this is the one place that tells them apart. ``locs``:
    the rows to cite, already picked (`top_lines_by`), instead of ``groups``.
    """
    from profan.model.evidence import MAX_CITED, cite_events, cite_lines

    if locs is None:
        locs = top_lines(groups, MAX_CITED)
    cite = cite_events if getattr(r, "kernel_locator", "lines") == "events" else cite_lines
    kfile = getattr(r, "kernel_file", "kernel_details")
    return cite(r.files[kfile], locs, row_count, {**select, "source": kfile}, **kw)


def step_periods(trace_steps: pl.DataFrame) -> pl.DataFrame:
    """Per step with a step window before it, the slowest rank's period — its window and the device's idle time
    before it (``idle_before_us``, table trace_steps) — and the slowest rank's window (``step_us``), by step.
    Empty where the table holds no such time. What the idle-between-steps cause is measured against and the
    verdict's step line says."""
    if trace_steps.is_empty() or "idle_before_us" not in trace_steps.columns:
        return pl.DataFrame(schema={"step": pl.Int64, "period_us": pl.Float64, "step_us": pl.Float64})
    rows = trace_steps.filter(pl.col("scope") == "step") if "scope" in trace_steps.columns else trace_steps
    return (
        rows.drop_nulls(["step", "step_us", "idle_before_us"])
        .group_by("step")
        .agg((pl.col("step_us") + pl.col("idle_before_us")).max().alias("period_us"), pl.col("step_us").max())
        .sort("step")
    )
