"""Cross-rank compute imbalance from step_trace_time.csv: pipeline stages, or ranks that should be equal.

Pipeline stages come from ``profiler_metadata.json`` ``parallel_group_info``: a rank's stage is its position in
its ``pp`` group. The wait the faster stages pay shows up as p2p wait in their ``communication.json``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from profan.analyses.common import cite_kernels, graded
from profan.model.evidence import Evidence, cite_lines, cite_pointers, make_pointer
from profan.model.findings import Finding
from profan.model.rank import ParallelGroup, RankData
from profan.model.textfmt import fmt_ranks, ms
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text.meta import double_hash


def pp_stages(ranks: list[RankData]) -> tuple[dict[int, int], dict[int, tuple[str, ParallelGroup]]]:
    """rank -> pipeline stage, and rank -> (metadata file, pp group) for evidence."""
    stage: dict[int, int] = {}
    source: dict[int, tuple[str, ParallelGroup]] = {}
    groups: list[tuple[str, ParallelGroup]] = []
    for rank in ranks:
        if rank.metadata is not None:
            groups += [
                (rank.files["profiler_metadata"], group)
                for group in rank.metadata.groups
                if group.group_name == default_roles().pipeline_group
            ]
    for rank in ranks:
        for file, group in groups:
            if rank.rank in group.global_ranks and len(group.global_ranks) > 1:
                stage[rank.rank] = sorted(group.global_ranks).index(rank.rank)
                source[rank.rank] = (file, group)
                break
    return stage, source


def _pp_wait(r: RankData, group: ParallelGroup, step: int | None) -> tuple[float, list[str]]:
    """Time (ms) this rank's ops in the pp group spend not moving data — the profiler's Wait Time and Idle Time
    of each p2p op — and pointers to those ops (longest first). Wait Time alone is the wait for the peer's first
    handshake; a receive posted long before its sender reaches it records the rest as Idle (Qwen3's stage 0:
    Wait 0 and Idle 158 ms on one batchSendRecv), so both are the stage's wait."""
    if r.comm_ops is None or r.comm_ops.is_empty():
        return 0.0, []
    h = str(double_hash(group.hccl_name))
    ops = r.comm_ops.filter((pl.col("group_hash") == h) & (pl.col("kind") == "p2p"))
    if step is not None:
        ops = ops.filter(pl.col("step") == step)
    idle = pl.col("idle_ms").fill_null(0) if "idle_ms" in ops.columns else pl.lit(0.0)
    ops = ops.with_columns((pl.col("wait_ms").fill_null(0) + idle).alias("_waiting")).sort("_waiting", descending=True)
    return float(ops["_waiting"].sum()), ops["pointer"].to_list()


def imbalance_findings(ranks: list[RankData], steps: pl.DataFrame, pack: RulePack) -> list[Finding]:
    if steps.is_empty() or steps["rank"].n_unique() < 2:
        return []
    stage, source = pp_stages(ranks)
    by_rank = {rank.rank: rank for rank in ranks}
    out: list[Finding] = []
    for (step,), frame in steps.group_by(["step"], maintain_order=True):
        frame = frame.filter(pl.col("computing_us").is_not_null())
        if frame.height < 2:
            continue
        if stage and all(rk in stage for rk in frame["rank"].to_list()) and len(set(stage.values())) > 1:
            f = _pp_finding(step, frame, stage, source, by_rank, pack)
            # within a stage the DP/TP replicas run the same layers: their spread is its own question
            for st, g in frame.with_columns(
                pl.col("rank").replace_strict(stage, return_dtype=pl.Int64).alias("_stage")
            ).group_by("_stage", maintain_order=True):
                if g.height >= 2:
                    dims = _replica_dims(ranks, g["rank"].to_list())
                    spread = RankSpread(step, g.drop("_stage"), scope=f"pipeline stage {st[0]}", dims=dims)
                    sf = _spread_finding(spread, pack, by_rank)
                    if sf is not None:
                        out.append(sf)
        else:
            f = _spread_finding(
                RankSpread(step, frame, dims=_replica_dims(ranks, frame["rank"].to_list())), pack, by_rank
            )
        if f is not None:
            out.append(f)
    return out


def _replica_dims(ranks: list[RankData], members: list[int]) -> list[str]:
    """Names of the parallel dimensions (parallel_group_info: dp, tp, cp, exp, …) that span these ranks."""
    names: set[str] = set()
    for rank in ranks:
        if rank.metadata is None:
            continue
        for group in rank.metadata.groups:
            if len(set(group.global_ranks) & set(members)) >= 2 and group.group_name in default_roles().replica_groups:
                names.add(group.group_name)
    return sorted(names)


def trace_imbalance_findings(ranks: list[RankData], rows: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Compute imbalance from the traces' own step split (Kineto ranks: no step_trace_time.csv), where nothing
    records a parallel layout. With several steps profiled on every rank, each rank is judged by its median step:
    a rank that computes more in one step and less in the next (a CPU shared by several processes, a one-off
    stall) is noise, while one that computes more in its typical step, and more than the median rank in every
    step, holds the collectives back every step. With one step, that step."""
    if rows.is_empty() or rows["rank"].n_unique() < 2:
        return []
    n_ranks = rows["rank"].n_unique()
    per_step = rows.group_by("step").agg(pl.col("rank").n_unique().alias("_n"))
    common = sorted(per_step.filter(pl.col("_n") == n_ranks)["step"].drop_nulls().to_list())
    if len(common) < 2:
        return imbalance_findings(ranks, rows, pack)
    shared = rows.filter(pl.col("step").is_in(common) & pl.col("computing_us").is_not_null())
    s = shared.group_by("rank").agg(pl.col("computing_us").median(), pl.col("file").first()).sort("rank")
    top = s.sort("computing_us", "rank", descending=[True, False])["rank"][0]
    above = shared.with_columns(pl.col("computing_us").median().over("step").alias("_med")).filter(
        pl.col("rank") == top
    )
    if not (above["computing_us"] > above["_med"]).all():
        return []  # the top rank changes sides between steps: the host's jitter, not the rank's work
    f = _spread_finding(RankSpread(None, s, steps=common), pack, {rank.rank: rank for rank in ranks})
    return [f] if f is not None else []


def _step_evidence(frame: pl.DataFrame, by_rank: dict[int, RankData], steps: list[int] | None = None) -> list[Evidence]:
    """Per rank, the row its Computing comes from: its step_trace_time.csv line, or for a trace's own split (no
    such file) the compute events of the step (or of the ``steps`` its median is taken over), the longest
    first."""
    if "src_line" not in frame.columns:
        return [
            e
            for row in frame.sort("rank").iter_rows(named=True)
            if (e := _trace_compute(by_rank, row, steps)) is not None
        ]
    return [
        cite_lines(
            row["file"],
            [row["src_line"]],
            1,
            {"source": "step_trace_time", "step": row["step"]},
            values={"rank": row["rank"], "Computing": row["computing_us"]},
        )
        for row in frame.sort("rank").iter_rows(named=True)
    ]


def _trace_compute(by_rank: dict[int, RankData], row: dict, steps: list[int] | None) -> Evidence | None:
    r = by_rank.get(row["rank"])
    if r is None or r.groups is None or r.groups.is_empty():
        return None
    where = {"steps": steps} if steps else {"step": row["step"]}
    in_step = pl.col("step").is_in(steps) if steps else pl.col("step").eq_missing(row["step"])
    frame = r.groups.filter(in_step & (pl.col("bucket") != "communication"))
    if frame.is_empty():
        return None
    return cite_kernels(
        r,
        frame,
        int(frame["count"].sum()),
        {**where, "bucket_not": "communication"},
        values={"rank": row["rank"], "Computing": round(row["computing_us"], 3)},
    )


def _pp_finding(step, frame, stage, source, by_rank, pack) -> Finding | None:
    chk = pack.check("pipeline-stage-imbalance")
    frame = frame.with_columns(pl.col("rank").replace_strict(stage, return_dtype=pl.Int64).alias("stage"))
    per = frame.group_by("stage").agg(pl.col("computing_us").mean().alias("mean_us"), pl.col("rank")).sort("stage")
    hi = per.sort("mean_us", descending=True).row(0, named=True)
    lo = per.sort("mean_us").row(0, named=True)
    ratio = hi["mean_us"] / lo["mean_us"] if lo["mean_us"] else float("inf")
    sev = graded(ratio, chk, "ratio")
    if sev is None:
        return None
    evidence = _step_evidence(frame, by_rank)
    waits, wait_evidence = _pp_waits(sorted(lo["rank"]), step, source, by_rank)
    evidence += wait_evidence
    files = sorted({source[rank][0] for rank in frame["rank"].to_list()})
    for file in files[:1]:
        hccl = source[hi["rank"][0]][1].hccl_name
        evidence.append(
            cite_pointers(
                file,
                [make_pointer("parallel_group_info", hccl)],
                {"source": "profiler_metadata", "group_name": default_roles().pipeline_group},
            )
        )
    cause_txt, cause_ev, cause_metrics = _stage_cause(by_rank, sorted(hi["rank"]), sorted(lo["rank"]), step)
    evidence += cause_ev
    wait_txt = ""
    if waits:
        wait_txt = (
            f" Stage {lo['stage']} ranks wait "
            + " / ".join(f"{w:,.1f}" for _, w in waits)
            + f" ms in PP send/receive (ranks {fmt_ranks([rank for rank, _ in waits])}; the ops' Wait and Idle time)."
        )
    return Finding(
        check=chk.id,
        severity=sev,
        step=step,
        title=(
            f"Step {step}: pipeline stage {hi['stage']} (ranks {fmt_ranks(hi['rank'])}) computes "
            f"{ratio:.2f}× stage {lo['stage']} (ranks {fmt_ranks(lo['rank'])})"
        ),
        message=(
            f"Step {step}: pipeline stage {hi['stage']} (ranks {fmt_ranks(hi['rank'])}) computes "
            f"{ms(hi['mean_us'])} against {ms(lo['mean_us'])} on stage {lo['stage']} "
            f"(ranks {fmt_ranks(lo['rank'])}), {ratio:.2f}× (+{ms(hi['mean_us'] - lo['mean_us'])}). "
            f"The slowest stage sets the pipeline's pace.{wait_txt}{cause_txt}"
        ),
        metrics={
            "ratio": round(ratio, 4),
            "slow_stage": hi["stage"],
            "slow_ranks": sorted(hi["rank"]),
            "slow_computing_us": round(hi["mean_us"], 3),
            "fast_stage": lo["stage"],
            "fast_ranks": sorted(lo["rank"]),
            "fast_computing_us": round(lo["mean_us"], 3),
            "pp_wait_ms": {str(rank): round(w, 3) for rank, w in waits},
            **cause_metrics,
        },
        evidence=tuple(evidence),
    )


def _pp_waits(ranks: list[int], step, source: dict, by_rank: dict) -> tuple[list[tuple[int, float]], list[Evidence]]:
    """How long each of the fast stage's ``ranks`` waited in PP send/receive this step (ms), for the ranks whose
    communication.json records it, each cited: the fast stage's waiting is the slow stage's cost made visible."""
    waits, evidence = [], []
    for rank in ranks:
        r = by_rank[rank]
        group = source[rank][1]
        w, ptrs = _pp_wait(r, group, step)
        if ptrs:
            waits.append((rank, w))
            evidence.append(
                cite_pointers(
                    r.files["communication"],
                    ptrs,
                    {"source": "communication", "step": step, "kind": "p2p", "group": group.hccl_name},
                    values={"rank": rank, "wait_ms": round(w, 3)},
                )
            )
    return waits, evidence


def _stage_cause(by_rank: dict, slow: list[int], fast: list[int], step) -> tuple[str, list[Evidence], dict]:
    """What the slow stage computes that the fast one does not: kernel time by bucket and the kernels (op and input
    shapes) with the largest difference, between one rank of each stage that has kernel rows."""

    def pick(ranks: list[int]):
        return next(
            (by_rank[r] for r in ranks if by_rank[r].groups is not None and not by_rank[r].groups.is_empty()), None
        )

    rs, rf = pick(slow), pick(fast)
    if rs is None or rf is None:
        return (" No rank of one of the stages has kernel rows, so the extra compute cannot be broken down.", [], {})

    def rows(r):
        return r.groups.filter(pl.col("step").eq_missing(step) & (pl.col("bucket") != "communication"))

    gs, gf = rows(rs), rows(rf)
    keys = ["bucket", "op", "input_shapes"]
    ks = gs.group_by(keys).agg(pl.col("time_us").sum().alias("slow_us"), pl.col("count").sum().alias("n"))
    kf = gf.group_by(keys).agg(pl.col("time_us").sum().alias("fast_us"))
    k = ks.join(kf, on=keys, how="full", coalesce=True, nulls_equal=True).with_columns(
        (pl.col("slow_us").fill_null(0) - pl.col("fast_us").fill_null(0)).alias("delta_us")
    )
    buckets = (
        k.group_by("bucket")
        .agg(pl.col("delta_us").sum())
        .sort("delta_us", descending=True)
        .filter(pl.col("delta_us").abs() >= 1000)
    )
    top = k.sort("delta_us", descending=True).head(3).filter(pl.col("delta_us") > 0)
    parts = [f"{b} {'+' if d >= 0 else '−'}{ms(abs(d))}" for b, d in buckets.iter_rows()]
    kern = []
    evidence: list[Evidence] = []
    for row in top.iter_rows(named=True):
        shapes = f" ({row['input_shapes']})" if row["input_shapes"] else ""
        only = " — not on the fast stage" if row["fast_us"] is None else ""
        kern.append(f"{row['op']}{shapes} +{ms(row['delta_us'])}{only}")
        frame = gs.filter((pl.col("op") == row["op"]) & pl.col("input_shapes").eq_missing(row["input_shapes"]))
        evidence.append(
            cite_kernels(
                rs,
                frame,
                int(row["n"]),
                {"step": step, "op": row["op"], "input_shapes": row["input_shapes"], "bucket_not": "communication"},
                values={"time_us": round(float(frame["time_us"].sum()), 3)},
            )
        )
    text = (
        f" Kernel time on rank {rs.rank} against rank {rf.rank}, by bucket: "
        + (", ".join(parts) or "no bucket differs by 1 ms")
        + ("; largest differences: " + "; ".join(kern) if kern else "")
        + "."
    )
    metrics = {
        "bucket_delta_us": {b: round(d, 3) for b, d in buckets.iter_rows()},
        "compared_ranks": [rs.rank, rf.rank],
    }
    return text, evidence, metrics


def _the_others(others: pl.DataFrame, med: float) -> tuple[int, str, str]:
    """(the rank nearest the others' median, how a title names what the rank is against, how a message does)."""
    near = others.sort((pl.col("computing_us") - med).abs(), "rank").row(0, named=True)["rank"]
    if others.height == 1:
        return near, f"rank {near}", f"rank {near}'s {ms(med)}"
    return near, "the median rank", f"a median of {ms(med)} over the other {others.height} ranks"


@dataclass(frozen=True)
class RankSpread:
    """Ranks compared for compute imbalance: the step (None over ``steps``), their computing per rank (``rank``,
    ``computing_us``, ``file``, and ``src_line`` from step_trace_time.csv), what they are — a pipeline stage
    (``scope``), replicas of the parallel dimensions ``dims`` — and the ``steps`` each rank's median is taken
    over."""

    step: int | None
    computing: pl.DataFrame
    scope: str | None = None
    dims: list[str] | None = None
    steps: list[int] | None = None


def _spread_finding(spread: RankSpread, pack: RulePack, by_rank: dict[int, RankData]) -> Finding | None:
    """The rank that computes most against the median of the other ranks, in one step — or, given ``steps``, in
    each rank's median step over them. The others, not all: of two ranks the median of both is their mean, which
    halves the gap (1.48× the other reads as 1.19× "the median")."""
    step, s, scope, dims, steps = spread.step, spread.computing, spread.scope, spread.dims, spread.steps
    check = pack.check("compute-imbalance")
    top = s.sort("computing_us", descending=True).row(0, named=True)
    others = s.filter(pl.col("rank") != top["rank"])
    med = statistics.median(others["computing_us"].to_list()) if not others.is_empty() else 0.0
    if not med:
        return None
    near, against, base = _the_others(others, med)
    ratio = top["computing_us"] / med
    severity = graded(ratio, check, "ratio")
    if severity is None:
        return None
    where = f" of {scope}" if scope else ""
    dim_txt = f" ({'/'.join(dim.upper() for dim in dims)} replicas per profiler_metadata.json)" if dims else ""
    why = (
        f"The ranks{where}{dim_txt} run the same layers, so their compute should match; the slowest one holds "
        "every collective back."
        if scope or dims
        else "No pipeline-parallel layout was found in profiler_metadata.json, so the ranks are compared as if they "
        "ran the same work."
        if "src_line" in s.columns
        else "The traces record no parallel layout, so the ranks are compared as if they ran the same work "
        "(data-parallel or expert-parallel replicas of one program)."
    )
    when = f"Step {step}" if not steps else f"Steps {steps[0]}–{steps[-1]} (each rank's median step)"
    return Finding(
        check=check.id,
        severity=severity,
        step=step,
        rank=top["rank"],
        title=f"{when}: rank {top['rank']} computes {ratio:.2f}× {against}{where}",
        message=(
            f"{when}: rank {top['rank']} computes {ms(top['computing_us'])} against {base}{where} ({ratio:.2f}×). {why}"
        ),
        metrics={
            "ratio": round(ratio, 4),
            "max_computing_us": top["computing_us"],
            "median_computing_us": med,
            "median_rank": near,
            "against": against,
            "ranks": sorted(s["rank"].to_list()),
            "scope": scope or "all ranks",
            "dimensions": dims or [],
            **({"steps": steps} if steps else {}),
        },
        evidence=tuple(_step_evidence(s, by_rank, steps)),
    )
