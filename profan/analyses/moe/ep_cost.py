"""What an MoE layer's expert-parallel exchange costs each rank: dispatch, combine and all-to-all time per step,
hidden behind compute or exposed (the per-rank interval split of `profan.sources.trace.kineto_ep`), and a finding
where the exposed part takes a large share of the step (check ``moe-ep-exposed``)."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.model.evidence import cite_events
from profan.model.findings import SEVERITIES, Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack
from profan.sources.common.rowframe import stack

CHECK = "moe-ep-exposed"


def ep_cost(ranks: list[RankData]) -> pl.DataFrame:
    """rank, step, part, events, time, busy, hidden, exposed, the step's window and the exposed share of it, and
    where several ranks were captured, ``waiting_us``: the exposed time beyond the least exposed rank's in the
    same step and part — the exchange ends when its slowest peer's does, so that much a rank waited for a peer,
    and the least rank's exposed time is the transfer every rank shares (an upper bound: it waits too)."""
    have = [rank for rank in ranks if rank.ep_time is not None and not rank.ep_time.is_empty()]
    if not have:
        return pl.DataFrame()
    frame = stack([rank.ep_time for rank in have], {"rank": [rank.rank for rank in have]}, how="vertical_relaxed")
    frame = frame.with_columns((pl.col("exposed_us") / pl.col("window_us")).alias("exposed_share"))
    if len(have) > 1:
        least = pl.col("exposed_us").min().over("step", "part")
        frame = frame.with_columns((pl.col("exposed_us") - least).alias("waiting_us"))
    return frame.select("rank", *[column for column in frame.columns if column != "rank"]).sort("rank", "step", "part")


def ep_findings(ranks: list[RankData], table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """One finding per rank whose exposed EP time (the union of its parts, ``total_part``), averaged over its steps,
    reaches the check's warning share of the step window. Where the capture names no part of the exchange
    dispatch or combine (``named_parts``), only bare all-to-alls, the finding is at most ``unnamed_max_severity``."""
    if table.is_empty():
        return []
    chk = pack.check(CHECK)
    total = table.filter(pl.col("part") == chk["total_part"])
    per_rank = total.group_by("rank").agg(
        pl.col("exposed_us").mean(),
        pl.col("hidden_us").mean(),
        pl.col("busy_us").mean(),
        pl.col("window_us").mean(),
        pl.col("step").sort(),
    )
    named = set(table.filter(pl.col("part").is_in(list(chk["named_parts"])))["rank"].to_list())
    by_rank = {rank.rank: rank for rank in ranks}
    out = []
    for row in per_rank.sort("rank").iter_rows(named=True):
        share = row["exposed_us"] / row["window_us"] if row["window_us"] else 0.0
        sev = graded(share, chk)
        if sev is None:
            continue
        if row["rank"] not in named:
            sev = max(sev, chk["unnamed_max_severity"], key=SEVERITIES.index)
        parts = table.filter((pl.col("rank") == row["rank"]) & (pl.col("part") != chk["total_part"]))
        out.append(_finding(by_rank[row["rank"]], row, (share, row["rank"] in named), sev, parts))
    return out


def _finding(r: RankData, row: dict, facts: tuple[float, bool], sev, parts: pl.DataFrame) -> Finding:
    """The rank's finding: its exposed and hidden EP time per step, each part's, citing each part's longest event.
    ``facts``: the exposed share of the step, and whether the capture names the exchange dispatch/combine."""
    share, named = facts
    by_part = parts.group_by("part").agg(pl.col("exposed_us").mean(), pl.col("hidden_us").mean()).sort("part")
    said = "; ".join(f"{p} {ms(e)} exposed, {ms(h)} hidden" for p, e, h in by_part.iter_rows())
    title = f"MoE EP exchange (dispatch/combine/all-to-all) exposed {pct(share)} of the step on rank {r.rank}"
    unnamed = (
        ""
        if named
        else " No dispatch/combine range or EP kernel names these all-to-alls: they may be context parallelism's."
    )
    message = (
        f"Per step (mean over steps {', '.join(map(str, row['step']))}): the EP exchange keeps the device busy "
        f"{ms(row['busy_us'])}, of which {ms(row['hidden_us'])} ran beside compute on another stream or thread and "
        f"{ms(row['exposed_us'])} alone, {pct(share)} of the {ms(row['window_us'])} step window. By part (parts "
        f"may overlap, e.g. a worker thread's all-to-all inside the dispatch op): {said}.{unnamed}"
    )
    file = r.files[r.kernel_file]
    events = parts.sort("exposed_us", descending=True)["first_event"].drop_nulls().to_list()
    evidence = (cite_events(file, events, len(events), {"rank": r.rank, "parts": sorted(set(parts["part"]))}),)
    metrics = {
        "share": round(share, 4),
        "named": named,
        "exposed_us": round(row["exposed_us"], 3),
        "hidden_us": round(row["hidden_us"], 3),
        "busy_us": round(row["busy_us"], 3),
        "window_us": round(row["window_us"], 3),
        "by_part": {p: {"exposed_us": round(e, 3), "hidden_us": round(h, 3)} for p, e, h in by_part.iter_rows()},
    }
    return Finding(
        check=CHECK,
        severity=sev,
        rank=r.rank,
        title=title,
        message=message,
        evidence=evidence,
        metrics=metrics,
        steps=tuple(row["step"]),
    )
