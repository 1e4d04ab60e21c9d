"""Where device time went: per rank, step and bucket; the top kernels of each bucket; coverage checks."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profan.analyses.common import cite_kernels, first_by_time, graded, kernel_table, top_lines_by, top_lines_frame
from profan.model.evidence import MAX_CITED
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.classify import UNCLASSIFIED
from profan.rulepack.pack import RulePack

BREAKDOWN_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "bucket": pl.Utf8,
    "time_us": pl.Float64,
    "share": pl.Float64,
    "kernels": pl.Int64,
}


def breakdown(ranks: list[RankData]) -> pl.DataFrame:
    """rank, step, bucket, time_us (sum of kernel durations), share of the step's summed kernel time, kernels."""
    k = kernel_table(ranks, ["step", "bucket", "time_us", "count"])
    if k is None:
        return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
    frame = k.group_by("rank", "step", "bucket").agg(pl.col("time_us").sum(), pl.col("count").sum().alias("kernels"))
    frame = frame.with_columns((pl.col("time_us") / pl.col("time_us").sum().over("rank", "step")).alias("share"))
    return sort_breakdown(frame.select(list(BREAKDOWN_SCHEMA)).cast({"kernels": pl.Int64}))


def sort_breakdown(table: pl.DataFrame) -> pl.DataFrame:
    """The breakdown table's one order — rank, step, then time descending, equal times by bucket name — and its
    schema when empty."""
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
    out = (
        long.group_by("rank", "bucket")
        .agg(pl.col("time_us").sum(), pl.col("kernels").sum())
        .with_columns((pl.col("time_us") / pl.col("time_us").sum().over("rank")).alias("share"))
        .join(counts, on="rank")
        .join(step_share_ranges(long, ["rank"]), on=["rank", "bucket"], nulls_equal=True)
    )
    return out.select(
        "rank", "steps", "bucket", "time_us", "share", "step_share_min", "step_share_max", "kernels"
    ).sort(["rank", "time_us", "bucket"], descending=[False, True, False])


def step_share_ranges(per_step: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per ``by`` and bucket, the lowest and highest share (``share``: of its step) the bucket takes of one
    step; a step where the bucket is absent counts as 0."""
    n_steps = per_step.group_by(by).agg(pl.col("step").n_unique().alias("_n"))
    return (
        per_step.group_by(*by, "bucket")
        .agg(
            pl.col("share").min().alias("step_share_min"),
            pl.col("share").max().alias("step_share_max"),
            pl.col("step").n_unique().alias("_k"),
        )
        .join(n_steps, on=by)
        .with_columns(
            pl.when(pl.col("_k") < pl.col("_n")).then(0.0).otherwise(pl.col("step_share_min")).alias("step_share_min")
        )
        .drop("_k", "_n")
    )


# the kernel-group columns `top_kernels` reads, and the columns of its table, in order
_TOP_KERNEL_INPUTS = [
    "step",
    "bucket",
    "op",
    "input_shapes",
    "name",
    "core",
    "rule_id",
    "decided_by",
    "time_us",
    "count",
    "max_us",
    "lines",
    "line_durs",
]
_TOP_KERNEL_COLUMNS = [
    "rank",
    "step",
    "steps",
    "bucket",
    "op",
    "name",
    "input_shapes",
    "core",
    "count",
    "time_us",
    "max_us",
    "share_of_bucket",
    "rule_id",
    "decided_by",  # the context the rule matched (module=…, context=…, neighbors=…); null: the name decided
    "lines",
]


TOP_BATCH_ROWS = 50_000  # kernel groups ranked in one query at most (unless one rank holds more): see `top_kernels`


def top_kernels(ranks: list[RankData], steps_max: int | None = None, per_bucket: int = 5) -> pl.DataFrame:
    """Per rank, step and bucket, the kernels (op + input shapes) with the most time.

    A rank with more than ``steps_max`` steps gets one list per bucket over all its steps (``step`` null,
    ``steps`` = how many): per-step lists of a long capture repeat the same kernels thousands of times, and the
    per-step time stays in the ``breakdown`` table. Ranks are ranked a batch of `TOP_BATCH_ROWS` groups at a time
    (`_rank_batches`; every key leads with the rank, so the table is the same): all ranks' groups at once, names
    and lines included, took 0.5 GB of working memory on 32 ranks of 100 steps (bench/README.md), while one
    query over many small ranks costs less than a query each."""
    parts = [_top_kernels(batch, steps_max, per_bucket) for batch in _rank_batches(ranks, TOP_BATCH_ROWS)]
    parts = [part for part in parts if not part.is_empty()]
    return pl.concat(parts, how="vertical_relaxed") if parts else pl.DataFrame()


def _rank_batches(ranks: list[RankData], most: int) -> list[list[RankData]]:
    """The ranks in rank order, cut into batches of at most ``most`` kernel groups (a rank holding more is a
    batch of its own); ranks of one number stay in one batch, as their groups are ranked together."""
    out: list[list[RankData]] = []
    held = 0
    for rank in sorted(ranks, key=lambda each: each.rank):
        rows = 0 if rank.groups is None else rank.groups.height
        if not out or (held + rows > most and rank.rank != out[-1][-1].rank):
            out.append([])
            held = 0
        out[-1].append(rank)
        held += rows
    return out


def _top_kernels(ranks: list[RankData], steps_max: int | None, per_bucket: int) -> pl.DataFrame:
    """`top_kernels` of one batch of ranks."""
    k = kernel_table(ranks, _TOP_KERNEL_INPUTS)
    if k is None:
        return pl.DataFrame()
    n_steps = pl.col("step").n_unique().over("rank")
    per_step = pl.lit(True) if steps_max is None else n_steps <= steps_max
    k = k.with_columns(
        pl.when(per_step).then(1).otherwise(n_steps).cast(pl.Int64).alias("steps"),
        pl.when(per_step).then(pl.col("step")).alias("step"),
    )
    keys = ["rank", "step", "bucket", "op", "input_shapes"]
    frame = k.group_by(keys).agg(
        pl.col("time_us").sum(),
        pl.col("count").sum(),
        pl.col("max_us").max(),
        *first_by_time(("name", "core", "rule_id", "decided_by")),
        pl.col("steps").first(),
    )
    frame = frame.with_columns(
        (pl.col("time_us") / pl.col("time_us").sum().over("rank", "step", "bucket")).alias("share_of_bucket")
    )
    # ties: by op, shapes, then step and bucket — equal kernels in two steps must not swap the steps' order
    frame = (
        frame.sort(
            ["rank", "time_us", "op", "input_shapes", "step", "bucket"],
            descending=[False, True, False, False, False, False],
            nulls_last=True,
        )
        .group_by("rank", "step", "bucket", maintain_order=True)
        .head(per_bucket)
    )
    # sample lines only for the kept kernels: exploding every group's lines costs more than the ranking
    lines = top_lines_frame(k.join(frame.select(keys), on=keys, how="semi", nulls_equal=True), keys, 5)
    frame = frame.join(lines, on=keys, how="left", nulls_equal=True, maintain_order="left")
    return frame.select(_TOP_KERNEL_COLUMNS)


def step_breakdown_findings(ranks: list[RankData], pack: RulePack, table: pl.DataFrame | None = None) -> list[Finding]:
    """Where each rank's kernel time went: one finding per step for a few steps, else one over all steps.

    A long capture (hundreds of steps) would otherwise bury the report in near-identical per-step findings; the
    per-step numbers stay in the ``breakdown`` table and the all-steps finding gives their range. ``table``: the
    `breakdown` of these ranks (built when not given) — the findings' sums are its rows; only the cited rows come
    from the kernel groups, for all ranks in one query.
    """
    chk = pack.check("step-breakdown")
    table = breakdown(ranks) if table is None else table
    k = kernel_table(ranks, ["step", "bucket", "lines", "line_durs"])
    if k is None or table.is_empty():
        return []
    n_steps = dict(table.group_by("rank").agg(pl.col("step").n_unique()).iter_rows())
    long_ranks = [r for r, value in n_steps.items() if value > chk["per_step_max"]]
    is_long = pl.col("rank").is_in(long_ranks)
    per_step: dict[int, dict] = {}  # rank -> step -> [(bucket, time, kernels)], largest first (the table's order)
    short = table.filter(~is_long).select("rank", "step", "bucket", "time_us", "kernels")
    for rank, step, b, t, value in short.iter_rows():
        per_step.setdefault(rank, {}).setdefault(step, []).append((b, t, value))
    step_tops = {
        (r, s, b): lines
        for r, s, b, lines in top_lines_frame(k.filter(~is_long), ["rank", "step", "bucket"], MAX_CITED).iter_rows()
    }
    over_steps, ranges, all_tops = _over_all_steps(table.filter(is_long), k.filter(is_long))
    out: list[Finding] = []
    for r in ranks:
        if r.rank in per_step:
            for step, buckets_ in per_step[r.rank].items():
                step_txt = (
                    f"step {step}"
                    if step is not None
                    else "outside any ProfilerStep"
                    if r.info.get("steps")
                    else "the profile (no steps)"
                )
                tops = {b: step_tops.get((r.rank, step, b), []) for b, _, _ in buckets_}
                where = BreakdownScope(step, step_txt, {"step": step})
                out.append(_breakdown_finding(r, buckets_, tops, chk, where))
        elif r.rank in over_steps:
            known = r.groups["step"].unique().drop_nulls().sort()
            span = f"{known.len():,} steps ({known[0]}–{known[-1]})"
            tops = {b: all_tops.get((r.rank, b), []) for b, _, _ in over_steps[r.rank]}
            where = BreakdownScope(None, span, {}, ranges.get(r.rank))
            out.append(_breakdown_finding(r, over_steps[r.rank], tops, chk, where))
    return [f for f in out if f is not None]


def _over_all_steps(
    long: pl.DataFrame, frame: pl.DataFrame
) -> tuple[dict[int, list], dict[int, dict[str, tuple[float, float]]], dict[tuple, list[int]]]:
    """For the ranks of a long capture (``long``: their `breakdown` rows, ``k``: their kernel groups), what the
    all-steps finding says: rank -> [(bucket, time, kernels)] largest first, rank -> bucket -> (lowest, highest)
    share of one step, and (rank, bucket) -> the cited lines."""
    over_steps: dict[int, list] = {}
    ranges: dict[int, dict[str, tuple[float, float]]] = {}
    if long.is_empty():
        return over_steps, ranges, {}
    buckets = (
        long.group_by("rank", "bucket")
        .agg(pl.col("time_us").sum(), pl.col("kernels").sum())
        .sort(["rank", "time_us", "bucket"], descending=[False, True, False])
    )
    for rank, b, t, n in buckets.iter_rows():
        over_steps.setdefault(rank, []).append((b, t, n))
    for rank, b, lo, hi in (
        step_share_ranges(long, ["rank"]).select("rank", "bucket", "step_share_min", "step_share_max").iter_rows()
    ):
        ranges.setdefault(rank, {})[b] = (lo, hi)
    all_tops = {(r, b): lines for r, b, lines in top_lines_frame(frame, ["rank", "bucket"], MAX_CITED).iter_rows()}
    return over_steps, ranges, all_tops


@dataclass(frozen=True)
class BreakdownScope:
    """What one breakdown finding covers: its step (None: all steps), the words for it, the rows' select and, over
    all steps, each bucket's (lowest, highest) share of one step."""

    step: int | None
    words: str
    select: dict
    ranges: dict[str, tuple[float, float]] | None = None


def _breakdown_finding(
    r: RankData, per_bucket: list[tuple[str, float, int]], tops: dict[str, list[int]], chk, where: BreakdownScope
) -> Finding | None:
    """One rank's (step's) breakdown finding from its (bucket, time, rows), largest first, with each bucket's
    cited rows."""
    step, scope, select, ranges = where.step, where.words, where.select, where.ranges
    total = sum(t for _, t, _ in per_bucket)
    if total <= 0:
        return None
    evidence, parts, metrics = [], [], {"device_time_us": round(total, 3)}
    for b, t, n in per_bucket:
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
        evidence.append(
            cite_kernels(
                r, None, int(n), {**select, "bucket": b}, locs=tops.get(b, []), values={"time_us": round(t, 3)}
            )
        )
    return Finding(
        check=chk.id,
        severity=chk.severity,
        rank=r.rank,
        step=step,
        title=f"Rank {r.rank}, {scope}: {parts[0].split(' (')[0] if parts else ''} of summed kernel time",
        message=f"Rank {r.rank}, {scope}: {ms(total)} of summed kernel time — " + ", ".join(parts) + ".",
        metrics=metrics,
        evidence=tuple(evidence),
    )


def coverage_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """Unclassified time and AI CPU fallbacks, per rank over all steps (one query over all ranks each)."""
    out: list[Finding] = []
    unc, aicpu = pack.check("unclassified-time"), pack.check("ai-cpu-ops")
    k = kernel_table(ranks, ["bucket", "core", "op", "time_us", "count", "lines", "line_durs"])
    if k is None:
        return out
    totals = dict(k.group_by("rank").agg(pl.col("time_us").sum()).iter_rows())
    ai_cpu = pack.roles.ai_cpu_core
    u, a = k.filter(pl.col("bucket") == UNCLASSIFIED), k.filter(pl.col("core") == ai_cpu)
    u_sum, a_sum = _per_rank_sums(u), _per_rank_sums(a)
    u_ops = {
        rank: ops
        for rank, ops in (
            u.group_by("rank", "op")
            .agg(pl.col("time_us").sum())
            .sort(["rank", "time_us", "op"], descending=[False, True, False])
            .group_by("rank", maintain_order=True)
            .agg(pl.col("op").fill_null(NO_NAME).head(5))
        ).iter_rows()
    }
    a_ops = {
        rank: sorted(set(ops)) for rank, ops in a.group_by("rank").agg(pl.col("op").fill_null(NO_NAME)).iter_rows()
    }
    u_tops, a_tops = top_lines_by(u, "rank", MAX_CITED), top_lines_by(a, "rank", MAX_CITED)
    for r in ranks:
        total = totals.get(r.rank)
        if total is None:  # no kernel groups
            continue
        ut, un = u_sum.get(r.rank, (0.0, 0))
        sev = graded(ut / total, unc) if un and total > 0 else None  # rows to cite, whatever the threshold
        if sev is not None:
            part = KernelSlice(ut, un, u_ops[r.rank], u_tops.get(r.rank, []))
            out.append(_unclassified_finding(r, unc, sev, total, part))
        if total > 0 and r.rank in a_sum:
            at, an = a_sum[r.rank]
            sev = graded(at / total, aicpu) or aicpu.severity
            part = KernelSlice(at, an, a_ops[r.rank], a_tops.get(r.rank, []))
            out.append(_ai_cpu_finding(r, aicpu, sev, ai_cpu, total, part))
    return out


NO_NAME = "(no name)"  # a kernel whose name the file leaves out (a trace event without "name")


@dataclass(frozen=True)
class KernelSlice:
    """The kernels of one rank a coverage finding names: their summed time, their rows, the ops named and the lines
    cited."""

    time_us: float
    rows: int
    ops: list[str]
    lines: list[int]


def _unclassified_finding(r: RankData, chk, sev: str, total: float, part: KernelSlice) -> Finding:
    """Rank ``r``'s kernel time that no bucket rule matched (``part``) of its ``total``."""
    ut, un, ops, locs = part.time_us, part.rows, part.ops, part.lines
    return Finding(
        check=chk.id,
        severity=sev,
        rank=r.rank,
        title=f"Rank {r.rank}: {pct(ut / total)} of kernel time matches no bucket rule",
        message=(
            f"Rank {r.rank}: {ms(ut)} ({pct(ut / total)}) of summed kernel time in "
            f"{un} rows matches no bucket rule (largest: {', '.join(ops)}). "
            "Add rules with --rules to classify it."
        ),
        metrics={"unclassified_us": round(ut, 3), "share": round(ut / total, 4)},
        evidence=(
            cite_kernels(
                r,
                None,
                un,
                {"source": "kernel_details", "bucket": UNCLASSIFIED},
                locs=locs,
                values={"time_us": round(ut, 3)},
            ),
        ),
    )


def _ai_cpu_finding(r: RankData, chk, sev: str, core: str, total: float, part: KernelSlice) -> Finding:
    """Rank ``r``'s kernels that fell back to the AI CPU (``core``, ``part``) of its ``total``."""
    at, an, ops, locs = part.time_us, part.rows, part.ops, part.lines
    return Finding(
        check=chk.id,
        severity=sev,
        rank=r.rank,
        title=f"Rank {r.rank}: {an} AI CPU kernel(s) take {at:,.2f} µs",
        message=(
            f"Rank {r.rank}: {an} kernel(s) ran on the AI CPU "
            f"({', '.join(ops)}), {at:,.2f} µs = {pct(at / total)} of summed kernel time."
        ),
        metrics={"ai_cpu_us": round(at, 3), "share": round(at / total, 5), "kernels": an},
        evidence=(
            cite_kernels(
                r,
                None,
                an,
                {"source": "kernel_details", "core": core},
                locs=locs,
                values={"time_us": round(at, 3)},
            ),
        ),
    )


def _per_rank_sums(groups: pl.DataFrame) -> dict[int, tuple[float, int]]:
    """rank -> (summed time, rows) of the given kernel groups."""
    agg = groups.group_by("rank").agg(pl.col("time_us").sum(), pl.col("count").sum().cast(pl.Int64))
    return {rank: (t, n) for rank, t, n in agg.iter_rows()}
