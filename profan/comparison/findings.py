"""The findings of a comparison (check ``compare-regression``): B against A in total (summed kernel time per step
and rank, and the step time where both sides have step rows), each bucket that moved past the floor with the
kernels that moved most, and the kernels that run on one side only. Every finding cites rows on both sides."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.comparison.coverage import left_out_text
from profan.comparison.sides import Side
from profan.model.evidence import Evidence, cite_events, cite_lines
from profan.model.findings import Finding
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack

CHECK = "compare-regression"


def cite_side(row: dict, p: str, select: dict, values: dict) -> Evidence | None:
    locs = row.get(f"{p}_locs")
    if not locs:
        return None
    cite = cite_events if row[f"{p}_loc_kind"] == "events" else cite_lines
    return cite(
        row[f"{p}_file"], locs, int(row[f"{p}_rows"]), {**select, "cited_rank": row[f"{p}_rank"]}, values=values
    )


def _step_evidence(steps_t: pl.DataFrame, sa: Side, sb: Side) -> list[Evidence]:
    """The step_trace_time.csv row of the median rank, for every paired step, on both sides."""
    return [
        cite_lines(
            row[f"{p}_file"],
            [row[f"{p}_src_line"]],
            1,
            {"source": "step_trace_time", "side": side.label, "step": row[f"{p}_step"], "rank": row[f"{p}_cited_rank"]},
            values={
                "step_us": round(row[f"{p}_cited_step_us"], 3),
                "mean_step_us_over_ranks": round(row[f"{p}_step_us"], 3),
                "ranks": row[f"{p}_ranks"],
            },
        )
        for row in steps_t.iter_rows(named=True)
        for p, side in (("a", sa), ("b", sb))
    ]


def _bucket_evidence(buckets: pl.DataFrame) -> list[Evidence]:
    """Without step rows: the kernel rows of the bucket that moved most, on both sides."""
    if "delta_us" not in buckets.columns:
        return []
    top = buckets.sort(pl.col("delta_us").abs(), descending=True, maintain_order=True).head(1)
    return [
        evidence
        for row in top.iter_rows(named=True)
        for p in ("a", "b")
        if (
            evidence := cite_side(
                row,
                p,
                {"source": "kernels", "bucket": row["bucket"], "side": p.upper()},
                {"time_us": round(row[f"{p}_time_us"], 3)},
            )
        )
        is not None
    ]


def total_finding(
    totals: tuple[float, float], steps_t, buckets, sides: tuple[Side, Side], pack: RulePack, left
) -> Finding | None:
    """B against A in one finding: summed kernel time per step and rank, the step time where both sides have
    step rows (the figure `--fail-on-regression` reads), and what the comparison leaves out."""
    (total_a, total_b), (sa, sb) = totals, sides
    delta = total_b - total_a
    metrics = {"a_kernel_us": round(total_a, 3), "b_kernel_us": round(total_b, 3), "delta_us": round(delta, 3)}
    step_txt = ""
    if not steps_t.is_empty():
        evidence = _step_evidence(steps_t, sa, sb)
        sa_us, sb_us = float(steps_t["a_step_us"].mean()), float(steps_t["b_step_us"].mean())
        metrics |= {"a_step_us": round(sa_us, 3), "b_step_us": round(sb_us, 3), "steps_compared": steps_t.height}
        step_txt = (
            f" Step time (step_trace_time.csv) {ms(sa_us)} → {ms(sb_us)} "
            f"({'+' if sb_us >= sa_us else ''}{ms(sb_us - sa_us)})."
        )
    else:
        evidence = _bucket_evidence(buckets)
    if not evidence:
        return None
    left_txt, left_metrics = left_out_text(left)
    if left_metrics:
        metrics["left_out"] = left_metrics
    return Finding(
        check=CHECK,
        severity=pack.check(CHECK).severity_for("total"),
        title=(
            f"B vs A: summed kernel time per step {ms(total_a)} → {ms(total_b)} "
            f"({pct(delta / total_a if total_a else None)})"
        ),
        message=(
            f"A = {sa.desc}; B = {sb.desc}. Summed kernel time per step and rank goes from {ms(total_a)} to "
            f"{ms(total_b)} ({'+' if delta >= 0 else ''}{ms(delta)}, "
            f"{pct(delta / total_a if total_a else None)}).{step_txt}{left_txt}"
        ),
        metrics=metrics,
        evidence=tuple(evidence),
    )


def regression_findings(
    buckets: pl.DataFrame, kernels: pl.DataFrame, total_a: float, pack: RulePack, spread: dict[str, float]
) -> list[Finding]:
    """Buckets whose per-step time changed by at least the floor: growth is a regression of B (severity by share),
    shrinkage an improvement (info). With two ranks of one job the direction only says which rank spends more.
    A growth within ``noise_spreads`` times the bucket's step-to-step spread (``spread``: its standard deviation
    over the steps of either side, the larger) is what the same run does from one step to the next: info."""
    chk = pack.check(CHECK)
    out: list[Finding] = []
    if "delta_us" not in buckets.columns:
        return out
    floor = max(chk["min_delta_us"], chk["min_share"] * total_a)
    moved = buckets.filter(pl.col("delta_us").abs() >= floor).sort(
        pl.col("delta_us").abs(), descending=True, maintain_order=True
    )
    for row in moved.head(chk["max_findings"]).iter_rows(named=True):
        up = row["delta_us"] > 0
        share = abs(row["delta_us"]) / total_a if total_a else None
        noise_us = chk["noise_spreads"] * spread.get(row["bucket"], 0.0)
        loud = up and share is not None and row["delta_us"] > noise_us
        sev = (graded(share, chk) if loud else None) or chk.severity_for("regression" if up else "improvement")
        ks = _moved_kernels(kernels, row["bucket"], up)
        out.append(_bucket_change_finding(row, ks, up, share, sev, noise_us))
    return out


def _moved_kernels(kernels: pl.DataFrame, bucket: str, up: bool) -> pl.DataFrame:
    """The (at most 3) kernels of ``bucket`` that moved most in the bucket's direction, those on one side only
    included: a bucket that grew by kernels B alone runs grew mostly by them, not by the largest shared one."""
    frame = kernels.filter(
        (pl.col("bucket") == bucket) & ((pl.col("delta_us") > 0) if up else (pl.col("delta_us") < 0))
    )
    return frame.sort("delta_us", descending=up, maintain_order=True).head(3)


def _bucket_change_finding(
    row: dict, frame: pl.DataFrame, up: bool, share: float | None, sev: str, noise_us: float
) -> Finding:
    """A bucket's per-step change from A to B (``row`` of the bucket comparison), explained by the kernels that
    moved most (``ks``); a change within the steps' own spread (``noise_us``) says so."""
    k_txt = "; ".join(
        f"{k['op']}{' [' + k['input_shapes'] + ']' if k['input_shapes'] else ''} "
        f"{'+' if up else ''}{ms(k['delta_us'])} ({k['a_count']:g}→{k['b_count']:g} launches, "
        f"{k['a_time_us'] / max(k['a_count'], 1):,.1f}→{k['b_time_us'] / max(k['b_count'], 1):,.1f} µs each)"
        for k in frame.iter_rows(named=True)
    )
    top = frame.row(0, named=True) if frame.height else None
    word = "Regression" if up else "Improvement"
    sign = "+" if up else ""
    return Finding(
        check=CHECK,
        severity=sev,
        title=f"{word}: {row['bucket']} {sign}{ms(row['delta_us'])} per step in B"
        + (f", mostly {top['op']}" if top else ""),
        message=_change_message(row, k_txt, up, share, noise_us),
        metrics={
            "bucket": row["bucket"],
            "a_us": round(row["a_time_us"], 3),
            "b_us": round(row["b_time_us"], 3),
            "delta_us": round(row["delta_us"], 3),
            "share_of_a": round(share, 4) if share else None,
            "noise_us": round(noise_us, 3),
            "direction": "regression" if up else "improvement",
            "kernels": [
                {
                    "op": k["op"],
                    "name": k["name"],
                    "input_shapes": k["input_shapes"],
                    "delta_us": round(k["delta_us"], 3),
                    "a_count": k["a_count"],
                    "b_count": k["b_count"],
                }
                for k in frame.iter_rows(named=True)
            ],
        },
        evidence=_bucket_change_evidence(row, frame),
    )


def _change_message(row: dict, k_txt: str, up: bool, share: float | None, noise_us: float) -> str:
    """What a bucket's change says: its time on both sides, the kernels that moved, and where it lies within the
    steps' own spread."""
    sign = "+" if up else ""
    return (
        f"The {row['bucket']} bucket takes {ms(row['a_time_us'])} per step in A and "
        f"{ms(row['b_time_us'])} in B ({sign}{ms(row['delta_us'])}"
        + (f", {pct(share)} of A's summed kernel time" if share is not None else "")
        + "). "
        + (
            f"Largest changes: {k_txt}."
            if k_txt
            else "No kernel present on both sides moved that way; "
            "the change is in kernels present on one side only (see new/missing)."
        )
        + (
            f" That is within what the bucket moves from one step to the next of one run ({ms(noise_us)}): "
            "noise, not a regression, unless more steps show it."
            if abs(row["delta_us"]) <= noise_us
            else ""
        )
        + (
            ""
            if up or row["bucket"] != "communication"
            else " Less communication time on B with the same launches usually means B arrived later and "
            "waited less: A waits inside these kernels for B."
        )
    )


def _bucket_change_evidence(row: dict, frame: pl.DataFrame) -> tuple:
    """The bucket's kernel rows on each side, then the rows of the kernel that moved most on each side."""
    evidence = []
    for p in ("a", "b"):
        ev = cite_side(
            row,
            p,
            {"source": "kernels", "bucket": row["bucket"], "side": p.upper()},
            {"time_us_per_step": round(row[f"{p}_time_us"], 3)},
        )
        if ev is not None:
            evidence.append(ev)
    for k in frame.head(1).iter_rows(named=True):
        for p in ("a", "b"):
            ev = cite_side(
                k,
                p,
                {
                    "source": "kernels",
                    "op": k["op"],
                    "name": k["name"],
                    "input_shapes": k["input_shapes"],
                    "side": p.upper(),
                },
                {"time_us_per_step": round(k[f"{p}_time_us"], 3), "launches_per_step": k[f"{p}_count"]},
            )
            if ev is not None:
                evidence.append(ev)
    return tuple(evidence)


def new_missing_findings(kernels: pl.DataFrame, total_a: float, pack: RulePack) -> list[Finding]:
    chk = pack.check(CHECK)
    out: list[Finding] = []
    if "status" not in kernels.columns:
        return out
    floor = max(chk["min_delta_us"], chk["min_share"] * total_a)
    for status, p, word in (("new", "b", "only in B"), ("missing", "a", "only in A")):
        rows = (
            kernels.filter((pl.col("status") == status) & (pl.col(f"{p}_time_us") >= floor))
            .sort(f"{p}_time_us", descending=True, maintain_order=True)
            .head(5)
        )
        if rows.is_empty():
            continue
        evidence = [
            e
            for row in rows.iter_rows(named=True)
            if (
                e := cite_side(
                    row,
                    p,
                    {
                        "source": "kernels",
                        "op": row["op"],
                        "name": row["name"],
                        "input_shapes": row["input_shapes"],
                        "status": status,
                    },
                    {"time_us_per_step": round(row[f"{p}_time_us"], 3)},
                )
            )
            is not None
        ]
        if not evidence:
            continue
        txt = "; ".join(
            f"{row['op']}{' [' + row['input_shapes'] + ']' if row['input_shapes'] else ''} "
            f"{ms(row[f'{p}_time_us'])}"
            + (" (same name, other shape on the other side)" if row["same_name_other_shape"] else "")
            for row in rows.iter_rows(named=True)
        )
        out.append(
            Finding(
                check=CHECK,
                severity=pack.check(CHECK).severity_for("one_side"),
                title=f"{rows.height} kernel(s) {word}, {ms(float(rows[f'{p}_time_us'].sum()))} per step",
                message=f"Kernels {word} (per step and rank): {txt}.",
                metrics={
                    "status": status,
                    "kernels": rows.select("op", "name", "input_shapes", f"{p}_time_us").to_dicts(),
                },
                evidence=tuple(evidence),
            )
        )
    return out
