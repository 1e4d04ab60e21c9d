"""Stragglers: which rank arrives last at the collectives, how much the others wait for it, and why it is late.

Per aligned collective (``align.align``) the last-arriving rank is the one with the shortest op; its lateness is
``median(duration) - its duration``. A last arrival is an *outlier* only when its lateness is above ``mad_z``
robust standard deviations (1.4826 × median absolute deviation of that collective's lateness) and above
``min_lag_us`` — so ordinary jitter never counts. A rank's *hold-up* in a step is, summed over the collectives
where it is the outlier last arrival, how much later it came than the second-latest rank: the time those
collectives would have finished sooner without it. A hold-up of at least ``min_step_share`` of the step names the
rank; the others' extra wait is (members - 1) × that. When the whole cluster is staggered (DLRM: every rank starts
the first collective at a different time) no single collective shows an outlier, but the rank that is last again
and again still does at the later ones.

Then the explanation: for the outlier collectives, the straggler's pre-collective window (end of its previous
communication op -> start of this one) is compared with a typical rank's. The extra window time splits into extra
device work (by bucket and kernel, "more kernels" or "slower kernels of the same name") and time with no device
work at all (a host-side gap: dispatch, data loading, Python), with the longest idle stretch and the rows around it.
A late rank whose own windows are normal only inherited the delay through an earlier collective (an info note).
Evidence cites the collective rows and the kernel rows on both the slow and the typical rank.
"""

from __future__ import annotations

import statistics

import polars as pl

from profan.analyses.common import fmt_ranks, ms
from profan.evidence import Evidence, cite_events, cite_lines, cite_pointers
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack

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
        (1.4826 * (pl.col("lateness_us") - pl.col("lateness_us").median().over(KEY)).abs().median().over(KEY))
        .alias("sigma_us"))
    a = a.with_columns(
        (pl.col("is_last") & (pl.col("lateness_us") >= chk["min_lag_us"])
         & (pl.col("lateness_us") >= chk["mad_z"] * pl.col("sigma_us"))).alias("flagged"),
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
    return (late.with_columns((pl.col("lateness_us") - pl.col("second_us")).alias("_margin"))
            .group_by("step", "rank")
            .agg(pl.len().alias("collectives"), pl.col("is_last").sum().alias("times_last"),
                 flagged.sum().alias("times_flagged"),
                 pl.col("_margin").filter(flagged).sum().alias("lag_us"),
                 pl.col("lateness_us").filter(flagged).sum().alias("late_vs_median_us"),
                 pl.col("caused_us").filter(flagged).sum().alias("caused_wait_us"),
                 pl.col("peers_wait_us").filter(pl.col("is_last")).sum().alias("peers_wait_us"),
                 pl.col("lateness_us").sum().alias("lateness_sum_us"))
            .sort("step", "rank"))


def instance_table(late: pl.DataFrame) -> pl.DataFrame:
    """One row per aligned collective: who was last, by how much, spreads of starts and ends."""
    if late.is_empty():
        return pl.DataFrame()
    last = late.filter(pl.col("is_last"))
    return last.select("step", "group", "group_name", "seq", "name", "present", pl.col("rank").alias("last_rank"),
                       pl.col("lateness_us").alias("last_lateness_us"), "sigma_us", "flagged", "start_spread_us",
                       "end_spread_us").sort("step", "group", "seq")


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
    values = {"rank": rank, "dur_us": [round(x, 3) for x in rows["dur_us"].to_list()[:20]],
              "lateness_us": [round(x, 3) for x in rows["lateness_us"].to_list()[:20]]}
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
    w = (r.windows.filter(pl.col("cid").is_in(cids))
         .group_by("op", "name", "bucket")
         .agg(pl.col("count").sum(), pl.col("time_us").sum(),
              pl.col("locs").list.explode(keep_nulls=False, empty_as_null=False).alias("locs"),
              pl.col("loc_file").first(), pl.col("loc_kind").first()))
    return length, w


def explain(ranks_by: dict[int, RankData], late: pl.DataFrame, slow: int, typical: int, inst: pl.DataFrame,
            pack: RulePack) -> dict:
    """Compare the pre-collective windows of the slow and the typical rank at the flagged collectives."""
    chk = pack.check(CHECK)
    rows = late.join(inst.select(KEY), on=KEY, how="semi")
    s_cids = rows.filter(pl.col("rank") == slow)["cid"].to_list()
    t_rows = rows.filter(pl.col("rank") == typical)
    t_cids = t_rows["cid"].to_list()
    len_s, w_s = _window(ranks_by, slow, s_cids)
    len_t, w_t = _window(ranks_by, typical, t_cids)
    out: dict = {"window_us": round(len_s, 3), "typical_window_us": round(len_t, 3),
                 "extra_window_us": round(len_s - len_t, 3), "cause_class": "unknown", "kernels": [],
                 "by_bucket": {}, "kernel_rows": None}
    if w_s is None or w_t is None:
        return out
    busy_s, busy_t = float(w_s["time_us"].sum()), float(w_t["time_us"].sum())
    extra_busy = busy_s - busy_t
    extra_idle = (len_s - busy_s) - (len_t - busy_t)
    out.update(extra_compute_us=round(extra_busy, 3), extra_idle_us=round(extra_idle, 3))
    both = w_s.join(w_t, on=["op", "name", "bucket"], how="full", coalesce=True, suffix="_t").with_columns(
        pl.col("time_us").fill_null(0.0), pl.col("time_us_t").fill_null(0.0), pl.col("count").fill_null(0),
        pl.col("count_t").fill_null(0))
    # ties by bucket and name: the kernels named must not depend on the grouping's row order
    both = both.with_columns((pl.col("time_us") - pl.col("time_us_t")).alias("delta_us")).sort(
        ["delta_us", "bucket", "op", "name"], descending=[True, False, False, False], nulls_last=True)
    out["by_bucket"] = {b: round(v, 3) for b, v in both.group_by("bucket").agg(pl.col("delta_us").sum())
                        .sort(["delta_us", "bucket"], descending=[True, False]).iter_rows() if abs(v) >= 1.0}
    top = both.filter(pl.col("delta_us") > max(1.0, 0.05 * max(extra_busy, 0.0))).head(5)
    out["kernels"] = [{"op": r["op"], "name": r["name"], "bucket": r["bucket"], "delta_us": round(r["delta_us"], 3),
                       "time_us": round(r["time_us"], 3), "typical_time_us": round(r["time_us_t"], 3),
                       "count": int(r["count"]), "typical_count": int(r["count_t"]),
                       "how": "slower kernels of the same name" if r["count"] == r["count_t"] else "extra kernels"}
                      for r in top.iter_rows(named=True)]
    out["kernel_rows"] = top
    total = max(len_s - len_t, extra_busy + max(extra_idle, 0.0), 1e-9)
    out["cause_class"] = "host_gap" if extra_idle >= chk["host_gap_share"] * total else "compute"
    out["gap"] = _largest_gap(ranks_by, rows, slow, typical)
    return out


def _largest_gap(ranks_by: dict[int, RankData], rows: pl.DataFrame, slow: int, typical: int) -> dict | None:
    """The slow rank's longest stretch without device work over the compared windows, and the typical rank's
    longest stretch in the same window: the kernel rows on either side are the evidence of a host gap."""
    cs = ranks_by[slow].collectives
    if cs is None or "gap_us" not in cs.columns:
        return None
    mine = rows.filter(pl.col("rank") == slow).select(*KEY, "cid").join(cs.select("cid", "gap_us", "gap_prev_loc",
                                                                                   "gap_loc", "kfile"), on="cid")
    mine = mine.filter(pl.col("gap_us").is_not_null()).sort("gap_us", descending=True)
    if mine.is_empty():
        return None
    top = mine.row(0, named=True)
    out = {"rank": slow, "gap_us": round(top["gap_us"], 3), "file": top["kfile"],
           "lines": [x for x in (top["gap_prev_loc"], top["gap_loc"]) if x is not None], "step": top["step"],
           "group": top["group"], "seq": top["seq"]}
    ct = ranks_by[typical].collectives
    trow = rows.filter((pl.col("rank") == typical) & (pl.col("step").eq_missing(top["step"]))
                       & (pl.col("group") == top["group"]) & (pl.col("seq") == top["seq"]))
    if ct is not None and trow.height and "gap_us" in ct.columns:
        t = ct.filter(pl.col("cid") == trow["cid"][0]).row(0, named=True)
        out["typical"] = {"rank": typical, "gap_us": t["gap_us"], "file": t["kfile"],
                          "lines": [x for x in (t["gap_prev_loc"], t["gap_loc"]) if x is not None]}
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
    select = {"source": "kernels in pre-collective windows", "rank": rank, "step": step,
              "names": rows["name"].to_list()}
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
        out.append(cite(g["file"], g["lines"], len(g["lines"]),
                        {"source": "longest idle gap in the pre-collective window", "rank": g["rank"], "step": step,
                         "role": role}, values={"gap_us": g["gap_us"]}))
    return out


def _step_rows(steps: pl.DataFrame, rank: int, step_list: list) -> list[Evidence]:
    if steps.is_empty() or "src_line" not in steps.columns:
        return []
    s = steps.filter((pl.col("rank") == rank) & pl.col("step").is_in([x for x in step_list if x is not None]))
    if s.is_empty():
        return []
    return [cite_lines(s["file"][0], s["src_line"].to_list(), s.height, {"source": "step_trace_time", "rank": rank},
                       values={"Free": s["free_us"].to_list(), "Computing": s["computing_us"].to_list()})]


def straggler_findings(ranks: list[RankData], aligned: pl.DataFrame, steps: pl.DataFrame,
                       pack: RulePack) -> tuple[dict[str, pl.DataFrame], list[Finding]]:
    """Tables (per rank and step; per collective) and findings: named stragglers, or an explicit 'none'."""
    chk = pack.check(CHECK)
    late = lateness_table(aligned, pack) if not aligned.is_empty() else pl.DataFrame()
    if late.is_empty():
        return {}, []
    per = rank_step_table(late)
    inst = instance_table(late)
    tables = {"straggler_ranks": per, "collective_arrivals": inst}
    step_us = {s: _step_time(steps, s) for s in per["step"].unique().to_list()}
    per = per.with_columns(pl.col("step").replace_strict(step_us, default=None, return_dtype=pl.Float64)
                           .alias("step_us"))
    per = per.with_columns(pl.coalesce(pl.col("step_us"), pl.col("lag_us") * 0 + float("inf")).alias("step_us"))
    floor = pl.max_horizontal(pl.lit(chk["min_lag_us"]), chk["min_step_share"] * pl.col("step_us"))
    per = per.with_columns(((pl.col("times_flagged") > 0) & (pl.col("lag_us") >= floor)).alias("straggler"))
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


def _propagated_metrics(m: dict, chk) -> bool:
    """Late, but not by its own doing: its pre-collective windows are no longer than the typical rank's, so it
    inherited the delay through an earlier collective (e.g. the TP partner of a straggler, late at EP)."""
    share = chk.params.get("own_window_share", 0.5)
    return m["cause_class"] != "unknown" and m["extra_window_us"] < share * m["lag_us"]


def _typical_rank(per: pl.DataFrame, step, exclude: set[int], candidates: set[int]) -> int:
    s = per.filter(pl.col("step").eq_missing(step) & ~pl.col("rank").is_in(list(exclude))
                   & pl.col("rank").is_in(list(candidates)))
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


def _straggler_finding(slow: int, h: pl.DataFrame, late: pl.DataFrame, per: pl.DataFrame, steps: pl.DataFrame,
                       ranks_by: dict[int, RankData], pack: RulePack) -> Finding:
    chk = pack.check(CHECK)
    worst = h.sort("lag_us", descending=True).row(0, named=True)
    step = worst["step"]
    mine = late.filter((pl.col("rank") == slow) & pl.col("step").eq_missing(step))
    picked = mine.filter(pl.col("flagged"))
    members = set(late.join(picked.select(KEY), on=KEY, how="semi")["rank"].to_list())
    stragglers = set(per.filter(pl.col("straggler"))["rank"].to_list())
    late_ranks = set(per.filter(pl.col("step").eq_missing(step) & (pl.col("times_flagged") > 0))["rank"].to_list())
    typical = next(_typical_rank(per, step, ex, members) for ex in (stragglers | late_ranks | {slow},
                                                                   stragglers | {slow}, {slow})
                   if members - ex)
    why = explain(ranks_by, late, slow, typical, picked.select(KEY), pack)
    n_coll = int(worst["collectives"])
    share = worst["lag_us"] / worst["step_us"] if worst["step_us"] not in (None, float("inf")) else None
    sev = "critical" if share is not None and share >= chk["critical_share"] else "warning"
    steps_txt = (f" It is a straggler in {h.height} steps ({', '.join(str(s) for s in h['step'].to_list())}), "
                 f"{ms(float(h['lag_us'].mean()))} late per step on average." if h.height > 1 else "")
    last_rows = mine.filter(pl.col("is_last")).sort("group", "seq")
    where = "; ".join(f"{_ordinal_list(g['seq'].to_list())} of group {grp}"
                      for (grp,), g in last_rows.group_by(["group"], maintain_order=True))
    top = last_rows.sort("start_lag_us", descending=True).row(0, named=True)
    clock_txt = ""
    if top["end_spread_us"] is not None and top["end_spread_us"] <= chk["min_lag_us"]:
        clock_txt = (f" At {_ordinal_list([top['seq']])} ({top['name'].split('(')[0][:60]}) it starts "
                     f"{ms(top['start_lag_us'])} "
                     f"after the earliest rank while all ranks end within {top['end_spread_us']:,.0f} µs.")
    peers_at = late.join(picked.select(KEY), on=KEY, how="semi").filter(pl.col("rank") != slow)
    recorded = peers_at["wait_us"].drop_nulls()
    recorded_txt = (f" The profiler itself records {ms(float(recorded.sum()))} of wait on the peers at "
                    f"{'that collective' if picked.height == 1 else f'those {picked.height} collectives'} "
                    "(Wait Time in communication.json)." if recorded.len() else "")
    others = per.filter(pl.col("step").eq_missing(step) & (pl.col("rank") != slow) & ~pl.col("straggler"))
    also = late.filter(pl.col("step").eq_missing(step) & pl.col("is_last")
                       & (pl.col("lateness_us") >= chk["min_lag_us"]) & pl.col("rank").is_in(others["rank"].implode()))
    also_txt = ""
    if also.height:
        also_txt = " Also last, below the straggler threshold: " + "; ".join(
            f"rank {rk} at {_ordinal_list(g['seq'].to_list())} ({ms(float(g['lateness_us'].max()))})"
            for (rk,), g in also.sort("rank", "seq").group_by(["rank"], maintain_order=True)) + "."
    step_txt = f"step {step}" if step is not None else "the profile"
    message = (f"Rank {slow} arrives last at {int(worst['times_last'])} of {n_coll} aligned collectives in "
               f"{step_txt} ({where}). At {int(worst['times_flagged'])} of them it is an outlier (over "
               f"{chk['mad_z']:g} robust deviations and {chk['min_lag_us']:,.0f} µs behind the median rank) and "
               f"holds them up by {ms(worst['lag_us'])} in total after the second-latest rank"
               + (f" ({100 * share:.1f}% of the step)" if share is not None else "")
               + f".{clock_txt} Peers wait {ms(worst['peers_wait_us'])} inside the collectives it is last at "
               f"(summed over the peers), {ms(worst['caused_wait_us'])} of which only because of it.{recorded_txt} "
               f"Compared with rank {typical} (typical): {_cause_text(why)}{steps_txt}{also_txt}")
    evidence: list[Evidence] = []
    sel = {"source": "aligned collectives", "step": step, "straggler": slow}
    for rk, label in ((slow, "slow"), (typical, "typical")):
        rows = late.join(last_rows.select(KEY), on=KEY, how="semi").filter(pl.col("rank") == rk)
        ev = _cite_ops(rows, rk, {**sel, "rank": rk, "role": label})
        if ev is not None:
            evidence.append(ev)
    evidence += _kernel_evidence(why["kernel_rows"], "slow", slow, step)
    evidence += _kernel_evidence(why["kernel_rows"], "typical", typical, step)
    if why["cause_class"] == "host_gap":
        evidence += _gap_evidence(why.get("gap"), step)
        evidence += _step_rows(steps, slow, [step]) + _step_rows(steps, typical, [step])
    metrics = {"rank": slow, "step": step, "typical_rank": typical, "lag_us": round(worst["lag_us"], 3),
               "late_vs_median_us": round(worst["late_vs_median_us"], 3),
               "times_flagged": int(worst["times_flagged"]),
               "lag_us_per_step": {str(s): round(v, 3) for s, v in h.select("step", "lag_us").iter_rows()},
               "times_last": int(worst["times_last"]), "last_at": sorted(int(x) + 1 for x in last_rows["seq"]),
               "collectives": n_coll, "peers_wait_us": round(worst["peers_wait_us"], 3),
               "caused_wait_us": round(worst["caused_wait_us"], 3), "step_share": round(share, 4) if share else None,
               "peers_recorded_wait_us": round(float(recorded.sum()), 3) if recorded.len() else None,
               "worst_start_lag_us": round(top["start_lag_us"], 3), "worst_end_spread_us": top["end_spread_us"],
               "also_last": {str(rk): sorted(int(x) + 1 for x in g["seq"]) for (rk,), g in
                             also.sort("rank").group_by(["rank"], maintain_order=True)} if also.height else {},
               **{k: v for k, v in why.items() if k != "kernel_rows"}}
    if _propagated_metrics(metrics, chk):
        return Finding(
            check=CHECK, severity="info", rank=slow, step=step,
            title=f"Rank {slow} arrives late in {step_txt} only because of an earlier collective",
            message=(f"Rank {slow} arrives last at {int(worst['times_last'])} of {n_coll} aligned collectives in "
                     f"{step_txt} ({where}), {ms(worst['lag_us'])} behind the second-latest rank in total, but its "
                     f"own pre-collective windows are no longer than rank {typical}'s ("
                     f"{ms(why['extra_window_us'])} difference): it left its previous collective late, i.e. it "
                     "waited there for a slower rank of another group. Not a straggler itself."),
            metrics={**metrics, "cause_class": "propagated"}, evidence=tuple(evidence))
    return Finding(check=CHECK, severity=sev, rank=slow, step=step,
                   title=(f"Rank {slow} is a straggler in {step_txt}: last at {int(worst['times_last'])} of "
                          f"{n_coll} collectives, holding them up {ms(worst['lag_us'])} "
                          f"({why['cause_class'].replace('_', ' ')})"),
                   message=message, metrics=metrics, evidence=tuple(evidence))


def _cause_text(why: dict) -> str:
    if why["cause_class"] == "unknown":
        return (f"its pre-collective windows are {ms(why['extra_window_us'])} longer; the kernel rows needed to "
                "split that into device work and idle time are missing on one of the two ranks.")
    parts = [f"its pre-collective windows are {ms(why['extra_window_us'])} longer: "
             f"{ms(why['extra_compute_us'])} more device work and {ms(why['extra_idle_us'])} more time with no "
             "device work"]
    if why["cause_class"] == "host_gap":
        g = why.get("gap")
        where = ""
        if g and g.get("lines"):
            unit = "events" if str(g.get("file", "")).endswith((".json", ".json.gz")) else "lines"
            where = (f" The longest stretch is {ms(g['gap_us'])} with no kernel, between {unit} "
                     f"{' and '.join(map(str, g['lines']))} of its {'trace' if unit == 'events' else 'kernel file'}"
                     + (f" (rank {g['typical']['rank']}: {ms(g['typical']['gap_us'])} at the same place)"
                        if g.get("typical") and g["typical"].get("gap_us") is not None else "") + ".")
        parts.append(" — a host-side gap (the device sat idle waiting for work: dispatch, data loading, "
                     f"synchronisation or Python).{where}")
    else:
        ks = "; ".join(f"{k['op']} +{k['delta_us'] / 1000:,.2f} ms ({k['how']}: {k['count']} vs "
                       f"{k['typical_count']} launches)" for k in why["kernels"][:3])
        buckets = ", ".join(f"{b} {v / 1000:+,.2f} ms" for b, v in list(why["by_bucket"].items())[:3])
        parts.append(f" — extra compute, by bucket {buckets}; largest: {ks}.")
    return "".join(parts)


def _none_finding(late: pl.DataFrame, inst: pl.DataFrame, per: pl.DataFrame, chk) -> Finding:
    top = inst.sort("last_lateness_us", descending=True).row(0, named=True)
    rows = late.filter(pl.col("step").eq_missing(top["step"]) & (pl.col("group") == top["group"])
                       & (pl.col("seq") == top["seq"]))
    # the median arrival: the middle rank's, or with an even number of ranks the mean of the two middle ones —
    # both are cited then, so the lateness can be checked against the rows
    ordered = sorted(rows.select("lateness_us", "rank").iter_rows())
    med_ranks = sorted({ordered[(rows.height - 1) // 2][1], ordered[rows.height // 2][1]})
    med_rank = ordered[rows.height // 2][1]
    evidence = [e for e in (_cite_ops(rows.filter(pl.col("rank") == top["last_rank"]), top["last_rank"],
                                      {"source": "aligned collectives", "step": top["step"], "role": "last"}),
                            *[_cite_ops(rows.filter(pl.col("rank") == m), m,
                                        {"source": "aligned collectives", "step": top["step"], "role": "median"})
                              for m in med_ranks])
                if e is not None]
    n_steps = per["step"].n_unique()
    worst = per.sort("lag_us", descending=True).row(0, named=True)
    return Finding(
        check=CHECK, severity="info",
        title=f"No straggler: {inst.height} aligned collectives, last arrivals within normal jitter",
        message=(f"No straggler: across {inst.height} aligned collectives in {n_steps} step(s) on "
                 f"{per['rank'].n_unique()} ranks ({fmt_ranks(per['rank'].unique().to_list())}), the largest "
                 f"lateness of a last arrival is {top['last_lateness_us']:,.1f} µs behind the median rank (rank "
                 f"{top['last_rank']} at {top['name']}, step {top['step']}), and the largest hold-up of a rank in a "
                 f"step is {worst['lag_us']:,.1f} µs (rank {worst['rank']}, step {worst['step']}). A rank is named "
                 f"when, at collectives where it is an outlier last arrival ({chk['mad_z']:g} robust deviations and "
                 f"{chk['min_lag_us']:,.0f} µs behind the median), it holds the others up by at least "
                 f"{100 * chk['min_step_share']:.0f}% of the step."),
        metrics={"collectives": inst.height, "max_last_lateness_us": round(top["last_lateness_us"], 3),
                 "max_step_lag_us": round(worst["lag_us"], 3), "max_step_lag_rank": worst["rank"],
                 "median_rank": med_rank, "median_ranks": med_ranks, "last_rank": top["last_rank"],
                 "median_of_median_lateness_us": round(statistics.median(
                     inst["last_lateness_us"].to_list()), 3)},
        evidence=tuple(evidence))
