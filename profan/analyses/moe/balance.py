"""MoE / expert-parallel load balance: which rank's experts get the most tokens, and what it costs.

Sources, best first (``ascend-moe-ops.md`` §2):

* tokens counted in a Kineto trace — the expert ranges' inputs and the dispatch all-to-alls' rows
  (`profan.analyses.moe.token_balance`), which name the hot expert as well as its rank;
* tokens — the first dim of GroupedMatmul's ``x`` (its first input shape) is the tokens routed to the rank's local
  experts, for the GMMs whose weight is ``[E, K, N]`` (forward and dX); weight-gradient GMMs (``x^T`` is
  ``[H, tokens]``, 2-D weight) are skipped so they are not miscounted as tokens. The last shape part is the
  group_list length = local experts ``E``; with Megatron's layout the rank at position i of its EP group holds
  experts ``i*E … i*E+E-1``. Per-expert counts are not in the profile; with ``E == 1`` the rank names the expert.
* time — GroupedMatmul time, else the whole ``moe`` bucket, when shapes are absent: the last resort, said so in
  the finding and never graded above ``time_max_severity`` (time carries a rank's speed and host stalls besides
  its load).

max/mean per EP group (``parallel_group_info`` group ``exp``; else all ranks with MoE kernels) against the rule
pack's thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profan.analyses.common import graded, kernel_table, top_lines_frame
from profan.analyses.moe.token_balance import token_findings
from profan.model.evidence import Evidence, cite_events, cite_lines
from profan.model.findings import SEVERITIES, Finding
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks, ms
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import defaults as default_roles

CHECK = "moe-expert-imbalance"
# the expert GEMM's op and the EP group's name are roles expert_gemm / expert_group (rules/roles.toml)


def _token_expr() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    parts = pl.col("input_shapes").str.strip_chars('"').str.split(";")
    x = parts.list.get(0, null_on_oob=True).str.split(",")
    w = parts.list.get(1, null_on_oob=True).str.split(",")
    tokens = pl.when((x.list.len() == 2) & (w.list.len() == 3)).then(
        x.list.get(0, null_on_oob=True).cast(pl.Int64, strict=False)
    )
    local = parts.list.last().cast(pl.Int64, strict=False)
    return tokens.alias("tok"), local.alias("local_experts"), (pl.col("count") * tokens).alias("tok_rows")


# the MoE table: per rank, its expert time and tokens, and the rows to cite (file, its kind, locators, count)
MOE_COLUMNS = ("rank", "moe_us", "gmm_us", "gmm_count", "tokens", "local_experts")
MOE_COLUMNS += ("file", "source", "locator", "gmm_lines", "rows")


def moe_table(ranks: list[RankData]) -> pl.DataFrame:
    """rank, moe_us, gmm_us, gmm_count, tokens (x first dims summed over token-bearing GMMs), local_experts;
    and for evidence the kernel file, the 20 largest GroupedMatmul rows (the MoE bucket's when there is no GMM)
    and how many rows they stand for. One query over all ranks' MoE groups: per-rank queries cost a 64-rank
    cluster 0.1 s here."""
    k = kernel_table(
        ranks,
        ["bucket", "op", "input_shapes", "count", "time_us", "lines", "line_durs"],
        # the rank's kernel source and its locator kind: CSV lines of kernel_details.csv, or trace event indexes
        per_rank=lambda r: {
            "file": r.files.get(r.kernel_file),
            "source": r.kernel_file,
            "locator": r.kernel_locator,
        },
    )
    moe = k.filter(pl.col("bucket") == "moe") if k is not None else pl.DataFrame()
    if moe.is_empty():
        return pl.DataFrame()
    tok, local, rows = _token_expr()
    is_gmm = pl.col("op").str.contains(default_roles().expert_gemm)
    moe = (
        moe.with_columns(is_gmm.alias("gmm"), tok, local)
        .with_columns(rows)
        .with_columns(pl.col("gmm").any().over("rank").alias("has_gmm"))
    )
    gmm = pl.col("gmm")
    tab = moe.group_by("rank", maintain_order=True).agg(
        pl.col("time_us").sum().alias("moe_us"),
        pl.col("time_us").filter(gmm).sum().alias("gmm_us"),
        pl.col("count").filter(gmm).sum().cast(pl.Int64).alias("gmm_count"),
        pl.when(pl.col("tok_rows").filter(gmm).is_not_null().any())
        .then(pl.col("tok_rows").filter(gmm).sum())
        .cast(pl.Int64)
        .alias("tokens"),
        # the most common group_list length; ties: the smaller, so the same input names the same experts
        pl.col("local_experts").filter(gmm).drop_nulls().mode().min().cast(pl.Int64).alias("local_experts"),
        pl.col("file").first(),
        pl.col("source").first(),
        pl.col("locator").first(),
        pl.when(pl.col("has_gmm").first())
        .then(pl.col("count").filter(gmm).sum())
        .otherwise(pl.col("count").sum())
        .cast(pl.Int64)
        .alias("rows"),
    )
    # evidence rows: the GMM groups' largest rows, or the MoE bucket's on a rank without GMM
    lines = top_lines_frame(moe.filter(gmm | ~pl.col("has_gmm")), "rank", 20).rename({"lines": "gmm_lines"})
    tab = tab.join(lines, on="rank", how="left", maintain_order="left")
    return tab.select(MOE_COLUMNS)


def _ep_groups(ranks: list[RankData], present: list[int]) -> list[tuple[str, list[int]]]:
    seen: dict[tuple[int, ...], str] = {}
    for rank in ranks:
        if rank.metadata is None:
            continue
        for group in rank.metadata.groups:
            if group.group_name == default_roles().expert_group and len(group.global_ranks) > 1:
                seen.setdefault(tuple(sorted(group.global_ranks)), group.hccl_name)
    if seen:
        return [(name, list(key)) for key, name in seen.items() if len(set(key) & set(present)) > 1]
    return [("", sorted(present))]


def moe_findings(ranks: list[RankData], pack: RulePack) -> tuple[pl.DataFrame, list[Finding]]:
    counted = token_findings(ranks, pack)
    if counted is not None:
        return counted
    chk = pack.check(CHECK)
    tab = moe_table(ranks)
    if tab.is_empty() or tab.height < chk["min_ranks"]:
        return tab.drop(
            "gmm_lines", "file", "source", "locator", "rows", strict=False
        ) if not tab.is_empty() else tab, []
    out: list[Finding] = []
    for hccl, members in _ep_groups(ranks, tab["rank"].to_list()):
        frame = tab.filter(pl.col("rank").is_in(members))
        if frame.height < chk["min_ranks"]:
            continue
        use_tokens = frame["tokens"].null_count() == 0
        metric = "tokens" if use_tokens else ("gmm_us" if frame["gmm_us"].sum() > 0 else "moe_us")
        vals = frame[metric].cast(pl.Float64)
        mean = float(vals.mean())
        if not mean:
            continue
        hot = frame.sort(metric, descending=True).row(0, named=True)
        ratio = float(hot[metric]) / mean
        sev = graded(ratio, chk, "bucket_ratio" if metric == "moe_us" else "ratio")
        if sev is None:
            continue
        if metric != "tokens" and SEVERITIES.index(sev) > SEVERITIES.index(chk["time_max_severity"]):
            sev = chk["time_max_severity"]  # time alone never proves a hot expert
        med = frame.sort(metric).row(frame.height // 2, named=True)
        out.append(_finding(chk, sev, GroupLoad(hccl, members, frame, metric, hot, med, ratio, mean)))
    return tab.drop("gmm_lines", "file", "source", "locator", "rows"), out


@dataclass(frozen=True)
class GroupLoad:
    """One EP group's load by one measure (tokens, GroupedMatmul or MoE-bucket time): its HCCL name and ranks,
    their rows, the hot rank's and the median rank's row, the hot rank's max/mean and the mean."""

    hccl: str
    members: list[int]
    rows: pl.DataFrame
    metric: str
    hot: dict
    median: dict
    ratio: float
    mean: float


def _finding(chk, sev: str, load: GroupLoad) -> Finding:
    """The imbalance finding of one EP group, graded ``sev``."""
    hot, med, g, members = load.hot, load.median, load.rows, load.members
    metric, ratio, mean, hccl = load.metric, load.ratio, load.mean, load.hccl
    local = hot["local_experts"]
    pos = sorted(members).index(hot["rank"])
    experts = list(range(pos * local, pos * local + local)) if local else []
    exp_txt = (
        f"expert {experts[0]}"
        if len(experts) == 1
        else f"experts {experts[0]}–{experts[-1]}"
        if experts
        else "its local experts"
    )
    grp = f"EP group {hccl} (ranks {fmt_ranks(members)})" if hccl else f"ranks {fmt_ranks(members)}"
    if metric == "tokens":
        what = (
            f"its GroupedMatmul inputs carry {hot['tokens']:,} token rows against a mean of {mean:,.0f} "
            f"({ratio:.2f}×); GroupedMatmul time {ms(hot['gmm_us'])} vs {ms(med['gmm_us'])} on rank "
            f"{med['rank']} (median)"
        )
    else:
        what = (
            f"its {'GroupedMatmul' if metric == 'gmm_us' else 'MoE-bucket'} time is {ms(hot[metric])} against "
            f"a mean of {ms(mean)} ({ratio:.2f}×); time-based, the last resort: the capture records no token "
            "counts (no GroupedMatmul shapes, no all-to-all split sizes, no expert ranges' inputs), and time carries "
            "each rank's speed and host stalls besides its load"
        )
    evidence = [
        _cite_rank(row, role) for row, role in ((hot, "hot"), (med, "median")) if row["file"] and row["gmm_lines"]
    ]
    return Finding(
        check=CHECK,
        severity=sev,
        rank=hot["rank"],
        title=f"MoE imbalance: rank {hot['rank']} ({exp_txt}) gets {ratio:.2f}× the mean {metric.replace('_us', '')}"
        f" of {grp}",
        message=(
            f"MoE load imbalance in {grp}: rank {hot['rank']}, which holds {exp_txt}, is the hot rank — "
            f"{what}. Every EP all-to-all waits for the hottest rank, so the others idle for the difference. "
            f"Threshold max/mean {chk['warning_ratio']} (warning), {chk['critical_ratio']} (critical)."
        ),
        metrics={
            "ratio": round(ratio, 4),
            "metric": metric,
            "hot_rank": hot["rank"],
            "hot_experts": experts,
            "local_experts": local,
            "values": {str(k): v for k, v in g.select("rank", metric).iter_rows()},
            "mean": round(mean, 3),
            "median_rank": med["rank"],
        },
        evidence=tuple(evidence),
    )


def _cite_rank(row: dict, role: str) -> Evidence:
    """The kernel rows behind one rank's load (the hot rank's or the median's, ``role``): its GroupedMatmul rows,
    or its MoE-bucket rows when it has none, as CSV lines or trace events."""
    cite = cite_events if row["locator"] == "events" else cite_lines
    return cite(
        row["file"],
        row["gmm_lines"],
        row["rows"],
        {
            "source": row["source"],
            "op": "GroupedMatmul" if row["gmm_count"] else "bucket moe",
            "rank": row["rank"],
            "role": role,
        },
        values={"tokens": row["tokens"], "gmm_us": round(row["gmm_us"], 3)},
    )
