"""Attention computed from separate kernels: the score matrix written out and read back between a matmul, a
softmax and another matmul, where one fused kernel would keep it on chip.

Why a check of its own: on a compute-bound step nothing waits and nothing is idle, so no other check names a
cause, yet eager attention (Hugging Face ``attn_implementation="eager"``, hand-written ``softmax(q @ k.T) @ v``)
is often most of the step. Which kernels are fused attention (rule ids), which are the score's softmax and which
the matmuls are the check's parameters (rules/checks.toml ``unfused-attention``), matched on the kernel groups the
bucket rules put in the attention bucket.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, graded, kernel_table, top_lines_by
from profan.model.evidence import MAX_CITED
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack

CHECK = "unfused-attention"
NAMED = 3  # score kernels named in a finding's message


def unfused_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """One finding per rank and step whose attention ran unfused (no group of a fused-attention rule, a softmax
    among its kernels) and whose softmax kernels reach the check's share of the step's summed kernel time. The
    softmax is what a fused kernel surely absorbs; the other kernels between the matmuls (masking, scaling,
    copies, and rotary embedding where it is written as elementwise ops) are said beside it, not counted."""
    chk = pack.check(CHECK)
    frame = kernel_table(ranks, ["step", "bucket", "rule_id", "op", "name", "count", "time_us", "lines", "line_durs"])
    if frame is None:
        return []
    totals = frame.group_by("rank", "step").agg(pl.col("time_us").sum().alias("total_us"))
    # the kernels' texts only for the attention bucket's rows: made for every row of 32 ranks of 100 steps, they
    # took 170 MB (bench/README.md)
    kernel = pl.col("name").fill_null("") + " " + pl.col("op").fill_null("")
    att = frame.filter(pl.col("bucket") == chk["bucket"]).with_columns(
        pl.col("rule_id").is_in(chk["fused_rules"]).fill_null(False).alias("_fused"),
        kernel.str.contains(chk["score_kernel"]).alias("_score_kernel"),
        kernel.str.contains(chk["matmul_kernel"]).alias("_matmul"),
    )
    steps = (
        att.group_by("rank", "step")
        .agg(
            pl.col("time_us").sum().alias("attention_us"),
            pl.col("time_us").filter(pl.col("_matmul")).sum().alias("matmul_us"),
            pl.col("time_us").filter(pl.col("_score_kernel") & ~pl.col("_matmul")).sum().alias("softmax_us"),
            pl.col("count").sum().cast(pl.Int64).alias("kernels"),
            pl.col("_fused").any().alias("fused"),
            pl.col("_score_kernel").any().alias("has_score"),
        )
        .filter(~pl.col("fused") & pl.col("has_score"))
        .join(totals, on=["rank", "step"], nulls_equal=True)
        .with_columns((pl.col("attention_us") - pl.col("matmul_us") - pl.col("softmax_us")).alias("other_us"))
        .sort("rank", "step", nulls_last=True)
    )
    if steps.is_empty():
        return []
    score = att.filter(~pl.col("_matmul"))
    named = (
        score.group_by("rank", "step", "op")
        .agg(pl.col("time_us").sum(), pl.col("count").sum())
        .sort(["rank", "step", "time_us", "op"], descending=[False, False, True, False], nulls_last=True)
        .group_by("rank", "step", maintain_order=True)
        .agg(pl.format("{} {} ms ({} calls)", "op", (pl.col("time_us") / 1000).round(1), "count").head(NAMED))
    )
    names = {(rank, s): ops for rank, s, ops in named.iter_rows()}
    tops = top_lines_by(att.with_columns(_key().alias("_key")), "_key", MAX_CITED)
    by_rank = {rank.rank: rank for rank in ranks}
    out: list[Finding] = []
    for row in steps.iter_rows(named=True):
        share = row["softmax_us"] / row["total_us"] if row["total_us"] else 0.0
        sev = graded(share, chk)
        if sev is None:
            continue
        key = (row["rank"], row["step"])
        locs = tops.get(f"{row['rank']}|{'' if row['step'] is None else row['step']}", [])
        out.append(_finding(by_rank[row["rank"]], chk, sev, row, names.get(key, []), locs))
    return out


def _key() -> pl.Expr:
    """rank|step as one text, the key the cited rows are picked by (a step may be null)."""
    return pl.concat_str([pl.col("rank").cast(pl.String), pl.col("step").cast(pl.String).fill_null("")], separator="|")


def _finding(r: RankData, chk, sev: str, row: dict, named: list[str], locs: list[int]) -> Finding:
    """One rank's (step's) unfused attention: its softmax kernels' share of kernel time graded ``sev``."""
    step, total = row["step"], row["total_us"]
    share = row["softmax_us"] / total if total else 0.0
    where = f"Rank {r.rank}" + (f", step {step}" if step is not None else "")
    return Finding(
        check=chk.id,
        severity=sev,
        rank=r.rank,
        step=step,
        title=f"{where}: attention runs unfused, its softmax kernels {pct(share)} of kernel time",
        message=(
            f"{where}: attention takes {ms(row['attention_us'])} ({pct(row['attention_us'] / total)} of "
            f"{ms(total)} summed kernel time) in {row['kernels']:,} kernels and no fused attention kernel ran: "
            f"the softmax kernels take {ms(row['softmax_us'])} ({pct(share)}), the other kernels between the "
            f"matmuls (masking, scaling, copies) {ms(row['other_us'])}, the matmuls {ms(row['matmul_us'])}. "
            f"Largest besides the matmuls: {'; '.join(named)}."
        ),
        metrics={
            "attention_us": round(row["attention_us"], 3),
            "softmax_us": round(row["softmax_us"], 3),
            "other_us": round(row["other_us"], 3),
            "matmul_us": round(row["matmul_us"], 3),
            "device_time_us": round(total, 3),
            "share": round(share, 4),
            "kernels": row["kernels"],
            "largest": named,
        },
        evidence=(
            cite_kernels(
                r,
                None,
                row["kernels"],
                {"step": step, "bucket": chk["bucket"]},
                locs=locs,
                values={"time_us": round(row["attention_us"], 3)},
            ),
        ),
    )
