"""The bar charts, heatmap and scatter of a report: device time by bucket, the rank comparison, boundness,
link bandwidth, and a comparison's buckets side by side."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.figures.rank_heatmap import breakdown_heatmap, many_ranks, marked_ranks, rank_comparison_heatmap
from profan.figures.style import (
    HEATMAP_ROWS,
    HIGHLIGHT,
    PALETTE,
    STEP_PARTS,
    _citers,
    _esc,
    _esc_col,
    _figure,
    _label,
    _layout,
    _many_ranks,
    _many_steps,
    _ms,
    _table,
    bucket_color,
    highlighted_ranks,
    step_table,
)
from profan.model.report import Report
from profan.model.textfmt import PIPE_COLUMNS, fmt_cell

SCATTER_POINTS = 1500  # transfers the bandwidth chart draws; beyond, the slowest and a sample (`_drawn_transfers`)


def breakdown(report: Report) -> go.Figure | None:
    """Summed kernel time per rank (and step) by bucket, stacked. A bar leads (click, on the page) to the
    step-breakdown finding that holds its rank and step: a group finding stands for its members."""
    frame = _table(report, "breakdown")
    if frame.is_empty() or not {"rank", "bucket", "time_us"} <= set(frame.columns):
        return None
    links = {
        (m.rank, m.step): finding.id
        for finding in reversed(report.findings)
        if finding.check == "step-breakdown"
        for m in (finding.members or (finding,))
    }
    if many_ranks(frame):
        return breakdown_heatmap(report, frame, links)
    many, by_r = _many_steps(frame), _many_ranks(frame)
    xs: list[str] = []
    traces: dict[str, dict[str, Any]] = {}
    for rec in frame.iter_rows(named=True):
        x = _label(rec["rank"], rec.get("step"), many, by_r)
        if x not in xs:
            xs.append(x)
        b = str(rec["bucket"])
        trace = traces.setdefault(
            b, {"name": b, "x": [], "y": [], "customdata": [], "color": bucket_color(b, len(traces))}
        )
        trace["x"].append(x)
        trace["y"].append(_ms(rec["time_us"]))
        fid = links.get((rec["rank"], rec.get("step")), "")
        trace["customdata"].append(
            [fmt_cell(rec.get("share"), "pct"), rec.get("kernels", ""), f"click: rows in {fid}" if fid else "", fid]
        )
    bars = [
        go.Bar(
            name=_esc(trace["name"]),
            x=trace["x"],
            y=trace["y"],
            customdata=trace["customdata"],
            marker={"color": trace["color"]},
            hovertemplate="%{x}<br>" + _esc(trace["name"]) + ": %{y:,.2f} ms"
            "<br>share %{customdata[0]}<br>%{customdata[1]} kernels<br>%{customdata[2]}<extra></extra>",
        )
        for trace in traces.values()
    ]
    layout = _layout("summed kernel time (ms)")
    layout["xaxis"].update(categoryorder="array", categoryarray=xs)
    return _figure(bars, layout)


def _rank_annotations(recs: list[dict], xs: list[str], highlights: dict, parts: list) -> list[dict[str, Any]]:
    out = []
    for rec, x in zip(recs, xs, strict=True):
        fs = highlights.get(rec["rank"])
        if not fs:
            continue
        top = _ms(rec.get("step_us")) if rec.get("step_us") is not None else sum(_ms(rec[c]) or 0 for c, _, _ in parts)
        out.append(
            {
                "x": x,
                "y": top,
                "text": "<b>" + " ".join(f["id"] for f in fs) + "</b>",
                "showarrow": True,
                "arrowhead": 0,
                "ay": -22,
                "ax": 0,
                "font": {"color": HIGHLIGHT},
                "captureevents": True,
                "hovertext": _esc("; ".join(f["title"] for f in fs)),
                "name": fs[0]["id"],
            }
        )
    return out


def rank_comparison(report: Report) -> go.Figure | None:
    """Computing / communication not overlapped / free per rank (and step). Ranks a finding names as holding the
    job back are outlined and tagged with it; a bar leads to the first finding citing its step row."""
    frame = step_table(report)[1]
    parts = [p for p in STEP_PARTS if p[0] in frame.columns]
    if frame.is_empty() or "rank" not in frame.columns or not parts:
        return None
    highlights = highlighted_ranks(report.findings)
    cites = _citers(report.findings)
    if many_ranks(frame):
        return rank_comparison_heatmap(report, frame, parts, cites)
    many, by_r = _many_steps(frame), _many_ranks(frame)
    recs = list(frame.iter_rows(named=True))
    xs = [_label(rec["rank"], rec.get("step"), many, by_r) for rec in recs]
    hot = [rec["rank"] in highlights for rec in recs]
    src = []
    for rec in recs:
        fid = cites.get((str(rec.get("file")), str(rec.get("src_line"))), "")
        src.append([_esc(f"{rec.get('file', '')}:{rec.get('src_line', '')}"), f"click: {fid}" if fid else "", fid])
    outline = {"color": [HIGHLIGHT if h else "rgba(0,0,0,0)" for h in hot], "width": [2.5 if h else 0 for h in hot]}
    bars = [
        go.Bar(
            name=name,
            x=xs,
            y=[_ms(rec[col]) for rec in recs],
            customdata=src,
            marker={"color": color, "line": outline},
            hovertemplate="%{x}<br>" + name + ": %{y:,.2f} ms<br>%{customdata[0]}<br>%{customdata[1]}<extra></extra>",
        )
        for col, name, color in parts
    ]
    layout = _layout("time in step (ms)", annotations=_rank_annotations(recs, xs, highlights, parts))
    return _figure(bars, layout)


def boundness(report: Report) -> go.Figure | None:
    """What bounds the hot kernels: their pipe utilisation ratios (PipeUtilization columns), as a heatmap of the
    first HEATMAP_ROWS rows of the boundness table."""
    frame = _table(report, "boundness")
    pipes = [pipe for pipe in PIPE_COLUMNS if pipe in frame.columns]
    if frame.is_empty() or not pipes:
        return None
    recs = list(frame.head(HEATMAP_ROWS).iter_rows(named=True))
    labels, hover = [], []
    for index, rec in enumerate(recs):
        name = str(rec.get("op") or rec.get("name") or index)
        short = name if len(name) <= 36 else name[:35] + "…"
        labels.append(_esc(f"{index + 1}. r{rec.get('rank', '?')} {short}"))
        hover.append(_esc(f"{name} ({rec.get('input_shapes') or ''})"[:200]))
    heat = go.Heatmap(
        x=list(pipes),
        y=labels,
        z=[[rec.get(pipe) for pipe in pipes] for rec in recs],
        zmin=0,
        zmax=1,
        colorscale=[[0, "#f4f7fb"], [0.5, "#7fa7d6"], [1, "#173f7a"]],
        customdata=[[h] * len(pipes) for h in hover],
        hovertemplate="%{y}<br>%{customdata}<br>%{x}: %{z:.0%}<extra></extra>",
        texttemplate="%{z:.0%}",
        textfont={"size": 11},
        colorbar={"title": {"text": "ratio"}, "tickformat": ".0%"},
    )
    note = (
        f"heatmap of the first {len(recs)} of {frame.height} rows; the table has them all"
        if frame.height > len(recs)
        else ""
    )
    layout = _layout(
        "",
        height=max(260, 26 * len(recs) + 90),
        barmode=None,
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        xaxis={"side": "top", "type": "category"},
        margin={"l": 16, "r": 16, "t": 40, "b": 16},
        meta={"note": note},
    )
    return _figure([heat], layout)


def _prior_marks(transport: str, prior: float, color: str) -> tuple[dict[str, Any], dict[str, Any]]:
    line = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": prior,
        "y1": prior,
        "line": {"color": color, "dash": "dash", "width": 1.5},
    }
    label = {
        "xref": "paper",
        "x": 1,
        "xanchor": "right",
        "y": prior,
        "yanchor": "bottom",
        "text": _esc(f"{transport} prior {prior:,.0f} GB/s"),
        "showarrow": False,
        "font": {"color": color, "size": 11},
    }
    return line, label


def _drawn_transfers(rows: pl.DataFrame, named: list[int]) -> tuple[pl.DataFrame, str]:
    """The transfers the bandwidth chart draws: all up to SCATTER_POINTS; beyond (a cluster's ranks × ops ×
    transports), per transport its slowest, an even sample across its range of bandwidths, and every transfer
    of the ranks the verdict names — with a note saying so. The chart stays a picture of the spread and its
    outliers, not 16,000 markers."""
    if rows.height <= SCATTER_POINTS:
        return rows, ""
    per = max(SCATTER_POINTS // max(rows.get_column("transport").n_unique(), 1), 8)
    at = pl.int_range(pl.len()).over("transport")
    ranked = (
        rows.with_row_index("_i")
        .sort("bandwidth_gbps", "_i")
        .with_columns(at.alias("_at"), pl.len().over("transport").alias("_n"))
    )
    slowest = pl.col("_at") < per // 4
    step = (pl.col("_n") // (per - per // 4)).clip(1, None)
    sample = (pl.col("_at") % step) == 0
    named_rank = pl.col("rank").is_in(named) if "rank" in rows.columns and named else pl.lit(False)
    kept = ranked.filter(slowest | sample | named_rank).sort("_i").drop("_i", "_at", "_n")
    note = (
        f"{kept.height:,} of {rows.height:,} transfers drawn: per transport the {per // 4} slowest and an even "
        "sample across the range of bandwidths"
        + (", and every transfer of the ranks the verdict names" if named and "rank" in rows.columns else "")
        + "; every transfer is in the comm_bandwidth table"
    )
    return kept, note


def bandwidth(report: Report) -> go.Figure | None:
    """Measured bandwidth per transfer against its size, one colour per transport, with the prior (the link's
    expected bandwidth from rules/hardware) as a dashed line where one applies."""
    frame = _table(report, "comm_bandwidth")
    if frame.is_empty() or not {"bandwidth_gbps", "size_mb", "transport"} <= set(frame.columns):
        return None
    rows = frame.filter(pl.col("bandwidth_gbps").is_not_null() & (pl.col("size_mb") > 0))
    if "is_link" in rows.columns:
        rows = rows.filter(pl.col("is_link").fill_null(True))
    if rows.is_empty():
        return None
    what = pl.format(
        "rank {} · {}",
        pl.col("rank").cast(pl.Utf8).fill_null("?") if "rank" in rows.columns else pl.lit("?"),
        pl.coalesce([pl.col(c).cast(pl.Utf8) for c in ("op_name", "op") if c in rows.columns] + [pl.lit("")]),
    )
    rows, drawn = _drawn_transfers(rows, list(marked_ranks(report)))
    rows = rows.with_columns(what.alias("_what"))
    rows = rows.with_columns(_esc_col(rows, "_what"))
    points, shapes, annotations = [], [], []
    for index, ((transport,), part) in enumerate(rows.group_by("transport", maintain_order=True)):
        color = PALETTE[index % len(PALETTE)]
        points.append(
            go.Scatter(
                mode="markers",
                name=_esc(transport),
                x=part.get_column("size_mb").to_list(),
                y=part.get_column("bandwidth_gbps").to_list(),
                marker={"color": color, "size": 8, "opacity": 0.8, "line": {"width": 0.5, "color": "#fff"}},
                customdata=part.get_column("_what").to_list(),
                hovertemplate="%{customdata}<br>"
                + _esc(transport)
                + ": %{y:,.1f} GB/s for %{x:,.2f} MB<extra></extra>",
            )
        )
        priors = part.get_column("prior_gbps").drop_nulls() if "prior_gbps" in part.columns else pl.Series([])
        if len(priors):
            line, label = _prior_marks(str(transport), float(priors[0]), color)
            shapes.append(line)
            annotations.append(label)
    notes = [drawn, "" if shapes else "no bandwidth prior applies to these links (see the notes above)"]
    note = "; ".join(n for n in notes if n)
    layout = _layout(
        "bandwidth (GB/s)",
        barmode=None,
        shapes=shapes,
        annotations=annotations,
        showlegend=True,
        xaxis={"type": "log", "title": {"text": "transfer size (MB)"}, "gridcolor": "#eceff3"},
        meta={"note": note},
    )
    return _figure(points, layout)


def compare_buckets(report: Report) -> go.Figure | None:
    """`profan compare`: summed time per bucket on side A and side B, side by side."""
    frame = _table(report, "compare_buckets")
    if frame.is_empty() or not {"bucket", "a_time_us", "b_time_us"} <= set(frame.columns):
        return None
    xs = [_esc(b) for b in frame.get_column("bucket").to_list()]
    bars = [
        go.Bar(
            name=name,
            x=xs,
            y=(frame.get_column(col) / 1000.0).to_list(),
            marker={"color": color},
            hovertemplate="%{x}<br>" + name + ": %{y:,.2f} ms<extra></extra>",
        )
        for col, name, color in (("a_time_us", "A", "#9aa5b1"), ("b_time_us", "B", "#3b6fb6"))
    ]
    return _figure(bars, _layout("summed kernel time (ms)", barmode="group"))
