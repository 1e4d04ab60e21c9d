"""What holds a serving capture's iterations back, per rank, as findings the diagnosis explains
(`profan.diagnosis.serving_causes`): decode iterations that idle the device between their kernels
(launch-bound), the host's gaps between iterations, and prefill iterations that stall the running decodes.
Each cites the marker events of the iterations it sums (serving_iterations ``event_idx``)."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.model.evidence import cite_events
from profan.model.findings import Finding
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack

LAUNCH, GAPS, INTERFERENCE = "serving-launch-bound-decode", "serving-host-gaps", "serving-prefill-interference"


def _finding(pack: RulePack, check: str, rows: pl.DataFrame, cost_us: float, detail: dict) -> Finding | None:
    """A finding of ``check`` over one rank's iterations ``rows``: ``cost_us`` per iteration, graded as a share
    of the mean period of ``detail["step_rows"]`` (the iterations the cost is spread over; ``rows`` when not
    given); None under the check's threshold."""
    steps = detail.get("step_rows", rows)
    period = float(steps["period_us"].mean())  # type: ignore[arg-type]
    share = cost_us / period if period else 0.0
    sev = graded(share, pack.check(check))
    if sev is None:
        return None
    rank, file = int(rows["rank"][0]), str(rows["file"][0])
    worst = rows.sort(detail["worst_col"], "iteration", descending=[True, False]).row(0, named=True)
    metrics = {
        "period_us": period,
        detail["cost_name"]: cost_us,
        "share": share,
        "iterations": rows.height,
        "worst_iteration": int(worst["iteration"]),
        "worst_us": float(worst[detail["worst_col"]]),
        "device": detail["device"],
        "iteration_periods": dict(zip(steps["iteration"].to_list(), steps["period_us"].to_list(), strict=True)),
        **detail.get("extra", {}),
    }
    events = rows.sort(detail["worst_col"], descending=True)["event_idx"].to_list()
    evidence = cite_events(file, events, rows.height, {"table": "serving_iterations", "rank": rank, "check": check})
    per = detail.get("per", "iteration")
    text = f"Rank {rank}: {detail['what']} {ms(cost_us)} per {per}, {pct(share)} of its {ms(period)}"
    return Finding(check, sev, pack.check(check).name, text, (evidence,), rank=rank, metrics=metrics)


def rank_findings(its: pl.DataFrame, pack: RulePack, device: str) -> list[Finding]:
    """The three checks on one rank's iterations (``device``: what the trace measured, GPU or CPU)."""
    out: list[Finding | None] = []
    eager = its.filter((pl.col("phase") == "decode") & (pl.col("graph_kernels") == 0) & (pl.col("kernels") > 1))
    if not eager.is_empty():
        idle = float(eager["between_kernels_us"].mean())  # type: ignore[arg-type]
        what = f"decode iterations ({eager.height}) idle the {device} between their kernels"
        out.append(_finding(pack, LAUNCH, eager, idle, _detail("between_kernels_us", what, device)))
    if its.height > 1:
        body = its.head(its.height - 1)
        gap = float(body["gap_after_us"].mean())  # type: ignore[arg-type]
        what = "the host takes between iterations"
        out.append(
            _finding(pack, GAPS, body, gap, {**_detail("gap_after_us", what, device), "cost_name": "gap_after_us"})
        )
    out.append(_interference(its, pack, device))
    return [f for f in out if f is not None]


def _detail(worst_col: str, what: str, device: str) -> dict:
    return {"worst_col": worst_col, "cost_name": worst_col, "what": what, "device": device}


def _interference(its: pl.DataFrame, pack: RulePack, device: str) -> Finding | None:
    """Prefill and mixed iterations between decode iterations that take min_ratio times the median decode one;
        the cost: their time beyond that median, spread over the rank's decode iterations (the step it is a share of:
    a decode iteration). The finding names each
        slow iteration with its phase, period and tokens (``slow``), and the whole stall (``stall_total_us``)."""
    decode = its.filter(pl.col("phase") == "decode")
    if decode.height < 2:
        return None
    median = float(decode["period_us"].median())  # type: ignore[arg-type]
    is_decode = (pl.col("phase") == "decode").cast(pl.Int64)
    between = is_decode.cum_max().shift(1).fill_null(0) * is_decode.reverse().cum_max().reverse().shift(-1).fill_null(0)
    slow = its.filter(
        pl.col("phase").is_in(["prefill", "mixed"])
        & (between == 1)
        & (pl.col("period_us") >= pack.check(INTERFERENCE)["min_ratio"] * median)
    ).with_columns((pl.col("period_us") - median).alias("stall_us"))
    if slow.is_empty():
        return None
    total = float(slow["stall_us"].sum())
    kinds = " and ".join(dict.fromkeys(slow["phase"].to_list()))
    named = ", ".join(f"{row['iteration']} ({ms(row['period_us'])})" for row in slow.iter_rows(named=True))
    what = f"{kinds} iteration(s) {named} stall the decodes (median decode iteration {ms(median)}):"
    extra = {
        "stall_total_us": total,
        "decode_iterations": decode.height,
        "median_decode_us": median,
        "slow": slow.select("iteration", "phase", "period_us", "stall_us", "tokens").to_dicts(),
    }
    detail = {**_detail("stall_us", what, device), "cost_name": "stall_us", "extra": extra}
    detail.update(step_rows=decode, per="decode iteration")  # the stall is spread over the decodes it delays
    return _finding(pack, INTERFERENCE, slow, total / decode.height, detail)
