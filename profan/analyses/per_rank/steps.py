"""Per-step time split (Computing / Communication not overlapped / Free) and the findings it supports.

Numbers come straight from ``step_trace_time.csv``, which the profiler computes from its Overlap Analysis lanes;
each finding cites the row it read. The rules of the exposed-communication and device-idle findings
(`graded_share_findings`, `share_finding`) serve the traces' step splits too (`per_rank.trace_steps`), so
every source of a split is judged by the same thresholds and worded alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import polars as pl

from profan.analyses.across_ranks import imbalance
from profan.analyses.common import cite_kernels, graded, kernel_table
from profan.analyses.contract import Job, Section
from profan.model.evidence import Evidence, cite_lines
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack
from profan.sources.common.rowframe import stack

STEP_COLUMNS = [
    "rank",
    "step",
    "device_id",
    "computing_us",
    "comm_not_overlapped_us",
    "overlapped_us",
    "communication_us",
    "free_us",
    "bubble_us",
    "preparing_us",
    "step_us",
    "src_line",
    "file",
]


def step_table(ranks: list[RankData]) -> pl.DataFrame:
    have = [rank for rank in ranks if rank.steps is not None and not rank.steps.is_empty()]
    if not have:
        return pl.DataFrame()
    return (
        stack(
            [rank.steps for rank in have],
            {"rank": [rank.rank for rank in have], "file": [rank.files["step_trace_time"] for rank in have]},
        )
        .select(STEP_COLUMNS)
        .sort("rank", "step")
    )


def section(job: Job) -> Section:
    """The step table, and what it says: exposed communication and idle per step, kernel rows that cannot account
    for the step's compute, and ranks or pipeline stages that compute unequal amounts."""
    return Section(
        tables={"steps": job.steps},
        findings=[
            *share_findings(job.steps, job.pack),
            *reconcile_findings(job.ranks, job.steps, job.pack),
            *imbalance.imbalance_findings(job.ranks, job.steps, job.pack),
        ],
    )


LANES = {
    "computing_us": "Computing",
    "comm_not_overlapped_us": "Communication(Not Overlapped)",
    "free_us": "Free",
    "communication_us": "Communication",
}
# the checks a step split supports, the column each judges, and what a share of that column means
SHARE_CHECKS = (("exposed-communication", "comm_not_overlapped_us"), ("device-idle", "free_us"))
SHARE_WHAT = {
    "comm_not_overlapped_us": "communication not overlapped with compute",
    "free_us": "the device is idle (Free)",
}


@dataclass(frozen=True)
class Share:
    """One row's lane past its check's threshold: the row of the split, the check and the column it judges, the
    column's share of the row's step and the severity that share earns."""

    row: dict
    check: str
    column: str
    share: float
    severity: str


# a Share -> the finding, in its source's words and rows
ShareWording = Callable[[Share], Finding]


def graded_share_findings(rows: Iterable[dict], pack: RulePack, word: ShareWording) -> list[Finding]:
    """Exposed communication and idle time as shares of each row's step, graded by their checks: one finding per
    row and check past its threshold. Every step split (step_trace_time.csv, trace_view.json's Overlap Analysis
    lanes, a trace's device lanes) is judged by these same rules; ``word`` says where its numbers come from and
    cites its own rows."""
    out: list[Finding] = []
    for row in rows:
        if not row["step_us"]:
            continue
        for check_id, col in SHARE_CHECKS:
            if row[col] is None:
                continue
            share = row[col] / row["step_us"]
            sev = graded(share, pack.check(check_id))
            if sev is not None:
                out.append(word(Share(row, check_id, col, share, sev)))
    return out


def split_text(row: dict) -> str:
    """The step split of a row, as every share finding quotes it."""
    return (
        f"Computing {ms(row['computing_us'])}, Communication(Not Overlapped) {ms(row['comm_not_overlapped_us'])}, "
        f"Free {ms(row['free_us'])}"
    )


def share_finding(found: Share, where: str, *, source: str, metrics: dict, cited: Evidence) -> Finding:
    """A share finding of a step split with per-step rows (step_trace_time.csv, trace_view.json's lanes): the lane's
    time against the step's, then the whole split; ``source`` ends the message with where the numbers come from."""
    row, col, share = found.row, found.column, found.share
    return Finding(
        check=found.check,
        severity=found.severity,
        rank=row["rank"],
        step=row["step"],
        title=f"Rank {row['rank']}, {where}: {pct(share)} of the step {SHARE_WHAT[col]}",
        message=(
            f"Rank {row['rank']}, {where}: {LANES[col]} is {ms(row[col])} of the {ms(row['step_us'])} step "
            f"({pct(share)}); {split_text(row)}{source}."
        ),
        metrics=metrics,
        evidence=(cited,),
    )


def share_findings(steps: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Exposed communication and device idle per rank and step of step_trace_time.csv, each citing its row."""
    if steps.is_empty():
        return []
    return graded_share_findings(steps.iter_rows(named=True), pack, _step_trace_share)


def _step_trace_share(found: Share) -> Finding:
    row, col = found.row, found.column
    cited = cite_lines(
        row["file"],
        [row["src_line"]],
        1,
        {"source": "step_trace_time", "step": row["step"]},
        values={LANES[col]: row[col], "step_us": row["step_us"]},
    )
    where = f"step {row['step']}" if row["step"] is not None else "the profile"
    metrics = {col: row[col], "step_us": row["step_us"], "share": round(found.share, 4)}
    return share_finding(found, where, source="", metrics=metrics, cited=cited)


def reconcile_findings(ranks: list[RankData], steps: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Kernel rows that cannot account for the step's Computing time (trimmed or partial kernel_details)."""
    chk = pack.check("kernels-vs-step-trace")
    out: list[Finding] = []
    if steps.is_empty():
        return out
    k = kernel_table(ranks, ["step", "bucket", "time_us", "count"])
    if k is None:
        return out
    kernel_ranks = [
        kernel_rank for kernel_rank in ranks if kernel_rank.groups is not None and not kernel_rank.groups.is_empty()
    ]
    per_step, whole = _compute_kernel_time(k)
    step_rows: dict[int, list[dict]] = {}
    for row in steps.iter_rows(named=True):
        step_rows.setdefault(row["rank"], []).append(row)
    for kernel_rank in kernel_ranks:
        for row in step_rows.get(kernel_rank.rank, ()):
            k_us, n = (
                per_step.get((kernel_rank.rank, row["step"]), (0.0, 0))
                if row["step"] is not None
                else whole.get(kernel_rank.rank, (0.0, 0))
            )
            k_us, n = float(k_us), int(n)
            comp = row["computing_us"] or 0.0
            if comp <= 0 or k_us / comp >= chk["min_ratio"]:
                continue
            out.append(_reconcile_finding(kernel_rank, row, chk, k_us, n, comp))
    return out


def _compute_kernel_time(
    frame: pl.DataFrame,
) -> tuple[dict[tuple[int, int], tuple[float, int]], dict[int, tuple[float, int]]]:
    """Every rank's compute (non-communication) kernel time and rows: per (rank, step), and per rank over all its
    steps (what a step_trace row without a step number covers) — in one query, not two per rank."""
    compute = (
        frame.filter(pl.col("bucket") != "communication")
        .group_by("rank", "step", maintain_order=True)
        .agg(pl.col("time_us").sum(), pl.col("count").sum())
    )
    per_step = {(rank, step): (t, n) for rank, step, t, n in compute.iter_rows()}
    whole: dict[int, tuple[float, int]] = {}
    for (rank, _), (t, n) in per_step.items():
        wt, wn = whole.get(rank, (0.0, 0))
        whole[rank] = (wt + t, wn + n)
    return per_step, whole


def _reconcile_finding(r: RankData, row: dict, chk, k_us: float, n: int, comp: float) -> Finding:
    """Rank ``r``'s step (a step_trace ``row``) whose ``n`` compute kernel rows sum to ``k_us``, well short of
    the ``comp`` µs of Computing the profiler reports."""
    return Finding(
        check=chk.id,
        severity=chk.severity,
        rank=r.rank,
        step=row["step"],
        title=f"Rank {r.rank}, step {row['step']}: kernel rows cover only {pct(k_us / comp)} of Computing",
        message=(
            f"Rank {r.rank}, step {row['step']}: the {n} compute rows of kernel_details.csv sum to "
            f"{ms(k_us)} but step_trace_time.csv reports Computing {ms(comp)} "
            f"({pct(k_us / comp)}). Kernel rows look trimmed or partial: per-kernel shares describe "
            "only the rows present."
        ),
        metrics={"kernel_compute_us": round(k_us, 3), "computing_us": comp, "ratio": round(k_us / comp, 4)},
        evidence=(
            cite_lines(
                row["file"],
                [row["src_line"]],
                1,
                {"source": "step_trace_time", "step": row["step"]},
                values={"Computing": comp},
            ),
            # no compute row at all (a file of HCCL rows only): nothing there to cite
            *(
                [
                    cite_kernels(
                        r,
                        r.groups.filter(pl.col("bucket") != "communication"),
                        n,
                        {"source": "kernel_details", "step": row["step"], "bucket_not": "communication"},
                        values={"time_us": round(k_us, 3)},
                    )
                ]
                if n
                else []
            ),
        ),
    )
