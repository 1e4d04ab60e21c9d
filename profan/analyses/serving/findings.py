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
    events = rows.sort(detail["worst_col"], descending=True)["event_idx"].to_list() + detail.get("also_cite", [])
    evidence = cite_events(file, events, len(events), {"table": "serving_iterations", "rank": rank, "check": check})
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
    out.append(_host_gaps(its, pack, device))
    out.append(_interference(its, pack, device))
    return [f for f in out if f is not None]


def _host_gaps(its: pl.DataFrame, pack: RulePack, device: str) -> Finding | None:
    """The device's idle between iterations: from each iteration's last device event to the next one's first
    (``device_gap_us``), summed over the rank's gaps, against the span the iterations tile; the cost spread over
    every iteration (so its share of one is the sum's share of the span). Beside it the host's own gaps between
    the iterations' windows (``gap_after_us``): on a GPU the host may run ahead, so only the device's idle is
    lost; on a CPU-only capture the "device" is the host's top-level ops, and the gap is the serving loop's own
    work between forwards (sampling, stopping checks, input preparation) on the same processor."""
    if its.height < 2:
        return None
    total, span = float(its["device_gap_us"].sum()), float(its["period_us"].sum())
    what = (
        f"the {device} idles {ms(total)} of the {ms(span)} span between iterations (from one iteration's last "
        f"{device} event to the next one's first, {its.height - 1} gaps; the host's own gaps "
        f"{ms(float(its['gap_after_us'].sum()))}):"
    )
    extra = {"gap_total_us": total, "span_us": span, "host_gap_total_us": float(its["gap_after_us"].sum())}
    detail = {**_detail("device_gap_us", what, device), "extra": extra, "step_rows": its}
    return _finding(pack, GAPS, its.head(its.height - 1), total / its.height, detail)


def _detail(worst_col: str, what: str, device: str) -> dict:
    return {"worst_col": worst_col, "cost_name": worst_col, "what": what, "device": device}


def _interference(its: pl.DataFrame, pack: RulePack, device: str) -> Finding | None:
    """Prefill and mixed iterations between decode iterations that stall the running decodes, with the cost spread
    over the rank's decode iterations (the step it is a share of: a decode iteration). A prefill run on its own
    (``prefill_min_ratio`` times the median decode iteration or longer) gives the decodes no token for its whole
    period: that period is the stall, and the next decode iteration the one that waited. A mixed iteration gives
    them their token late: its time beyond the median decode iteration is the stall, counted from
    ``min_ratio`` times that median. The finding names each slow iteration with its phase, period, tokens and
    the decode iteration it delayed (``slow``), and the whole stall (``stall_total_us``)."""
    decode = its.filter(pl.col("phase") == "decode")
    if decode.height < 2:
        return None
    chk = pack.check(INTERFERENCE)
    median = float(decode["period_us"].median())  # type: ignore[arg-type]
    slow = _stalls(its, median, chk["min_ratio"], chk["prefill_min_ratio"])
    if slow.is_empty():
        return None
    total = float(slow["stall_us"].sum())
    rows = slow.to_dicts()
    named = slow_iterations(rows, periods=True).lower()
    what = f"{named} between decode iterations ({delays_text(rows)}; median decode {ms(median)}) cost the decodes"
    extra = {
        "stall_total_us": total,
        "decode_iterations": decode.height,
        "median_decode_us": median,
        "slow": slow.select("iteration", "phase", "period_us", "stall_us", "tokens", "delayed").to_dicts(),
    }
    detail = {**_detail("stall_us", what, device), "cost_name": "stall_us", "extra": extra}
    waited = its.filter(pl.col("iteration").is_in(slow["delayed"].implode()) & (pl.col("phase") == "decode"))
    detail.update(
        step_rows=decode, per="decode iteration", also_cite=waited["event_idx"].to_list()
    )  # the stall is spread over the decodes it delays
    return _finding(pack, INTERFERENCE, slow, total / decode.height, detail)


def _stalls(its: pl.DataFrame, median: float, min_ratio: float, prefill_min_ratio: float) -> pl.DataFrame:
    """The iterations between decode iterations that stall them (`_interference`), with ``stall_us`` and
    ``delayed``: the decode iteration whose token waited (a prefill's next decode iteration, a mixed one itself)."""
    is_decode = pl.col("phase") == "decode"
    ran = is_decode.cast(pl.Int64)
    between = ran.cum_max().shift(1).fill_null(0) * ran.reverse().cum_max().reverse().shift(-1).fill_null(0)
    next_decode = pl.when(is_decode).then(pl.col("iteration")).shift(-1).backward_fill()
    alone = pl.col("phase") == "prefill"
    mixed = pl.col("phase") == "mixed"
    return (
        its.with_columns(between.alias("_between"), next_decode.alias("_next"))
        .filter(
            (pl.col("_between") == 1)
            & (
                (alone & (pl.col("period_us") >= prefill_min_ratio * median))
                | (mixed & (pl.col("period_us") >= min_ratio * median))
            )
        )
        .with_columns(
            pl.when(alone).then(pl.col("period_us")).otherwise(pl.col("period_us") - median).alias("stall_us"),
            pl.when(alone).then(pl.col("_next")).otherwise(pl.col("iteration")).alias("delayed"),
        )
        .drop("_between", "_next")
    )


def slow_iterations(slow: list[dict], periods: bool = False) -> str:
    """The slow iterations of an interference finding with their phases, as a title starts: 'Prefill iteration
    5', 'Mixed iterations 6, 11', 'Prefill and mixed iterations 5, 9' (``periods``: each with its period)."""
    if not slow:
        return ""
    kinds = " and ".join(dict.fromkeys(row["phase"] for row in slow)).capitalize()
    each = [f"{row['iteration']} ({ms(row['period_us'])})" if periods else str(row["iteration"]) for row in slow]
    return f"{kinds} iteration{'s' if len(slow) > 1 else ''} {', '.join(each)}"


def delays_text(slow: list[dict]) -> str:
    """What each slow iteration cost the running decodes, in one clause: 'decode 6 waited 13.9 ms for prefill
    5' (a prefill run on its own), 'mixed 11 ran 148.7 ms past a decode iteration' (a mixed iteration)."""
    return ", ".join(
        f"decode {row['delayed']} waited {ms(row['stall_us'])} for prefill {row['iteration']}"
        if row["phase"] == "prefill"
        else f"mixed {row['iteration']} ran {ms(row['stall_us'])} past a decode iteration"
        for row in slow
    )
