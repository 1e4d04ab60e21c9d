"""Communication that could be overlapped but is not: the gradient reductions every rank waits on alone.

Why across ranks: a reduction ends when its last member's data has arrived, so a rank's exposed time in it (its
span less the compute that ran meanwhile, `ranks.collectives`) is part transfer, part waiting for a late peer.
The part no rank hides is the least exposed member's: overlapping the reduction with compute that does not need
its result (DDP's buckets during backward, async_op and a later wait) can remove that much from every rank's step,
and waiting for a late rank it cannot. So per step: over the reductions aligned on every member (the k-th op of a
group in a step, `align`), the least exposed rank's time, summed. A step can hide only as much as it has compute
to hide it behind, so each step's sum is bounded by its least computing rank's compute outside the collectives:
which of that compute needs the reduction's result (the optimizer step does) the trace does not say.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.model.evidence import cite_events
from profan.model.findings import Finding
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import Check

CHECK = "comm-overlappable"
TABLE = "comm_overlappable"
CITED_PER_RANK = 4  # the longest exposed reductions cited per rank


def per_step(aligned: pl.DataFrame, steps: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """Per step: the reductions aligned on every member (name matching ``pattern``) and their exposed time on
    every rank (``exposed_us``: the sum over them of the least exposed member's), the least computing rank's
    compute (``compute_us``), ``overlappable_us`` (the smaller of the two), the step (its slowest rank's) and
    the share of it. ``steps``: per rank and step, ``step_us`` and ``computing_us``. Empty without such
    reductions or without their exposed time (a source that does not place them in time)."""
    if aligned.is_empty() or steps.is_empty() or "computing_us" not in steps.columns:
        return pl.DataFrame()
    whole = aligned.filter(
        pl.col("name").str.contains(pattern)
        & (pl.col("present") == pl.col("members"))
        & pl.col("exposed_us").is_not_null()
    )
    if whole.is_empty():
        return pl.DataFrame()
    each = whole.group_by("step", "group", "seq").agg(
        pl.col("exposed_us").min(), pl.col("rank").sort_by("exposed_us").first().alias("least_rank")
    )
    sums = each.group_by("step").agg(
        pl.len().alias("reductions"), pl.col("exposed_us").sum(), pl.col("least_rank").mode().min()
    )
    ranks = whole.group_by("step").agg(pl.col("rank").unique().sort().alias("ranks"))
    own = steps.join(whole.select("step", "rank").unique(), on=["step", "rank"])
    timed = own.group_by("step").agg(pl.col("computing_us").min().alias("compute_us"), pl.col("step_us").max())
    out = sums.join(ranks, on="step").join(timed, on="step")
    return (
        out.with_columns(pl.min_horizontal("exposed_us", "compute_us").alias("overlappable_us"))
        .with_columns(
            (pl.col("overlappable_us") / pl.col("step_us")).alias("share"),
            (pl.col("compute_us") < pl.col("exposed_us")).alias("compute_bound"),
        )
        .sort("step")
    )


def findings(aligned: pl.DataFrame, table: pl.DataFrame, check: Check) -> list[Finding]:
    """One finding for the run where the median step's overlappable time reaches the check's warning share of
    the mean step: citing each rank's longest exposed reductions. A noisy step alone makes none."""
    if table.is_empty():
        return []
    overlappable = float(table["overlappable_us"].median())
    step_us = float(table["step_us"].mean())
    share = overlappable / step_us if step_us else 0.0
    severity = graded(share, check)
    if severity is None:
        return []
    steps = table["step"].to_list()
    ranks = sorted({rank for ranks in table["ranks"] for rank in ranks})
    cited = aligned.filter(
        pl.col("name").str.contains(check["reduction_kernel"])
        & pl.col("step").is_in(steps)
        & pl.col("loc").is_not_null()
    ).sort("exposed_us", descending=True)
    evidence = tuple(
        cite_events(
            file, rows["loc"].head(CITED_PER_RANK).to_list(), rows.height, {"rank": rows["rank"][0], "steps": steps}
        )
        for (file,), rows in cited.partition_by("file", as_dict=True, maintain_order=True).items()
    )
    if not evidence:
        return []
    exposed, compute = float(table["exposed_us"].median()), float(table["compute_us"].median())
    named = sorted(set(cited["name"].to_list()))[:3]
    names = ", ".join(named)
    message = (
        f"Per step (median over steps {', '.join(map(str, steps))}): {ms(exposed)} of the gradient reductions "
        f"({names}; {int(table['reductions'].median())} aligned on every rank) run with no compute beside them on "
        f"every one of ranks {', '.join(map(str, ranks))} (the least exposed rank's time in each, summed), "
        f"{pct(share)} of the {ms(step_us)} step; the least computing rank computes {ms(compute)} of it."
    )
    metrics = {
        "share": round(share, 4),
        "overlappable_us": round(overlappable, 3),
        "exposed_us": round(exposed, 3),
        "compute_us": round(compute, 3),
        "step_us": round(step_us, 3),
        "reductions": int(table["reductions"].median()),
        "per_step_us": [round(value, 3) for value in table["overlappable_us"].to_list()],
        "names": named,
    }
    title = f"Gradient reductions run exposed on every rank: {ms(overlappable)} per step ({pct(share)} of the step)"
    return [
        Finding(
            check=CHECK,
            severity=severity,
            title=title,
            message=message,
            evidence=evidence,
            metrics=metrics,
            ranks=tuple(ranks),
            steps=tuple(steps),
        )
    ]
