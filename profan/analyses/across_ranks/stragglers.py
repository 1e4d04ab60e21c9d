"""Stragglers: which rank arrives last at the collectives, how much the others wait for it, and why it is late.

The arrivals and hold-ups come from `profan.analyses.across_ranks.straggler_arrivals`. A hold-up of at least
``min_step_share`` of the step, in at least half of the profiled steps, names the rank; the others' extra wait is
(members - 1) × that. When the whole cluster is staggered (DLRM: every rank starts the first collective at a
different time) no single collective shows an outlier, but the rank that is last again and again still does at
the later ones.

Then the explanation (`straggler_windows`): the straggler's pre-collective windows against a
typical rank's, split into extra device work and time with no device work at all. A late rank whose own windows
are normal only inherited the delay through an earlier collective (an info note). Evidence cites the collective
rows and the kernel rows on both the slow and the typical rank (`profan.analyses.across_ranks.straggler_evidence`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from profan.analyses.across_ranks.straggler_arrivals import CHECK, instance_table, lateness_table, rank_step_table
from profan.analyses.across_ranks.straggler_evidence import cite_ops, straggler_evidence
from profan.analyses.across_ranks.straggler_late_rank import LateRank, inherited, late_rank
from profan.analyses.across_ranks.straggler_text import step_text, straggler_message, where_last
from profan.analyses.common import graded
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks, ms
from profan.rulepack.pack import RulePack


def _step_time(steps: pl.DataFrame, step) -> float | None:
    if steps.is_empty() or "step_us" not in steps.columns:
        return None
    s = steps.filter(pl.col("step").eq_missing(step))["step_us"].drop_nulls()
    return float(s.median()) if s.len() else None


def straggler_findings(
    ranks: list[RankData], aligned: pl.DataFrame, steps: pl.DataFrame, pack: RulePack
) -> tuple[dict[str, pl.DataFrame], list[Finding]]:
    """Tables (per rank and step; per collective) and findings: named stragglers, or an explicit 'none'."""
    chk = pack.check(CHECK)
    late = lateness_table(aligned, pack) if not aligned.is_empty() else pl.DataFrame()
    if late.is_empty():
        return {}, []
    per = rank_step_table(late)
    inst = instance_table(late)
    tables = {"straggler_ranks": per, "collective_arrivals": inst}
    step_us = {s: _step_time(steps, s) for s in per["step"].unique().to_list()}
    per = per.with_columns(
        pl.col("step").replace_strict(step_us, default=None, return_dtype=pl.Float64).alias("step_us")
    )
    per = per.with_columns(pl.coalesce(pl.col("step_us"), pl.col("lag_us") * 0 + float("inf")).alias("step_us"))
    floor = pl.max_horizontal(pl.lit(chk["min_lag_us"]), chk["min_step_share"] * pl.col("step_us"))
    per = per.with_columns(((pl.col("times_flagged") > 0) & (pl.col("lag_us") >= floor)).alias("holds_up"))
    # a straggler holds the others up step after step: in at least half the profiled steps. A rank that does it
    # in one step of several is jitter of its host (on a CPU shared by several processes, the one that got the
    # core last), not a property of the rank.
    need = (per["step"].n_unique() + 1) // 2
    per = per.with_columns((pl.col("holds_up") & (pl.col("holds_up").sum().over("rank") >= need)).alias("straggler"))
    tables["straggler_ranks"] = per
    hits = per.filter(pl.col("straggler"))
    ranks_by = {rank.rank: rank for rank in ranks}
    findings: list[Finding] = []
    if hits.is_empty():
        findings.append(_none_finding(late, inst, per, chk))
        return tables, findings
    for (slow,), h in hits.group_by(["rank"], maintain_order=True):
        findings.append(_straggler_finding(int(slow), h.sort("step"), Lateness(late, per, steps), ranks_by, pack))
    return tables, findings


@dataclass(frozen=True)
class Lateness:
    """What every straggler of a job is judged against: each rank's lateness at each aligned collective
    (`lateness_table`), the per rank and step table (`rank_step_table`, with ``step_us`` and ``holds_up``) and
    the job's step times."""

    late: pl.DataFrame
    per_step: pl.DataFrame
    steps: pl.DataFrame


def _straggler_finding(
    slow: int, held_up: pl.DataFrame, lateness: Lateness, ranks_by: dict[int, RankData], pack: RulePack
) -> Finding:
    """A named straggler (warning, critical from critical_share of the step) — or, when its own windows explain
    too little of its lateness, a note that it only inherited the delay. ``held_up``: its rows of the per rank
    and step table where it holds the others up."""
    check = pack.check(CHECK)
    straggler = late_rank(slow, held_up, lateness.late, lateness.per_step, ranks_by, pack)
    worst = straggler.worst
    metrics = _straggler_metrics(straggler, lateness.per_step["step"].n_unique())
    evidence = straggler_evidence(straggler, lateness.late, lateness.steps)
    n_coll, step_txt = int(worst["collectives"]), step_text(straggler.step)
    if inherited(straggler, check):
        return Finding(
            check=CHECK,
            severity=check.severity_for("inherited"),
            rank=slow,
            step=straggler.step,
            title=f"Rank {slow} arrives late in {step_txt} only because of an earlier collective",
            message=(
                f"Rank {slow} arrives last at {int(worst['times_last'])} of {n_coll} aligned collectives in "
                f"{step_txt} ({where_last(straggler)}), {ms(worst['lag_us'])} behind the second-latest rank in total, "
                f"but its own pre-collective windows are no longer than rank {straggler.typical}'s ("
                f"{ms(straggler.why.extra_window_us)} difference): it left its previous collective late, i.e. it "
                "waited there for a slower rank of another group. Not a straggler itself."
            ),
            metrics={**metrics, "cause_class": "propagated"},
            evidence=evidence,
        )
    named = (graded(straggler.share, check) if straggler.share is not None else None) or check.severity
    return Finding(
        check=CHECK,
        severity=named,
        rank=slow,
        step=straggler.step,
        title=(
            f"Rank {slow} is a straggler in {step_txt}: last at {int(worst['times_last'])} of "
            f"{n_coll} collectives, holding them up {ms(worst['lag_us'])} "
            f"({straggler.why.cause_class.replace('_', ' ')})"
        ),
        message=straggler_message(straggler, check),
        metrics=metrics,
        evidence=evidence,
    )


def _straggler_metrics(lr: LateRank, profiled: int) -> dict:
    """The finding's numbers. ``lag_us_per_profiled_step``: its hold-up summed over the steps it holds the others
    up in, per step profiled (``profiled``), what it costs a step on average: one bad step of several is
    not a rank that is late every step (rules/severity.toml grades it by this)."""
    worst, share, top = lr.worst, lr.share, lr.top
    also = {
        str(rank): sorted(int(last_row) + 1 for last_row in g["seq"])
        for (rank,), g in lr.also.sort("rank").group_by(["rank"], maintain_order=True)
    }
    return {
        "rank": lr.rank,
        "step": lr.step,
        "typical_rank": lr.typical,
        "lag_us": round(worst["lag_us"], 3),
        "late_vs_median_us": round(worst["late_vs_median_us"], 3),
        "times_flagged": int(worst["times_flagged"]),
        "lag_us_per_step": {str(s): round(v, 3) for s, v in lr.steps.select("step", "lag_us").iter_rows()},
        "lag_us_per_profiled_step": round(float(lr.steps["lag_us"].sum()) / max(profiled, 1), 3),
        "times_last": int(worst["times_last"]),
        "last_at": sorted(int(last_row) + 1 for last_row in lr.last_rows["seq"]),
        "collectives": int(worst["collectives"]),
        "peers_wait_us": round(worst["peers_wait_us"], 3),
        "caused_wait_us": round(worst["caused_wait_us"], 3),
        "step_share": round(share, 4) if share else None,
        "peers_recorded_wait_us": round(float(lr.recorded.sum()), 3) if lr.recorded.len() else None,
        "worst_start_lag_us": round(top["start_lag_us"], 3),
        "worst_end_spread_us": top["end_spread_us"],
        "also_last": also if lr.also.height else {},
        **lr.why.metrics(),
    }


def _none_finding(late: pl.DataFrame, inst: pl.DataFrame, per: pl.DataFrame, chk) -> Finding:
    top = inst.sort("last_lateness_us", descending=True).row(0, named=True)
    rows = late.filter(
        pl.col("step").eq_missing(top["step"]) & (pl.col("group") == top["group"]) & (pl.col("seq") == top["seq"])
    )
    # the median arrival: the middle rank's, or with an even number of ranks the mean of the two middle ones —
    # both are cited then, so the lateness can be checked against the rows
    ordered = sorted(rows.select("lateness_us", "rank").iter_rows())
    med_ranks = sorted({ordered[(rows.height - 1) // 2][1], ordered[rows.height // 2][1]})
    med_rank = ordered[rows.height // 2][1]
    evidence = [
        e
        for e in (
            cite_ops(
                rows.filter(pl.col("rank") == top["last_rank"]),
                top["last_rank"],
                {"source": "aligned collectives", "step": top["step"], "role": "last"},
            ),
            *[
                cite_ops(
                    rows.filter(pl.col("rank") == m),
                    m,
                    {"source": "aligned collectives", "step": top["step"], "role": "median"},
                )
                for m in med_ranks
            ],
        )
        if e is not None
    ]
    n_steps = per["step"].n_unique()
    worst = per.sort("lag_us", descending=True).row(0, named=True)
    return Finding(
        check=CHECK,
        severity=chk.severity_for("no_straggler"),
        title=f"No straggler: {inst.height} aligned collectives, last arrivals within normal jitter",
        message=(
            f"No straggler: across {inst.height} aligned collectives in {n_steps} step(s) on "
            f"{per['rank'].n_unique()} ranks ({fmt_ranks(per['rank'].unique().to_list())}), the largest "
            f"lateness of a last arrival is {top['last_lateness_us']:,.1f} µs behind the median rank (rank "
            f"{top['last_rank']} at {top['name']}, step {top['step']}), and the largest hold-up of a rank in a "
            f"step is {worst['lag_us']:,.1f} µs (rank {worst['rank']}, step {worst['step']}). A rank is named "
            f"when, at collectives where it is an outlier last arrival ({chk['mad_z']:g} robust deviations and "
            f"{chk['min_lag_us']:,.0f} µs behind the median), it holds the others up by at least "
            f"{100 * chk['min_step_share']:.0f}% of the step."
        ),
        metrics={
            "collectives": inst.height,
            "max_last_lateness_us": round(top["last_lateness_us"], 3),
            "max_step_lag_us": round(worst["lag_us"], 3),
            "max_step_lag_rank": worst["rank"],
            "median_rank": med_rank,
            "median_ranks": med_ranks,
            "last_rank": top["last_rank"],
            "median_of_median_lateness_us": round(statistics.median(inst["last_lateness_us"].to_list()), 3),
        },
        evidence=tuple(evidence),
    )
