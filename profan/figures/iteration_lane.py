"""A serving capture's model iterations on the timeline: one lane per rank under its device lane, each iteration a
band from its start to the next one's (its period), coloured by phase — prefill, mixed, decode, unknown — so a
slow mixed iteration shows where the decodes around it stall.

The bands are the report's ``serving_iterations`` rows on the timeline's clock (trace µs less ``Timeline.t0``),
those overlapping the drawn span of their rank's device lane; beyond ``LANE_BLOCKS`` per rank the longest are
drawn and the rest counted in the figure's note. Each band's hover names its iteration, phase, period, tokens and
the event that marked it.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from profan.figures.style import _esc_col
from profan.figures.timeline_layout import LANE_BLOCKS, Timeline
from profan.model.report import Report

PHASE_COLORS = {"prefill": "#e0a030", "mixed": "#c0392b", "decode": "#5aa469", "unknown": "#9aa0a6"}


def iteration_rows(report: Report, tl: Timeline) -> tuple[pl.DataFrame, int]:
    """The lane ranks' iterations overlapping their device lane's span, in ms on the clock (``rank, iteration,
    phase, start_ms, dur_ms, tokens, evidence``), at most LANE_BLOCKS per rank (the longest), and how many were
    left out; empty for a report with no iterations."""
    its = report.tables.get("serving_iterations")
    if its is None or its.is_empty() or tl.split.is_empty():
        return pl.DataFrame(), 0
    span = tl.split.group_by("rank").agg(
        pl.col("start_ms").min().alias("_lo"), (pl.col("start_ms") + pl.col("dur_ms")).max().alias("_hi")
    )
    rows = its.filter(pl.col("rank").is_in(tl.ranks)).select(
        "rank",
        "iteration",
        "phase",
        ((pl.col("start_us") - tl.t0) / 1000.0).alias("start_ms"),
        (pl.col("period_us") / 1000.0).alias("dur_ms"),
        pl.col("tokens"),
        pl.format("{}#{}", _esc_col(its, "file"), pl.col("event_idx")).alias("evidence"),
    )
    rows = rows.join(span, on="rank").filter(
        (pl.col("start_ms") < pl.col("_hi")) & (pl.col("start_ms") + pl.col("dur_ms") > pl.col("_lo"))
    )
    kept = rows.filter(pl.col("dur_ms").rank("ordinal", descending=True).over("rank") <= LANE_BLOCKS)
    return kept.drop("_lo", "_hi").sort("rank", "start_ms"), rows.height - kept.height


def iteration_traces(rows: pl.DataFrame, lane_of: dict[int, str]) -> list[go.Bar]:
    """One bar trace per phase (legend "<phase> iterations") on each rank's iteration lane."""
    if rows.is_empty():
        return []
    hover = (
        "%{y}<br><b>iteration %{customdata[0]}</b> (%{customdata[1]})<br>period %{customdata[2]} ms from "
        "%{customdata[3]} ms<br>tokens: %{customdata[4]}<br>marked by %{customdata[5]}<extra></extra>"
    )
    out = []
    for (phase,), frame in rows.group_by("phase", maintain_order=True):
        custom = frame.select(
            pl.concat_list(
                pl.col("iteration").cast(pl.String),
                pl.col("phase"),
                pl.col("dur_ms").round(3).cast(pl.String),
                pl.col("start_ms").round(3).cast(pl.String),
                pl.col("tokens").cast(pl.String).fill_null("unknown"),
                pl.col("evidence"),
            )
        ).to_series()
        out.append(
            go.Bar(
                name=f"{phase} iterations",
                orientation="h",
                y=frame["rank"].replace_strict(lane_of, return_dtype=pl.String).to_list(),
                base=frame["start_ms"].to_list(),
                x=frame["dur_ms"].to_list(),
                customdata=custom.to_list(),
                width=0.62,
                marker={
                    "color": PHASE_COLORS.get(str(phase), PHASE_COLORS["unknown"]),
                    "line": {"width": 1, "color": "#ffffff"},
                },
                hovertemplate=hover,
            )
        )
    return out
