"""Chains of elementwise kernels that one fused kernel would do: the activations, norms, residual adds, rotary
embeddings and copies eager PyTorch runs one op at a time.

Why a check of its own: on a small model or in decoding the device is busy, so no idle or waiting check names a
cause, yet most of its time goes to kernels that each read a tensor and write it back. The runs are found in the
per-rank map, where the events are in order (`profan.sources.trace.kineto_rank.elementwise_runs`); this module grades
each rank and step's row and cites the kernels of its largest runs.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import cite_kernels, graded
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack

CHECK = "unfused-elementwise"


def chain_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """One finding per rank and step whose elementwise runs, fused, save at least the check's share of the step
    (its window in the trace; outside any step, the capture's), or of its summed kernel time where the trace has
    no window: what the step would lose, not only its kernels."""
    chk = pack.check(CHECK)
    out: list[Finding] = []
    for rank in ranks:
        if rank.fusible is None:
            continue
        windows = _windows(rank)
        for row in rank.fusible.iter_rows(named=True):
            basis = windows.get(row["step"]) or row["total_us"]
            share = row["saving_us"] / basis if basis else 0.0
            sev = graded(share, chk)
            if sev is not None:
                out.append(_finding(rank, chk, sev, row, share, basis))
    return out


def _windows(r: RankData) -> dict[int | None, float]:
    """Per step, its window's length in the trace (None: the whole capture's)."""
    t = r.trace_steps
    if t is None or t.is_empty():
        return {}
    rows = t.filter(pl.col("step_us").is_not_null()).select("scope", "step", "step_us").iter_rows()
    return {(step if scope == "step" else None): us for scope, step, us in rows if scope in ("step", "trace")}


def _finding(r: RankData, chk, sev: str, row: dict, share: float, basis: float) -> Finding:
    step, total = row["step"], row["total_us"]
    where = f"Rank {r.rank}" + (f", step {step}" if step is not None else ", outside any step")
    return Finding(
        check=chk.id,
        severity=sev,
        rank=r.rank,
        step=step,
        title=f"{where}: fusing {row['runs']:,} chains of elementwise kernels saves about {pct(share)} of the step",
        message=(
            f"{where}: {row['kernels']:,} elementwise kernels run in {row['runs']:,} chains of at least "
            f"{chk['min_run']} on one stream with nothing between them: {ms(row['run_us'])} of {ms(total)} summed "
            f"kernel time. One kernel per chain, as long as its longest, saves {ms(row['saving_us'])}, "
            f"{pct(share)} of {ms(basis)}. Largest: {'; '.join(row['named'])}."
        ),
        metrics={
            "saving_us": round(row["saving_us"], 3),
            "run_us": round(row["run_us"], 3),
            "device_time_us": round(total, 3),
            "basis_us": round(basis, 3),
            "share": round(share, 4),
            "runs": row["runs"],
            "kernels": row["kernels"],
            "largest": list(row["named"]),
        },
        evidence=(
            cite_kernels(
                r,
                None,
                row["kernels"],
                {"step": step, "chains": "largest"},
                locs=list(row["events"]),
                values={"saving_us": round(row["saving_us"], 3)},
            ),
        ),
    )
