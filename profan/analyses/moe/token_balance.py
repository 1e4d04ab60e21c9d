"""The hot expert and its rank named from token counts (`tokens`): max / mean over the experts and over the
ranks, graded against thresholds set above the spread measured on balanced runs (check
``moe-expert-imbalance``: ``*_token_ratio`` for ranks, ``*_expert_ratio`` for experts, and the floors they were
set from)."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.analyses.moe.tokens import load_tables, token_tables
from profan.model.evidence import Evidence, cite_events
from profan.model.findings import SEVERITIES, Finding
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks
from profan.rulepack.pack import RulePack

CHECK = "moe-expert-imbalance"


def token_load(ranks: list[RankData], pack: RulePack) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """(tokens per expert, tokens per rank) where the traces recorded them, else None."""
    chk = pack.check(CHECK)
    experts, dispatch = token_tables(ranks, chk["token_events"]["expert_range"])
    if experts.is_empty() or experts["tokens"].null_count() == experts.height:
        return None
    return load_tables(experts, dispatch)


def _worse(a: str | None, b: str | None) -> str | None:
    known = [s for s in (a, b) if s is not None]
    return max(known, key=SEVERITIES.index) if known else None


def token_findings(ranks: list[RankData], pack: RulePack) -> tuple[pl.DataFrame, list[Finding]] | None:
    """The rank table (rank, tokens, where they were counted) and at most one finding naming the hot rank and
    expert; None when no trace recorded tokens (the caller falls back to shapes, then time)."""
    load = token_load(ranks, pack)
    if load is None:
        return None
    per_expert, per_rank = load
    chk = pack.check(CHECK)
    table = per_rank.select("rank", "tokens", "source", "expert_tokens", "received")
    if per_rank.height < chk["min_ranks"] or not per_rank["tokens"].sum():
        return table, []
    rank_mean, expert_mean = float(per_rank["tokens"].mean()), float(per_expert["tokens"].mean())
    hot = per_rank.sort("tokens", descending=True).row(0, named=True)
    top = per_expert.sort("tokens", descending=True).row(0, named=True)
    rank_ratio = hot["tokens"] / rank_mean
    expert_ratio = top["tokens"] / expert_mean if expert_mean else 0.0
    sev = _worse(graded(rank_ratio, chk, "token_ratio"), graded(expert_ratio, chk, "expert_ratio"))
    if sev is None:
        return table, []
    facts = {"rank_ratio": rank_ratio, "expert_ratio": expert_ratio, "rank_mean": rank_mean}
    files = {rank.rank: rank.files.get("kineto_trace") for rank in ranks}
    evidence = _evidence(hot, top, files)
    if not evidence:
        return table, []
    return table, [_finding(chk, sev, (hot, top), (per_rank, per_expert), facts, evidence)]


def _finding(
    chk, sev, hot_rows: tuple[dict, dict], load: tuple[pl.DataFrame, pl.DataFrame], facts, evidence
) -> Finding:
    """``hot_rows``: the hot rank's and the hot expert's rows; ``load``: tokens per rank and per expert."""
    (hot, top), (per_rank, per_expert) = hot_rows, load
    ranks = per_rank["rank"].to_list()
    holds = per_expert.filter(pl.col("rank") == hot["rank"])["expert_id"].to_list()
    expert_rank = f" on rank {top['rank']}" if top["rank"] != hot["rank"] else ""
    title = (
        f"MoE imbalance: rank {hot['rank']} receives {facts['rank_ratio']:.2f}× the mean tokens of ranks "
        f"{fmt_ranks(ranks)}; expert {top['expert_id']}{expert_rank} gets {facts['expert_ratio']:.2f}× the mean"
    )
    message = (
        f"Counted from tokens, not time: rank {hot['rank']} received {hot['tokens']:,} token rows over the profiled "
        f"steps ({hot['source']}) against a mean of {facts['rank_mean']:,.0f}; expert {top['expert_id']} took "
        f"{top['tokens']:,} rows against a mean of {per_expert['tokens'].mean():,.0f} over {per_expert.height} "
        f"experts. Every EP all-to-all waits for the rank with the most tokens. Thresholds: ranks "
        f"{chk['warning_token_ratio']}/{chk['critical_token_ratio']}×, experts "
        f"{chk['warning_expert_ratio']}/{chk['critical_expert_ratio']}× (warning/critical), set above the "
        f"spread of balanced runs ({chk['token_ratio_floor']}× ranks, {chk['expert_ratio_floor']}× experts)."
    )
    return Finding(
        check=CHECK,
        severity=sev,
        rank=hot["rank"],
        title=title,
        message=message,
        metrics={
            "ratio": round(facts["rank_ratio"], 4),
            "metric": "tokens",
            "hot_rank": hot["rank"],
            "hot_expert": top["expert_id"],
            "expert_ratio": round(facts["expert_ratio"], 4),
            "hot_experts": [top["expert_id"]] if top["rank"] == hot["rank"] else sorted(holds),
            "values": {str(r): v for r, v in per_rank.select("rank", "tokens").iter_rows()},
            "expert_tokens": {str(e): v for e, v in per_expert.select("expert_id", "tokens").iter_rows()},
            "mean": round(facts["rank_mean"], 3),
            "token_source": hot["source"],
        },
        evidence=tuple(evidence),
    )


def _evidence(hot: dict, top: dict, files: dict[int, str | None]) -> list[Evidence]:
    """The hot rank's dispatch all-to-alls (or its experts' input ops) and the hot expert's input ops: the
    events whose ``Input Dims`` the counts were read from."""
    out = []
    if files.get(hot["rank"]) and hot["rows"] is not None and len(hot["rows"]):
        select = {"source": "kineto_trace", "rank": hot["rank"], "role": "hot rank", "counted": hot["source"]}
        out.append(
            cite_events(
                files[hot["rank"]],
                hot["rows"],
                hot["calls"] or len(hot["rows"]),
                select,
                values={"tokens": hot["tokens"]},
            )
        )
    if files.get(top["rank"]) and len(top["rows"]):
        select = {
            "source": "kineto_trace",
            "rank": top["rank"],
            "role": "hottest of its kind",
            "expert_id": top["expert_id"],
        }
        out.append(
            cite_events(files[top["rank"]], top["rows"], len(top["rows"]), select, values={"tokens": top["tokens"]})
        )
    return out
