"""Stragglers: which rank arrives last at the collectives, how much the others wait for it, and why it is late.

Per aligned collective (``align.align``) the last-arriving rank is the one with the shortest op; its lateness is
``median(duration) - its duration``. A last arrival is an *outlier* only when its lateness is above ``mad_z``
robust standard deviations (1.4826 × median absolute deviation of that collective's lateness) and above
``min_lag_us`` — so ordinary jitter never counts. A rank's *hold-up* in a step is, summed over the collectives
where it is the outlier last arrival, how much later it came than the second-latest rank: the time those
collectives would have finished sooner without it. A hold-up of at least ``min_step_share`` of the step, in at
least half of the profiled steps, names the rank; the others' extra wait is (members - 1) × that. When the whole
cluster is staggered (DLRM: every rank starts the first collective at a different time) no single collective shows
an outlier, but the rank that is last again and again still does at the later ones.

Then the explanation: for the outlier collectives, the straggler's pre-collective window (end of its previous
communication op -> start of this one) is compared with a typical rank's. The extra window time splits into extra
device work (by bucket and kernel, "more kernels" or "slower kernels of the same name") and time with no device
work at all (a host-side gap: dispatch, data loading, Python), with the longest idle stretch and the rows around it.
A late rank whose own windows are normal only inherited the delay through an earlier collective (an info note).
Evidence cites the collective rows and the kernel rows on both the slow and the typical rank.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import polars as pl

from profan.analyses.common import fmt_ranks, graded, ms
from profan.model.evidence import Evidence, cite_events, cite_lines, cite_pointers
from profan.model.findings import Finding
from profan.ranks.rankmap import RankData
from profan.rulepack.pack import Check, RulePack

KEY = ["step", "group", "seq"]
CHECK = "straggler"


def lateness_table(aligned: pl.DataFrame, pack: RulePack) -> pl.DataFrame:
    """aligned rows + is_last, second lateness, robust scale, instance outlier, caused/peer wait, start lag."""
    chk = pack.check(CHECK)
    a = aligned.filter(pl.col("present") >= chk["min_ranks"])
    if a.is_empty():
        return a
    a = a.with_columns(
        (pl.col("lateness_us").rank("ordinal", descending=True).over(KEY) == 1).alias("is_last"),
        pl.col("lateness_us").sort(descending=True).get(1).over(KEY).alias("second_us"),
        pl.col("lateness_us").sum().over(KEY).alias("_sum"),
        (pl.col("start_us") - pl.col("start_us").min().over(KEY)).alias("start_lag_us"),
    )
    a = a.with_columns(
        (1.4826 * (pl.col("lateness_us") - pl.col("lateness_us").median().over(KEY)).abs().median().over(KEY)).alias(
            "sigma_us"
        )
    )
    a = a.with_columns(
        (
            pl.col("is_last")
            & (pl.col("lateness_us") >= chk["min_lag_us"])
            & (pl.col("lateness_us") >= chk["mad_z"] * pl.col("sigma_us"))
        ).alias("flagged"),
        ((pl.col("present") - 1) * (pl.col("lateness_us") - pl.col("second_us"))).alias("caused_us"),
        # every peer waited (its lateness gap to the last rank); summed over peers
        (pl.col("present") * pl.col("lateness_us") - pl.col("_sum")).alias("peers_wait_us"),
    ).drop("_sum")
    return a


def rank_step_table(late: pl.DataFrame) -> pl.DataFrame:
    """Per (step, rank): collectives, times last, times an outlier, and the hold-up: summed over the collectives
    where it is the outlier last arrival, how much later it came than the second-latest rank — the time each of
    those collectives would have finished sooner without it (``lag_us``; peers' extra wait is (n-1) times that)."""
    if late.is_empty():
        return pl.DataFrame()
    flagged = pl.col("flagged")
    return (
        late.with_columns((pl.col("lateness_us") - pl.col("second_us")).alias("_margin"))
        .group_by("step", "rank")
        .agg(
            pl.len().alias("collectives"),
            pl.col("is_last").sum().alias("times_last"),
            flagged.sum().alias("times_flagged"),
            pl.col("_margin").filter(flagged).sum().alias("lag_us"),
            pl.col("lateness_us").filter(flagged).sum().alias("late_vs_median_us"),
            pl.col("caused_us").filter(flagged).sum().alias("caused_wait_us"),
            pl.col("peers_wait_us").filter(pl.col("is_last")).sum().alias("peers_wait_us"),
            pl.col("lateness_us").sum().alias("lateness_sum_us"),
        )
        .sort("step", "rank")
    )


def instance_table(late: pl.DataFrame) -> pl.DataFrame:
    """One row per aligned collective: who was last, by how much, spreads of starts and ends."""
    if late.is_empty():
        return pl.DataFrame()
    last = late.filter(pl.col("is_last"))
    return last.select(
        "step",
        "group",
        "group_name",
        "seq",
        "name",
        "present",
        pl.col("rank").alias("last_rank"),
        pl.col("lateness_us").alias("last_lateness_us"),
        "sigma_us",
        "flagged",
        "start_spread_us",
        "end_spread_us",
    ).sort("step", "group", "seq")


def _step_time(steps: pl.DataFrame, step) -> float | None:
    if steps.is_empty() or "step_us" not in steps.columns:
        return None
    s = steps.filter(pl.col("step").eq_missing(step))["step_us"].drop_nulls()
    return float(s.median()) if s.len() else None


def _cite_ops(rows: pl.DataFrame, rank: int, select: dict) -> Evidence | None:
    """Evidence on one rank's communication op rows (pointer, CSV line or event index, whichever the source has)."""
    if rows.is_empty():
        return None
    rows = rows.sort("lateness_us", descending=True)
    values = {
        "rank": rank,
        "dur_us": [round(x, 3) for x in rows["dur_us"].to_list()[:20]],
        "lateness_us": [round(x, 3) for x in rows["lateness_us"].to_list()[:20]],
    }
    kind, file = rows["loc_kind"][0], rows["file"][0]
    if kind == "pointers":
        return cite_pointers(file, rows["pointer"].to_list(), select, values=values)
    if kind == "events":
        return cite_events(file, rows["loc"].to_list(), rows.height, select, values=values)
    return cite_lines(file, rows["loc"].to_list(), rows.height, select, values=values)


def _window(ranks_by: dict[int, RankData], rank: int, cids: list[int]) -> tuple[float, pl.DataFrame | None]:
    """(summed window length, summed kernels per (op, name)) over the given ops of one rank."""
    r = ranks_by[rank]
    c = r.collectives.filter(pl.col("cid").is_in(cids))
    length = float((c["start_us"] - c["win_start_us"]).fill_null(0).sum())
    if r.windows is None or r.windows.is_empty():
        return length, None
    w = (
        r.windows.filter(pl.col("cid").is_in(cids))
        .group_by("op", "name", "bucket")
        .agg(
            pl.col("count").sum(),
            pl.col("time_us").sum(),
            pl.col("locs").list.explode(keep_nulls=False, empty_as_null=False).alias("locs"),
            pl.col("loc_file").first(),
            pl.col("loc_kind").first(),
        )
    )
    return length, w


@dataclass(frozen=True)
class WindowComparison:
    """What `explain` found: the slow rank's pre-collective windows against the typical rank's at the same
    collectives, and the extra time split into device work and time with no device work.

    ``cause_class``: "compute" (more or slower kernels), "host_gap" (the device sat idle) or "unknown" (kernel
    rows missing on one rank: then the split fields stay None)."""

    window_us: float
    typical_window_us: float
    extra_window_us: float
    cause_class: str = "unknown"
    kernels: list[dict] = field(default_factory=list)  # the kernels with the most extra time, largest first
    by_bucket: dict[str, float] = field(default_factory=dict)  # extra time per bucket, largest first
    kernel_rows: pl.DataFrame | None = None  # the rows of ``kernels`` on both ranks, for evidence
    extra_compute_us: float | None = None
    extra_idle_us: float | None = None
    gap: dict | None = None  # the slow rank's longest idle stretch (`_largest_gap`)
    cpu: bool = False  # a CPU-only trace: the work is the main thread's ops, not device kernels (wording)

    @property
    def split(self) -> bool:
        return self.extra_compute_us is not None

    def metrics(self) -> dict:
        """The comparison as finding metrics (the kernel rows are evidence, not numbers)."""
        out = {
            "window_us": self.window_us,
            "typical_window_us": self.typical_window_us,
            "extra_window_us": self.extra_window_us,
            "cause_class": self.cause_class,
            "kernels": self.kernels,
            "by_bucket": self.by_bucket,
        }
        if self.split:
            out.update(extra_compute_us=self.extra_compute_us, extra_idle_us=self.extra_idle_us, gap=self.gap)
        return out


def explain(
    ranks_by: dict[int, RankData], late: pl.DataFrame, slow: int, typical: int, inst: pl.DataFrame, pack: RulePack
) -> WindowComparison:
    """Compare the pre-collective windows of the slow and the typical rank at the flagged collectives."""
    chk = pack.check(CHECK)
    rows = late.join(inst.select(KEY), on=KEY, how="semi")
    len_s, w_s = _window(ranks_by, slow, rows.filter(pl.col("rank") == slow)["cid"].to_list())
    len_t, w_t = _window(ranks_by, typical, rows.filter(pl.col("rank") == typical)["cid"].to_list())
    lengths = {
        "window_us": round(len_s, 3),
        "typical_window_us": round(len_t, 3),
        "extra_window_us": round(len_s - len_t, 3),
    }
    lengths["cpu"] = _cpu_only(ranks_by[slow])
    if w_s is None or w_t is None:
        return WindowComparison(**lengths)
    busy_s, busy_t = float(w_s["time_us"].sum()), float(w_t["time_us"].sum())
    extra_busy = busy_s - busy_t
    extra_idle = (len_s - busy_s) - (len_t - busy_t)
    both = _kernel_deltas(w_s, w_t)
    top = both.filter(pl.col("delta_us") > max(1.0, 0.05 * max(extra_busy, 0.0))).head(5)
    total = max(len_s - len_t, extra_busy + max(extra_idle, 0.0), 1e-9)
    return WindowComparison(
        **lengths,
        cause_class="host_gap" if extra_idle >= chk["host_gap_share"] * total else "compute",
        kernels=[_kernel_delta(r) for r in top.iter_rows(named=True)],
        by_bucket={
            b: round(v, 3)
            for b, v in both.group_by("bucket")
            .agg(pl.col("delta_us").sum())
            .sort(["delta_us", "bucket"], descending=[True, False])
            .iter_rows()
            if abs(v) >= 1.0
        },
        kernel_rows=top,
        extra_compute_us=round(extra_busy, 3),
        extra_idle_us=round(extra_idle, 3),
        gap=_largest_gap(ranks_by, rows, slow, typical),
    )


def _cpu_only(r: RankData) -> bool:
    """Whether the rank's trace measured the CPU only (its step split says so): then its "kernels" are the main
    thread's ops and idle time is time the main thread ran none."""
    t = r.trace_steps
    return t is not None and "device" in t.columns and t.height > 0 and (t["device"] == "CPU").all()


def _kernel_deltas(slow: pl.DataFrame, typical: pl.DataFrame) -> pl.DataFrame:
    """Kernels per (op, name, bucket) of both windows side by side (typical: ``_t``), most extra time first."""
    both = slow.join(typical, on=["op", "name", "bucket"], how="full", coalesce=True, suffix="_t").with_columns(
        pl.col("time_us").fill_null(0.0),
        pl.col("time_us_t").fill_null(0.0),
        pl.col("count").fill_null(0),
        pl.col("count_t").fill_null(0),
    )
    # ties by bucket and name: the kernels named must not depend on the grouping's row order
    return both.with_columns((pl.col("time_us") - pl.col("time_us_t")).alias("delta_us")).sort(
        ["delta_us", "bucket", "op", "name"], descending=[True, False, False, False], nulls_last=True
    )


def _kernel_delta(r: dict) -> dict:
    return {
        "op": r["op"],
        "name": r["name"],
        "bucket": r["bucket"],
        "delta_us": round(r["delta_us"], 3),
        "time_us": round(r["time_us"], 3),
        "typical_time_us": round(r["time_us_t"], 3),
        "count": int(r["count"]),
        "typical_count": int(r["count_t"]),
        "how": "slower kernels of the same name" if r["count"] == r["count_t"] else "extra kernels",
    }


def _largest_gap(ranks_by: dict[int, RankData], rows: pl.DataFrame, slow: int, typical: int) -> dict | None:
    """The slow rank's longest stretch without device work over the compared windows, and the typical rank's
    longest stretch in the same window: the kernel rows on either side are the evidence of a host gap."""
    cs = ranks_by[slow].collectives
    if cs is None or "gap_us" not in cs.columns:
        return None
    mine = (
        rows.filter(pl.col("rank") == slow)
        .select(*KEY, "cid")
        .join(cs.select("cid", "gap_us", "gap_prev_loc", "gap_loc", "kfile"), on="cid")
    )
    mine = mine.filter(pl.col("gap_us").is_not_null()).sort("gap_us", descending=True)
    if mine.is_empty():
        return None
    top = mine.row(0, named=True)
    out = {
        "rank": slow,
        "gap_us": round(top["gap_us"], 3),
        "file": top["kfile"],
        "lines": [x for x in (top["gap_prev_loc"], top["gap_loc"]) if x is not None],
        "step": top["step"],
        "group": top["group"],
        "seq": top["seq"],
    }
    ct = ranks_by[typical].collectives
    trow = rows.filter(
        (pl.col("rank") == typical)
        & (pl.col("step").eq_missing(top["step"]))
        & (pl.col("group") == top["group"])
        & (pl.col("seq") == top["seq"])
    )
    if ct is not None and trow.height and "gap_us" in ct.columns:
        t = ct.filter(pl.col("cid") == trow["cid"][0]).row(0, named=True)
        out["typical"] = {
            "rank": typical,
            "gap_us": t["gap_us"],
            "file": t["kfile"],
            "lines": [x for x in (t["gap_prev_loc"], t["gap_loc"]) if x is not None],
        }
    return out


def _kernel_evidence(top: pl.DataFrame | None, side: str, rank: int, step) -> list[Evidence]:
    if top is None or top.is_empty():
        return []
    sfx = "" if side == "slow" else "_t"
    rows = top.filter(pl.col(f"count{sfx}") > 0)
    if rows.is_empty():
        return []
    locs = [x for lst in rows[f"locs{sfx}"].to_list() if lst for x in lst]
    file, kind = rows[f"loc_file{sfx}"].drop_nulls()[0], rows[f"loc_kind{sfx}"].drop_nulls()[0]
    n = int(rows[f"count{sfx}"].sum())
    select = {
        "source": "kernels in pre-collective windows",
        "rank": rank,
        "step": step,
        "names": rows["name"].to_list(),
    }
    values = {"time_us": round(float(rows[f"time_us{sfx}"].sum()), 3)}
    if kind == "events":
        return [cite_events(file, locs, n, select, values=values)]
    return [cite_lines(file, locs, n, select, values=values)]


def _gap_evidence(gap: dict | None, step) -> list[Evidence]:
    """The two rows around the slow rank's longest idle stretch, and the typical rank's rows in the same window."""
    out: list[Evidence] = []
    if not gap or not gap.get("lines") or not gap.get("file"):
        return out
    for g, role in ((gap, "slow"), (gap.get("typical"), "typical")):
        if not g or not g.get("lines") or not g.get("file"):
            continue
        cite = cite_events if g["file"].endswith((".json", ".json.gz")) else cite_lines
        out.append(
            cite(
                g["file"],
                g["lines"],
                len(g["lines"]),
                {
                    "source": "longest idle gap in the pre-collective window",
                    "rank": g["rank"],
                    "step": step,
                    "role": role,
                },
                values={"gap_us": g["gap_us"]},
            )
        )
    return out


def _step_rows(steps: pl.DataFrame, rank: int, step_list: list) -> list[Evidence]:
    if steps.is_empty() or "src_line" not in steps.columns:
        return []
    s = steps.filter((pl.col("rank") == rank) & pl.col("step").is_in([x for x in step_list if x is not None]))
    if s.is_empty():
        return []
    return [
        cite_lines(
            s["file"][0],
            s["src_line"].to_list(),
            s.height,
            {"source": "step_trace_time", "rank": rank},
            values={"Free": s["free_us"].to_list(), "Computing": s["computing_us"].to_list()},
        )
    ]


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
    ranks_by = {r.rank: r for r in ranks}
    findings: list[Finding] = []
    if hits.is_empty():
        findings.append(_none_finding(late, inst, per, chk))
        return tables, findings
    for (slow,), h in hits.group_by(["rank"], maintain_order=True):
        findings.append(_straggler_finding(int(slow), h.sort("step"), late, per, steps, ranks_by, pack))
    return tables, findings


def _inherited(late: LateRank, chk: Check) -> bool:
    """Late, but not by its own doing: its pre-collective windows are no longer than the typical rank's, so it
    inherited the delay through an earlier collective (e.g. the TP partner of a straggler, late at EP)."""
    why = late.why
    lag_us = round(late.worst["lag_us"], 3)  # as the finding states it
    return why.cause_class != "unknown" and why.extra_window_us < chk["own_window_share"] * lag_us


def _typical_rank(per: pl.DataFrame, step, exclude: set[int], candidates: set[int]) -> int:
    s = per.filter(
        pl.col("step").eq_missing(step) & ~pl.col("rank").is_in(list(exclude)) & pl.col("rank").is_in(list(candidates))
    )
    vals = sorted(s.select("lateness_sum_us", "rank").iter_rows())
    return int(vals[len(vals) // 2][1])


def _ordinal_list(seqs: list[int]) -> str:
    """[0,1,2,3,4] -> 'collectives 1–5'; [5,6] -> 'collectives 6, 7'."""
    n = sorted(x + 1 for x in seqs)
    if len(n) == 1:
        return f"collective {n[0]}"
    if len(n) > 2 and n == list(range(n[0], n[-1] + 1)):
        return f"collectives {n[0]}–{n[-1]}"
    return "collectives " + ", ".join(map(str, n))


@dataclass(frozen=True)
class LateRank:
    """The numbers behind one straggler finding: the rank in the step where it holds the others up most, against
    a typical rank of the same collectives."""

    rank: int
    step: int | None
    worst: dict  # its straggler_ranks row in that step
    steps: pl.DataFrame  # its straggler_ranks rows of every step it is a straggler in
    last_rows: pl.DataFrame  # its aligned rows in that step where it arrives last
    picked: pl.DataFrame  # ... and where it is an outlier
    top: dict  # the last arrival it starts latest at (clock check)
    typical: int
    why: WindowComparison
    share: float | None  # hold-up / step time
    recorded: pl.Series  # the peers' own Wait Time at the picked collectives (communication.json)
    also: pl.DataFrame  # other ranks last in that step, below the straggler threshold


def _late_rank(
    slow: int, h: pl.DataFrame, late: pl.DataFrame, per: pl.DataFrame, ranks_by: dict[int, RankData], pack: RulePack
) -> LateRank:
    chk = pack.check(CHECK)
    worst = h.sort("lag_us", descending=True).row(0, named=True)
    step = worst["step"]
    in_step = pl.col("step").eq_missing(step)
    mine = late.filter((pl.col("rank") == slow) & in_step)
    picked = mine.filter(pl.col("flagged"))
    at_picked = late.join(picked.select(KEY), on=KEY, how="semi")
    members = set(at_picked["rank"].to_list())
    stragglers = set(per.filter(pl.col("straggler"))["rank"].to_list())
    late_ranks = set(per.filter(in_step & (pl.col("times_flagged") > 0))["rank"].to_list())
    # a typical rank: not late itself where possible, and present at the same collectives
    typical = next(
        _typical_rank(per, step, ex, members)
        for ex in (stragglers | late_ranks | {slow}, stragglers | {slow}, {slow})
        if members - ex
    )
    last_rows = mine.filter(pl.col("is_last")).sort("group", "seq")
    others = per.filter(in_step & (pl.col("rank") != slow) & ~pl.col("straggler"))
    also = late.filter(
        in_step
        & pl.col("is_last")
        & (pl.col("lateness_us") >= chk["min_lag_us"])
        & pl.col("rank").is_in(others["rank"].implode())
    )
    return LateRank(
        rank=slow,
        step=step,
        worst=worst,
        steps=h,
        last_rows=last_rows,
        picked=picked,
        top=last_rows.sort("start_lag_us", descending=True).row(0, named=True),
        typical=typical,
        why=explain(ranks_by, late, slow, typical, picked.select(KEY), pack),
        share=worst["lag_us"] / worst["step_us"] if worst["step_us"] not in (None, float("inf")) else None,
        recorded=at_picked.filter(pl.col("rank") != slow)["wait_us"].drop_nulls(),
        also=also,
    )


def _straggler_finding(
    slow: int,
    h: pl.DataFrame,
    late: pl.DataFrame,
    per: pl.DataFrame,
    steps: pl.DataFrame,
    ranks_by: dict[int, RankData],
    pack: RulePack,
) -> Finding:
    """A named straggler (warning, critical from critical_share of the step) — or, when its own windows explain
    too little of its lateness, a note that it only inherited the delay."""
    chk = pack.check(CHECK)
    lr = _late_rank(slow, h, late, per, ranks_by, pack)
    worst = lr.worst
    metrics = _straggler_metrics(lr)
    evidence = _straggler_evidence(lr, late, steps)
    n_coll, step_txt = int(worst["collectives"]), _step_text(lr.step)
    if _inherited(lr, chk):
        return Finding(
            check=CHECK,
            severity=chk.severity_for("inherited"),
            rank=slow,
            step=lr.step,
            title=f"Rank {slow} arrives late in {step_txt} only because of an earlier collective",
            message=(
                f"Rank {slow} arrives last at {int(worst['times_last'])} of {n_coll} aligned collectives in "
                f"{step_txt} ({_where_last(lr)}), {ms(worst['lag_us'])} behind the second-latest rank in total, "
                f"but its own pre-collective windows are no longer than rank {lr.typical}'s ("
                f"{ms(lr.why.extra_window_us)} difference): it left its previous collective late, i.e. it "
                "waited there for a slower rank of another group. Not a straggler itself."
            ),
            metrics={**metrics, "cause_class": "propagated"},
            evidence=evidence,
        )
    named = (graded(lr.share, chk) if lr.share is not None else None) or chk.severity
    return Finding(
        check=CHECK,
        severity=named,
        rank=slow,
        step=lr.step,
        title=(
            f"Rank {slow} is a straggler in {step_txt}: last at {int(worst['times_last'])} of "
            f"{n_coll} collectives, holding them up {ms(worst['lag_us'])} "
            f"({lr.why.cause_class.replace('_', ' ')})"
        ),
        message=_straggler_message(lr, chk),
        metrics=metrics,
        evidence=evidence,
    )


def _step_text(step: int | None) -> str:
    return f"step {step}" if step is not None else "the profile"


def _where_last(lr: LateRank) -> str:
    """Which collectives of which groups it arrives last at: 'collectives 1–5 of group 123; collective 2 of …'."""
    return "; ".join(
        f"{_ordinal_list(g['seq'].to_list())} of group {grp}"
        for (grp,), g in lr.last_rows.group_by(["group"], maintain_order=True)
    )


def _straggler_message(lr: LateRank, chk: Check) -> str:
    worst, share = lr.worst, lr.share
    return (
        f"Rank {lr.rank} arrives last at {int(worst['times_last'])} of {int(worst['collectives'])} aligned "
        f"collectives in {_step_text(lr.step)} ({_where_last(lr)}). At {int(worst['times_flagged'])} of them "
        f"it is an outlier (over {chk['mad_z']:g} robust deviations and {chk['min_lag_us']:,.0f} µs behind the "
        f"median rank) and holds them up by {ms(worst['lag_us'])} in total after the second-latest rank"
        + (f" ({100 * share:.1f}% of the step)" if share is not None else "")
        + f".{_clock_text(lr, chk)} Peers wait {ms(worst['peers_wait_us'])} inside the collectives it is last "
        f"at (summed over the peers), {ms(worst['caused_wait_us'])} of which only because of it."
        f"{_recorded_text(lr)} Compared with rank {lr.typical} (typical): {_cause_text(lr.why)}"
        f"{_other_steps_text(lr)}{_also_text(lr)}"
    )


def _clock_text(lr: LateRank, chk: Check) -> str:
    """Where the ranks' clocks agree (all end together), the late start itself is visible: say so."""
    top = lr.top
    if top["end_spread_us"] is None or top["end_spread_us"] > chk["min_lag_us"]:
        return ""
    return (
        f" At {_ordinal_list([top['seq']])} ({top['name'].split('(')[0][:60]}) it starts "
        f"{ms(top['start_lag_us'])} after the earliest rank while all ranks end within "
        f"{top['end_spread_us']:,.0f} µs."
    )


def _recorded_text(lr: LateRank) -> str:
    if not lr.recorded.len():
        return ""
    n = lr.picked.height
    return (
        f" The profiler itself records {ms(float(lr.recorded.sum()))} of wait on the peers at "
        f"{'that collective' if n == 1 else f'those {n} collectives'} (Wait Time in communication.json)."
    )


def _other_steps_text(lr: LateRank) -> str:
    h = lr.steps
    if h.height <= 1:
        return ""
    return (
        f" It is a straggler in {h.height} steps ({', '.join(str(s) for s in h['step'].to_list())}), "
        f"{ms(float(h['lag_us'].mean()))} late per step on average."
    )


def _also_text(lr: LateRank) -> str:
    if not lr.also.height:
        return ""
    return (
        " Also last, below the straggler threshold: "
        + "; ".join(
            f"rank {rk} at {_ordinal_list(g['seq'].to_list())} ({ms(float(g['lateness_us'].max()))})"
            for (rk,), g in lr.also.sort("rank", "seq").group_by(["rank"], maintain_order=True)
        )
        + "."
    )


def _straggler_evidence(lr: LateRank, late: pl.DataFrame, steps: pl.DataFrame) -> tuple[Evidence, ...]:
    """The collective rows of the slow and the typical rank where the slow one arrives last, the kernel rows that
    differ in their windows, and for a host gap the rows around the longest idle stretch and the step rows."""
    evidence: list[Evidence] = []
    sel = {"source": "aligned collectives", "step": lr.step, "straggler": lr.rank}
    for rk, label in ((lr.rank, "slow"), (lr.typical, "typical")):
        rows = late.join(lr.last_rows.select(KEY), on=KEY, how="semi").filter(pl.col("rank") == rk)
        ev = _cite_ops(rows, rk, {**sel, "rank": rk, "role": label})
        if ev is not None:
            evidence.append(ev)
    evidence += _kernel_evidence(lr.why.kernel_rows, "slow", lr.rank, lr.step)
    evidence += _kernel_evidence(lr.why.kernel_rows, "typical", lr.typical, lr.step)
    if lr.why.cause_class == "host_gap":
        evidence += _gap_evidence(lr.why.gap, lr.step)
        evidence += _step_rows(steps, lr.rank, [lr.step]) + _step_rows(steps, lr.typical, [lr.step])
    return tuple(evidence)


def _straggler_metrics(lr: LateRank) -> dict:
    worst, share, top = lr.worst, lr.share, lr.top
    also = {
        str(rk): sorted(int(x) + 1 for x in g["seq"])
        for (rk,), g in lr.also.sort("rank").group_by(["rank"], maintain_order=True)
    }
    return {
        "rank": lr.rank,
        "step": lr.step,
        "typical_rank": lr.typical,
        "lag_us": round(worst["lag_us"], 3),
        "late_vs_median_us": round(worst["late_vs_median_us"], 3),
        "times_flagged": int(worst["times_flagged"]),
        "lag_us_per_step": {str(s): round(v, 3) for s, v in lr.steps.select("step", "lag_us").iter_rows()},
        "times_last": int(worst["times_last"]),
        "last_at": sorted(int(x) + 1 for x in lr.last_rows["seq"]),
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


# what the windows hold, in the words of the device the trace measured
_WORDS = {
    False: {
        "work": "device work",
        "rows": "kernel rows",
        "gap": "the device sat idle waiting for work: dispatch, data loading, synchronisation or Python",
        "calls": "launches",
        "none": "no kernel",
    },
    True: {
        "work": "work on the main thread",
        "rows": "op rows",
        "gap": "the main thread ran no op: a sleep, I/O, data loading, synchronisation or Python between ops",
        "calls": "calls",
        "none": "no op",
    },
}


def _cause_text(why: WindowComparison) -> str:
    w = _WORDS[why.cpu]
    if why.cause_class == "unknown":
        return (
            f"its pre-collective windows are {ms(why.extra_window_us)} longer; the {w['rows']} needed to "
            f"split that into {w['work']} and idle time are missing on one of the two ranks."
        )
    parts = [
        f"its pre-collective windows are {ms(why.extra_window_us)} longer: "
        f"{ms(why.extra_compute_us)} more {w['work']} and {ms(why.extra_idle_us)} more time with no "
        f"{w['work']}"
    ]
    if why.cause_class == "host_gap":
        parts.append(f" — a host-side gap ({w['gap']}).{_gap_text(why.gap, w['none'])}")
    else:
        ks = "; ".join(
            f"{k['op']} +{k['delta_us'] / 1000:,.2f} ms ({k['how']}: {k['count']} vs {k['typical_count']} {w['calls']})"
            for k in why.kernels[:3]
        )
        buckets = ", ".join(f"{b} {v / 1000:+,.2f} ms" for b, v in list(why.by_bucket.items())[:3])
        parts.append(f" — extra compute, by bucket {buckets}; largest: {ks}.")
    return "".join(parts)


def _gap_text(g: dict | None, none: str = "no kernel") -> str:
    """Where the slow rank's longest stretch with ``none`` (no kernel, or no op on a CPU-only trace's main
    thread) is, and the typical rank's at the same place."""
    if not g or not g.get("lines"):
        return ""
    unit = "events" if str(g.get("file", "")).endswith((".json", ".json.gz")) else "lines"
    return (
        f" The longest stretch is {ms(g['gap_us'])} with {none}, between {unit} "
        f"{' and '.join(map(str, g['lines']))} of its {'trace' if unit == 'events' else 'kernel file'}"
        + (
            f" (rank {g['typical']['rank']}: {ms(g['typical']['gap_us'])} at the same place)"
            if g.get("typical") and g["typical"].get("gap_us") is not None
            else ""
        )
        + "."
    )


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
            _cite_ops(
                rows.filter(pl.col("rank") == top["last_rank"]),
                top["last_rank"],
                {"source": "aligned collectives", "step": top["step"], "role": "last"},
            ),
            *[
                _cite_ops(
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
