"""Where device time went: per rank, step and bucket; the top kernels of each bucket; coverage checks."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, ms, pct
from profan.classify import UNCLASSIFIED
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
    return (df.select(list(BREAKDOWN_SCHEMA)).cast({"kernels": pl.Int64})
            .sort(["rank", "step", "time_us"], descending=[False, False, True], nulls_last=True))


def top_kernels(ranks: list[RankData], per_bucket: int = 5) -> pl.DataFrame:
    """Per rank, step and bucket, the kernels (op + input shapes) with the most time."""
    parts = []
    keys = ["step", "bucket", "op", "input_shapes"]
    for r in _kernel_ranks(ranks):
        g = (r.groups.group_by(keys)
             .agg(pl.col("time_us").sum(), pl.col("count").sum(), pl.col("max_us").max(),
                  pl.col("name").first(), pl.col("core").first(), pl.col("rule_id").first()))
        lines = (r.groups.select(*keys, "lines", "line_durs").explode(["lines", "line_durs"])
                 .group_by(keys).agg(pl.col("lines").top_k_by(["line_durs", "lines"], 5, reverse=[False, True])))
        g = g.join(lines, on=keys, how="left", nulls_equal=True)
        g = g.with_columns((pl.col("time_us") / pl.col("time_us").sum().over("step", "bucket"))
                           .alias("share_of_bucket"))
        g = g.sort("time_us", descending=True).group_by("step", "bucket", maintain_order=True).head(per_bucket)
        parts.append(g.with_columns(pl.lit(r.rank, pl.Int64).alias("rank")))
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).select("rank", "step", "bucket", "op", "name", "input_shapes", "core", "count",
                                   "time_us", "max_us", "share_of_bucket", "rule_id", "lines")


def _step_select(step: int | None, **kw) -> dict:
    return {"source": "kernel_details", "step": step, **kw}


def step_breakdown_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    chk = pack.check("step-breakdown")
    out: list[Finding] = []
    for r in _kernel_ranks(ranks):
        for (step,), g in r.groups.group_by(["step"], maintain_order=True):
            total = float(g["time_us"].sum())
            if total <= 0:
                continue
            per_bucket = (g.group_by("bucket").agg(pl.col("time_us").sum(), pl.col("count").sum())
                          .sort("time_us", descending=True))
            evidence, parts, metrics = [], [], {"device_time_us": round(total, 3)}
            for b, t, n in per_bucket.iter_rows():
                share = t / total
                metrics[f"{b}_us"] = round(t, 3)
                metrics[f"{b}_share"] = round(share, 4)
                if share < chk["min_share"] and b != UNCLASSIFIED:
                    continue
                parts.append(f"{b} {pct(share)}")
                evidence.append(cite_kernels(r, g.filter(pl.col("bucket") == b), int(n),
                                             _step_select(step, bucket=b), values={"time_us": round(t, 3)}))
            step_txt = (f"step {step}" if step is not None else "outside any ProfilerStep"
                        if r.info.get("steps") else "the profile (no steps)")
            out.append(Finding(
                check=chk.id, severity="info", rank=r.rank, step=step,
                title=f"Rank {r.rank}, {step_txt}: {parts[0] if parts else ''} of summed kernel time",
                message=(f"Rank {r.rank}, {step_txt}: {ms(total)} of summed kernel time — "
                         + ", ".join(parts) + "."),
                metrics=metrics, evidence=tuple(evidence)))
    return out


def coverage_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """Unclassified time and AI CPU fallbacks, per rank over all steps."""
    out: list[Finding] = []
    unc, aicpu = pack.check("unclassified-time"), pack.check("ai-cpu-ops")
    for r in _kernel_ranks(ranks):
        total = float(r.groups["time_us"].sum())
        u = r.groups.filter(pl.col("bucket") == UNCLASSIFIED)
        ut = float(u["time_us"].sum())
        if total > 0 and ut / total >= unc["warning_share"]:
            ops = (u.group_by("op").agg(pl.col("time_us").sum()).sort("time_us", descending=True)
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
