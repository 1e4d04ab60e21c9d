"""The rows a straggler finding cites: the collective rows of the slow and the typical rank where the slow one
arrives last, the kernel rows that differ in their pre-collective windows, and for a host gap the rows around the
longest idle stretch and the step rows — communication ops by pointer, CSV line or event, whichever the source has.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.across_ranks.straggler_arrivals import KEY
from profan.analyses.across_ranks.straggler_late_rank import LateRank
from profan.model.evidence import Evidence, cite_events, cite_lines, cite_pointers


def cite_ops(rows: pl.DataFrame, rank: int, select: dict) -> Evidence | None:
    """Evidence on one rank's communication op rows (pointer, CSV line or event index, whichever the source has)."""
    if rows.is_empty():
        return None
    rows = rows.sort("lateness_us", descending=True)
    values = {
        "rank": rank,
        "dur_us": [round(x, 3) for x in rows["dur_us"].to_list()[:20]],
        "lateness_us": [round(x, 3) for x in rows["lateness_us"].to_list()[:20]],
    }
    kind, file = rows["loc_kind"][0], rows["file"][0]
    if kind == "pointers":
        return cite_pointers(file, rows["pointer"].to_list(), select, values=values)
    if kind == "events":
        return cite_events(file, rows["loc"].to_list(), rows.height, select, values=values)
    return cite_lines(file, rows["loc"].to_list(), rows.height, select, values=values)


def _kernel_evidence(top: pl.DataFrame | None, side: str, rank: int, step) -> list[Evidence]:
    if top is None or top.is_empty():
        return []
    sfx = "" if side == "slow" else "_t"
    rows = top.filter(pl.col(f"count{sfx}") > 0)
    if rows.is_empty():
        return []
    locs = [x for lst in rows[f"locs{sfx}"].to_list() if lst for x in lst]
    file, kind = rows[f"loc_file{sfx}"].drop_nulls()[0], rows[f"loc_kind{sfx}"].drop_nulls()[0]
    n = int(rows[f"count{sfx}"].sum())
    select = {
        "source": "kernels in pre-collective windows",
        "rank": rank,
        "step": step,
        "names": rows["name"].to_list(),
    }
    values = {"time_us": round(float(rows[f"time_us{sfx}"].sum()), 3)}
    if kind == "events":
        return [cite_events(file, locs, n, select, values=values)]
    return [cite_lines(file, locs, n, select, values=values)]


def _gap_evidence(gap: dict | None, step) -> list[Evidence]:
    """The two rows around the slow rank's longest idle stretch, and the typical rank's rows in the same window."""
    out: list[Evidence] = []
    if not gap or not gap.get("lines") or not gap.get("file"):
        return out
    for g, role in ((gap, "slow"), (gap.get("typical"), "typical")):
        if not g or not g.get("lines") or not g.get("file"):
            continue
        cite = cite_events if g["file"].endswith((".json", ".json.gz")) else cite_lines
        out.append(
            cite(
                g["file"],
                g["lines"],
                len(g["lines"]),
                {
                    "source": "longest idle gap in the pre-collective window",
                    "rank": g["rank"],
                    "step": step,
                    "role": role,
                },
                values={"gap_us": g["gap_us"]},
            )
        )
    return out


def step_row_evidence(steps: pl.DataFrame, rank: int, step_list: list) -> list[Evidence]:
    if steps.is_empty() or "src_line" not in steps.columns:
        return []
    frame = steps.filter((pl.col("rank") == rank) & pl.col("step").is_in([x for x in step_list if x is not None]))
    if frame.is_empty():
        return []
    return [
        cite_lines(
            frame["file"][0],
            frame["src_line"].to_list(),
            frame.height,
            {"source": "step_trace_time", "rank": rank},
            values={"Free": frame["free_us"].to_list(), "Computing": frame["computing_us"].to_list()},
        )
    ]


def straggler_evidence(lr: LateRank, late: pl.DataFrame, steps: pl.DataFrame) -> tuple[Evidence, ...]:
    """The collective rows of the slow and the typical rank where the slow one arrives last, the kernel rows that
    differ in their windows, and for a host gap the rows around the longest idle stretch and the step rows."""
    evidence: list[Evidence] = []
    sel = {"source": "aligned collectives", "step": lr.step, "straggler": lr.rank}
    for rank, label in ((lr.rank, "slow"), (lr.typical, "typical")):
        rows = late.join(lr.last_rows.select(KEY), on=KEY, how="semi").filter(pl.col("rank") == rank)
        ev = cite_ops(rows, rank, {**sel, "rank": rank, "role": label})
        if ev is not None:
            evidence.append(ev)
    evidence += _kernel_evidence(lr.why.kernel_rows, "slow", lr.rank, lr.step)
    evidence += _kernel_evidence(lr.why.kernel_rows, "typical", lr.typical, lr.step)
    if lr.why.cause_class == "host_gap":
        evidence += _gap_evidence(lr.why.gap, lr.step)
        evidence += step_row_evidence(steps, lr.rank, [lr.step]) + step_row_evidence(steps, lr.typical, [lr.step])
    return tuple(evidence)
