"""Where device time went: per rank, step and bucket; the top kernels of each bucket; coverage checks."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, ms, pct, top_lines_by
from profan.classify import UNCLASSIFIED
from profan.evidence import MAX_CITED
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack

BREAKDOWN_SCHEMA = {"rank": pl.Int64, "step": pl.Int64, "bucket": pl.Utf8, "time_us": pl.Float64,
                    "share": pl.Float64, "kernels": pl.Int64}


def _kernel_ranks(ranks: list[RankData]) -> list[RankData]:
    return [r for r in ranks if r.groups is not None and not r.groups.is_empty()]


def breakdown(ranks: list[RankData]) -> pl.DataFrame:
    """rank, step, bucket, time_us (sum of kernel durations), share of the step's summed kernel time, kernels."""
    parts = []
    for r in _kernel_ranks(ranks):
        g = r.groups.group_by("step", "bucket").agg(pl.col("time_us").sum(), pl.col("count").sum().alias("kernels"))
        parts.append(g.with_columns(pl.lit(r.rank, pl.Int64).alias("rank")))
    if not parts:
        return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
    df = pl.concat(parts)
    df = df.with_columns((pl.col("time_us") / pl.col("time_us").sum().over("rank", "step")).alias("share"))
    return sort_breakdown(df.select(list(BREAKDOWN_SCHEMA)).cast({"kernels": pl.Int64}))


def sort_breakdown(table: pl.DataFrame) -> pl.DataFrame:
    """The breakdown table's one order — rank, step, then time descending, equal times by bucket name — and its
    schema when empty; used where it is built and where the ranks' tables are joined."""
    if table.is_empty():
        return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
    return table.sort(["rank", "step", "time_us", "bucket"], descending=[False, False, True, False], nulls_last=True)


def breakdown_over_steps(table: pl.DataFrame, table_steps_max: int) -> pl.DataFrame:
    """For ranks with more than ``table_steps_max`` steps: per rank and bucket over all steps — time, share of
    the rank's summed kernel time, kernels, and the lowest and highest share the bucket takes of one step. A long
    capture's per-step table (thousands of rows) stays in ``breakdown``; reports show this one."""
    if table.is_empty():
        return pl.DataFrame()
    counts = table.group_by("rank").agg(pl.col("step").n_unique().alias("steps"))
    long = table.join(counts.filter(pl.col("steps") > table_steps_max), on="rank", how="semi")
    if long.is_empty():
        return pl.DataFrame()
    out = (long.group_by("rank", "bucket").agg(pl.col("time_us").sum(), pl.col("kernels").sum())
           .with_columns((pl.col("time_us") / pl.col("time_us").sum().over("rank")).alias("share"))
           .join(counts, on="rank").join(step_share_ranges(long, ["rank"]), on=["rank", "bucket"], nulls_equal=True))
    return (out.select("rank", "steps", "bucket", "time_us", "share", "step_share_min", "step_share_max", "kernels")
            .sort(["rank", "time_us", "bucket"], descending=[False, True, False]))


def step_share_ranges(per_step: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per ``by`` and bucket, the lowest and highest share (``share``: of its step) the bucket takes of one
    step; a step where the bucket is absent counts as 0."""
    n_steps = per_step.group_by(by).agg(pl.col("step").n_unique().alias("_n"))
    return (per_step.group_by(*by, "bucket").agg(pl.col("share").min().alias("step_share_min"),
                                                 pl.col("share").max().alias("step_share_max"),
                                                 pl.col("step").n_unique().alias("_k"))
            .join(n_steps, on=by)
            .with_columns(pl.when(pl.col("_k") < pl.col("_n")).then(0.0).otherwise(pl.col("step_share_min"))
                          .alias("step_share_min"))
            .drop("_k", "_n"))


def top_kernels(ranks: list[RankData], steps_max: int | None = None, per_bucket: int = 5) -> pl.DataFrame:
    """Per rank, step and bucket, the kernels (op + input shapes) with the most time.

    A rank with more than ``steps_max`` steps gets one list per bucket over all its steps (``step`` null,
    ``steps`` = how many): per-step lists of a long capture repeat the same kernels thousands of times, and the
    per-step time stays in the ``breakdown`` table."""
    parts = []
    for r in _kernel_ranks(ranks):
        n_steps = r.groups["step"].n_unique()
        per_step = steps_max is None or n_steps <= steps_max
        groups = r.groups if per_step else r.groups.with_columns(pl.lit(None, pl.Int64).alias("step"))
        keys = ["step", "bucket", "op", "input_shapes"]
        # the example name/core/rule: the group with the most time (ties: the first name), not whichever group
        # the hash grouping saw first — the same input gives the same table
        first = [pl.col(c).sort_by(["time_us", "name"], descending=[True, False]).first()
                 for c in ("name", "core", "rule_id")]
        g = (groups.group_by(keys)
             .agg(pl.col("time_us").sum(), pl.col("count").sum(), pl.col("max_us").max(), *first))
        g = g.with_columns((pl.col("time_us") / pl.col("time_us").sum().over("step", "bucket"))
                           .alias("share_of_bucket"))
        # ties: by op, shapes, then step and bucket — equal kernels in two steps must not swap the steps' order
        g = (g.sort(["time_us", "op", "input_shapes", "step", "bucket"], descending=[True, False, False, False, False],
                    nulls_last=True)
             .group_by("step", "bucket", maintain_order=True).head(per_bucket))
        # sample lines only for the kept kernels: exploding every group's lines costs more than the ranking
        lines = (groups.join(g.select(keys), on=keys, how="semi", nulls_equal=True)
                 .select(*keys, "lines", "line_durs").explode(["lines", "line_durs"])
                 .group_by(keys).agg(pl.col("lines").top_k_by(["line_durs", "lines"], 5, reverse=[False, True])))
        g = g.join(lines, on=keys, how="left", nulls_equal=True, maintain_order="left")
        g = g.with_columns(pl.lit(1 if per_step else n_steps, pl.Int64).alias("steps"),
                           pl.lit(r.rank, pl.Int64).alias("rank"))
        parts.append(g)
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).select("rank", "step", "steps", "bucket", "op", "name", "input_shapes", "core",
                                   "count", "time_us", "max_us", "share_of_bucket", "rule_id", "lines")


def step_breakdown_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """Where each rank's kernel time went: one finding per step for a few steps, else one over all steps.

    A long capture (hundreds of steps) would otherwise bury the report in near-identical per-step findings; the
    per-step numbers stay in the ``breakdown`` table and the all-steps finding gives their range.
    """
    chk = pack.check("step-breakdown")
    out: list[Finding] = []
    for r in _kernel_ranks(ranks):
        steps = r.groups["step"].unique()
        if steps.len() <= chk["per_step_max"]:
            for (step,), g in r.groups.group_by(["step"], maintain_order=True):
                step_txt = (f"step {step}" if step is not None else "outside any ProfilerStep"
                            if r.info.get("steps") else "the profile (no steps)")
                f = _breakdown_finding(r, g, chk, step, step_txt, {"step": step})
                if f is not None:
                    out.append(f)
            continue
        known = steps.drop_nulls().sort()
        span = f"{known.len():,} steps ({known[0]}–{known[-1]})"
        f = _breakdown_finding(r, r.groups, chk, None, span, {}, _share_ranges(r.groups))
        if f is not None:
            out.append(f)
    return out


def _share_ranges(groups: pl.DataFrame) -> dict[str, tuple[float, float]]:
    """Per bucket, the lowest and highest share it takes of a step (steps where it is absent count as 0)."""
    per = groups.group_by("step", "bucket").agg(pl.col("time_us").sum())
    per = per.with_columns((pl.col("time_us") / pl.col("time_us").sum().over("step")).alias("share"),
                           pl.lit(0).alias("_all"))
    ranges = step_share_ranges(per, ["_all"])
    return {b: (lo, hi) for b, lo, hi in ranges.select("bucket", "step_share_min", "step_share_max").iter_rows()}


def _breakdown_finding(r: RankData, g: pl.DataFrame, chk, step: int | None, scope: str, select: dict,
                       ranges: dict[str, tuple[float, float]] | None = None) -> Finding | None:
    total = float(g["time_us"].sum())
    if total <= 0:
        return None
    per_bucket = (g.group_by("bucket").agg(pl.col("time_us").sum(), pl.col("count").sum())
                  .sort(["time_us", "bucket"], descending=[True, False]))
    evidence, parts, metrics = [], [], {"device_time_us": round(total, 3)}
    tops = top_lines_by(g, "bucket", MAX_CITED)
    for b, t, n in per_bucket.iter_rows():
        share = t / total
        metrics[f"{b}_us"] = round(t, 3)
        metrics[f"{b}_share"] = round(share, 4)
        if share < chk["min_share"] and b != UNCLASSIFIED:
            continue
        rng = ""
        if ranges and b in ranges:
            lo, hi = ranges[b]
            rng = f" (per step {pct(lo)}–{pct(hi)})"
        parts.append(f"{b} {pct(share)}{rng}")
        evidence.append(cite_kernels(r, None, int(n), {**select, "bucket": b}, locs=tops.get(b, []),
                                     values={"time_us": round(t, 3)}))
    return Finding(
        check=chk.id, severity="info", rank=r.rank, step=step,
        title=f"Rank {r.rank}, {scope}: {parts[0].split(' (')[0] if parts else ''} of summed kernel time",
        message=f"Rank {r.rank}, {scope}: {ms(total)} of summed kernel time — " + ", ".join(parts) + ".",
        metrics=metrics, evidence=tuple(evidence))


def coverage_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """Unclassified time and AI CPU fallbacks, per rank over all steps."""
    out: list[Finding] = []
    unc, aicpu = pack.check("unclassified-time"), pack.check("ai-cpu-ops")
    for r in _kernel_ranks(ranks):
        total = float(r.groups["time_us"].sum())
        u = r.groups.filter(pl.col("bucket") == UNCLASSIFIED)
        ut = float(u["time_us"].sum())
        if total > 0 and ut / total >= unc["warning_share"]:
            ops = (u.group_by("op").agg(pl.col("time_us").sum()).sort(["time_us", "op"], descending=[True, False])
                   .head(5)["op"].to_list())
            out.append(Finding(
                check=unc.id, severity="warning", rank=r.rank,
                title=f"Rank {r.rank}: {pct(ut / total)} of kernel time matches no bucket rule",
                message=(f"Rank {r.rank}: {ms(ut)} ({pct(ut / total)}) of summed kernel time in "
                         f"{int(u['count'].sum())} rows matches no bucket rule (largest: {', '.join(ops)}). "
                         "Add rules with --rules to classify it."),
                metrics={"unclassified_us": round(ut, 3), "share": round(ut / total, 4)},
                evidence=(cite_kernels(r, u, int(u["count"].sum()),
                                       {"source": "kernel_details", "bucket": UNCLASSIFIED},
                                       values={"time_us": round(ut, 3)}),)))
        a = r.groups.filter(pl.col("core") == "AI_CPU")
        at = float(a["time_us"].sum())
        if total > 0 and a.height:
            ops = sorted(set(a["op"].to_list()))
            sev = "warning" if at / total >= aicpu["warning_share"] else "info"
            out.append(Finding(
                check=aicpu.id, severity=sev, rank=r.rank,
                title=f"Rank {r.rank}: {int(a['count'].sum())} AI CPU kernel(s) take {at:,.2f} µs",
                message=(f"Rank {r.rank}: {int(a['count'].sum())} kernel(s) ran on the AI CPU "
                         f"({', '.join(ops)}), {at:,.2f} µs = {pct(at / total)} of summed kernel time."),
                metrics={"ai_cpu_us": round(at, 3), "share": round(at / total, 5), "kernels": int(a["count"].sum())},
                evidence=(cite_kernels(r, a, int(a["count"].sum()),
                                       {"source": "kernel_details", "core": "AI_CPU"},
                                       values={"time_us": round(at, 3)}),)))
    return out
