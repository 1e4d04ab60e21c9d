"""The memory chart: allocated and reserved memory over time per rank, each rank's peak marked.

It draws the report's ``memory_curve`` table (the bounded curve of `profan.ranks.memory_pass`, which keeps every
rank's peak exactly) and ``memory_peaks``; it computes nothing. Op names and file names come from the capture, so
they are entity-escaped (Plotly reads a few HTML tags in strings) with control characters shown as visible escapes,
as in every other chart.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.figures.style import _esc, _esc_col
from profan.model.report import Report

MAX_RANKS = 8  # ranks drawn: the highest peaks (and the lowest, for the contrast), so the chart stays readable
CAPACITY_DRAWN = 0.5  # the capacity line is drawn when a rank's peak reaches this share of it
COLORS = ("#3b6fb6", "#c0392b", "#5aa469", "#8e6cc0", "#e0a030", "#2fa3a8", "#c76fa8", "#b07a4f")


def drawn_ranks(peaks: pl.DataFrame, most: int = MAX_RANKS) -> list[int]:
    """The ranks the chart draws: all up to ``most``, else the highest peaks and the lowest one."""
    order = peaks.sort(["peak_allocated_mb", "rank"], descending=[True, False])["rank"].to_list()
    if len(order) <= most:
        return sorted(order)
    return sorted({*order[: most - 1], order[-1]})


def memory(report: Report) -> go.Figure | None:
    """Allocated (solid) and reserved (dotted) MB over ms into each rank's capture; a marker at each rank's peak,
    its hover naming the op that allocated then and the cited row. None when the report has no memory data."""
    curve, peaks = report.tables.get("memory_curve"), report.tables.get("memory_peaks")
    if curve is None or peaks is None or curve.is_empty() or peaks.is_empty():
        return None
    ranks = drawn_ranks(peaks)
    traces: list[go.Scatter] = []
    for index, rank in enumerate(ranks):
        color = COLORS[index % len(COLORS)]
        c = curve.filter(pl.col("rank") == rank).sort("t_ms")
        traces += _rank_traces(rank, c, color)
        traces.append(_peak_marker(rank, peaks.filter(pl.col("rank") == rank).row(0, named=True), color))
    shown = (
        "" if len(ranks) == peaks.height else f"; {len(ranks)} of {peaks.height} ranks drawn (highest peaks, lowest)"
    )
    layout = {
        "height": 380,
        "margin": {"l": 64, "r": 16, "t": 24, "b": 48},
        "xaxis": {"title": {"text": "ms into the capture (each rank from its first memory row)"}, "zeroline": False},
        "yaxis": {"title": {"text": "MB"}, "gridcolor": "#eceff3", "zeroline": False, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": 1.14, "x": 0},
        "hovermode": "closest",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "meta": {"note": "allocated: solid; reserved: dotted; ◆ the peak" + shown},
        "shapes": _capacity_lines(peaks.filter(pl.col("rank").is_in(ranks))),
    }
    return go.Figure(data=traces, layout=go.Layout(template=go.layout.Template(), **layout))


def _capacity_lines(peaks: pl.DataFrame) -> list[dict[str, Any]]:
    """A dashed line at each device capacity the capture records (Kineto deviceProperties), labelled — only where
    a drawn rank's peak comes within half of it: a line far above would flatten the curves (the headroom is then
    in the table and the finding)."""
    worst = pl.coalesce("peak_reserved_mb", "peak_allocated_mb")
    near = peaks.filter(pl.col("capacity_mb").is_not_null() & (worst >= CAPACITY_DRAWN * pl.col("capacity_mb")))
    caps = near["capacity_mb"].unique().sort().to_list()
    return [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": cap,
            "y1": cap,
            "line": {"color": "#7a0019", "width": 1, "dash": "dash"},
            "label": {"text": f"device capacity {cap:,.0f} MB", "textposition": "end", "font": {"size": 10}},
        }
        for cap in caps
    ]


def _rank_traces(rank: int, frame: pl.DataFrame, color: str) -> list[go.Scatter]:
    what = pl.concat_str(pl.col("event").fill_null(""), pl.lit(" "), _esc_col(frame, "op")).str.strip_chars()
    at = pl.concat_str(_esc_col(frame, "file"), pl.lit(":"), pl.col("loc").cast(pl.Utf8))
    custom = frame.select(what.alias("what"), at.alias("at")).rows()
    out = [
        go.Scatter(
            x=frame["t_ms"].to_list(),
            y=frame["allocated_mb"].to_list(),
            mode="lines",
            line={"color": color, "width": 1.5, "shape": "hv"},
            name=f"rank {rank} allocated",
            customdata=custom,
            hovertemplate=f"rank {rank}<br>%{{x:,.1f}} ms<br>allocated %{{y:,.1f}} MB<br>%{{customdata[0]}}"
            "<br>%{customdata[1]}<extra></extra>",
        )
    ]
    if frame["reserved_mb"].drop_nulls().len():
        out.append(
            go.Scatter(
                x=frame["t_ms"].to_list(),
                y=frame["reserved_mb"].to_list(),
                mode="lines",
                line={"color": color, "width": 1, "dash": "dot", "shape": "hv"},
                name=f"rank {rank} reserved",
                customdata=custom,
                hovertemplate=f"rank {rank}<br>%{{x:,.1f}} ms<br>reserved %{{y:,.1f}} MB<br>%{{customdata[1]}}"
                "<extra></extra>",
            )
        )
    return out


def _peak_marker(rank: int, p: dict[str, Any], color: str) -> go.Scatter:
    when = ", ".join(x for x in (f"step {p['step']}" if p.get("step") is not None else "", p.get("phase") or "") if x)
    text = (
        f"rank {rank} peak {p['peak_allocated_mb']:,.1f} MB"
        + (f" ({_esc(when)})" if when else "")
        + (f"<br>allocated by {_esc(p['peak_op'])}" if p.get("peak_op") else "")
        + f"<br>{_esc(p['file'])}:{p['loc']}"
    )
    return go.Scatter(
        x=[p["peak_at_ms"]],
        y=[p["peak_allocated_mb"]],
        mode="markers",
        marker={"symbol": "diamond", "size": 11, "color": color, "line": {"color": "#222", "width": 1}},
        name=f"rank {rank} peak",
        showlegend=False,
        hovertext=[text],
        hoverinfo="text",
    )
