"""Communication time from communication.json: waiting vs transfer per rank and step, and source quirks."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import ms, pct
from profan.evidence import cite_pointers
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack


def comm_table(ranks: list[RankData]) -> pl.DataFrame:
    """Per rank and op: elapse / transit / wait / idle, and the bandwidth-info transit time (ms).

    One transfer can be listed under several transports (the SDMA engine and the HCCS link it crossed), so the
    op's bandwidth-info transfer is the largest transport entry, not their sum.
    """
    parts = []
    for r in ranks:
        if r.comm_ops is None or r.comm_ops.is_empty():
            continue
        bw = (r.comm_bw.group_by("step", "kind", "op")
              .agg(pl.col("time_ms").max().alias("bw_transit_ms"), pl.col("size_mb").max().alias("size_mb"))
              if r.comm_bw is not None and not r.comm_bw.is_empty() else None)
        ops = r.comm_ops
        if bw is not None:
            ops = ops.join(bw, on=["step", "kind", "op"], how="left", nulls_equal=True)
        parts.append(ops.with_columns(pl.lit(r.rank, pl.Int64).alias("rank"),
                                      pl.lit(r.files["communication"]).alias("file")))
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts, how="diagonal_relaxed")


def wait_findings(table: pl.DataFrame, steps: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("communication-wait")
    out: list[Finding] = []
    if table.is_empty():
        return out
    for (rank, step, file), g in table.group_by(["rank", "step", "file"], maintain_order=True):
        wait = float(g["wait_ms"].fill_null(0).sum())
        elapse = float(g["elapse_ms"].fill_null(0).sum())
        step_row = steps.filter((pl.col("rank") == rank) & pl.col("step").eq_missing(step)) \
            if not steps.is_empty() else pl.DataFrame()
        step_us = float(step_row["step_us"][0]) if step_row.height else None
        if not step_us or wait * 1000 / step_us < chk["warning_share"]:
            continue
        top = g.sort("wait_ms", descending=True, nulls_last=True)
        top_txt = ", ".join(f"{o} {w:,.1f} ms" for o, w in top.select("op_name", "wait_ms").head(3).iter_rows())
        out.append(Finding(
            check=chk.id, severity="warning", rank=rank, step=step,
            title=f"Rank {rank}, step {step}: {pct(wait * 1000 / step_us)} of the step waiting inside communication",
            message=(f"Rank {rank}, step {step}: communication ops wait {wait:,.1f} ms for peers "
                     f"({pct(wait * 1000 / step_us)} of the {ms(step_us)} step; {elapse:,.1f} ms elapsed in "
                     f"{g.height} ops). Largest waits: {top_txt}. Waiting is time lost to a later rank or "
                     "pipeline stage, not to the link."),
            metrics={"wait_ms": round(wait, 3), "elapse_ms": round(elapse, 3), "step_us": step_us},
            evidence=(cite_pointers(file, top["pointer"].to_list(), {"source": "communication", "step": step},
                                    values={"wait_ms": round(wait, 3)}),)))
    return out


def transit_quirk_findings(table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("comm-transit-inconsistent")
    out: list[Finding] = []
    if table.is_empty() or "bw_transit_ms" not in table.columns:
        return out
    bad = table.filter((pl.col("transit_ms").fill_null(0) == 0) & (pl.col("bw_transit_ms").fill_null(0) > 0))
    for (rank, file), g in bad.group_by(["rank", "file"], maintain_order=True):
        bw_t = float(g["bw_transit_ms"].sum())
        out.append(Finding(
            check=chk.id, severity="info", rank=rank,
            title=f"Rank {rank}: {g.height} communication op(s) report Transit Time 0 despite a transfer",
            message=(f"Rank {rank}: {g.height} op(s) in communication.json have 'Transit Time(ms)' = 0 while their "
                     f"bandwidth info records {bw_t:,.1f} ms of transfer ({g['size_mb'].sum():,.1f} MB). The "
                     "profiler therefore counts these ops as idle; profan reads the transfer time from the "
                     "bandwidth info."),
            metrics={"ops": g.height, "bandwidth_transit_ms": round(bw_t, 3)},
            evidence=(cite_pointers(file, g["pointer"].to_list(), {"source": "communication",
                                                                   "transit_ms": 0}),)))
    return out
