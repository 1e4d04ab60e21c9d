"""Per-rank charts for many ranks: one heatmap column per rank instead of one bar per rank and step.

Past `HEATMAP_RANKS` ranks a bar per rank and step has no room for its label (a 64-rank job of two steps is 128
bars; 1,000 ranks would be 2,000) and costs the page a drawn shape per bar and part. A heatmap is one image
whatever the number of ranks: each row is one part of the step (a bucket, computing, free time…), each column a
rank on a numeric axis (ticks every ten or hundred ranks stay legible), and the colour is how far the rank lies
from the median rank of that row — a rank that computes 20 % more than the others is a red column however small
the part is next to the rest. The hover gives the time itself; ranks a finding names are labelled above their
column and lead to it.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.figures.style import HIGHLIGHT, _esc, _esc_col, _figure, _layout, highlighted_ranks
from profan.model.report import Report

HEATMAP_RANKS = 16  # more ranks than this: the per-rank charts are heatmaps
HEATMAP_STEPS = 4  # up to this many steps, each step is a row of its own; beyond, a row holds the mean per step
MARKED_RANKS = 12  # claims listed in the hover of one label
LABEL_GAP = 0.08  # labels nearer than this share of the rank axis to the previous one go on a second line
CAUSE_RANKS = 8  # a cause naming this many ranks or fewer points at a place, and its ranks are marked
# blue below the median rank, white at it, red above; the range is the largest deviation, within these bounds
COLORSCALE = [[0.0, "#2b5ea7"], [0.35, "#b9cde9"], [0.5, "#f7f7f7"], [0.65, "#f3b7a9"], [1.0, "#b42318"]]
SPAN_LEAST, SPAN_MOST = 0.10, 1.0


def many_ranks(frame: pl.DataFrame) -> bool:
    """Whether a per-rank table holds too many ranks for a bar each."""
    return "rank" in frame.columns and frame.get_column("rank").n_unique() > HEATMAP_RANKS


def marked_ranks(report: Report) -> dict[int, list[dict[str, str]]]:
    """The ranks to mark on a heatmap: those of a cause that points at a place (a straggler, a slow stage of a
    few ranks) and those a finding names as holding the job back, each with the ids that name it."""
    out: dict[int, list[dict[str, str]]] = {}
    for cause in report.causes:
        ranks = [key for key in (cause.ranks or ()) if key is not None]
        for key in ranks if len(ranks) <= CAUSE_RANKS else ():
            out.setdefault(key, []).append({"id": cause.id, "title": cause.title})
    for key, value in highlighted_ranks(report.findings).items():
        out.setdefault(key, []).extend(value)
    return out


def step_rows(frame: pl.DataFrame, part: str, value: str, parts: list[str]) -> tuple[pl.DataFrame, list[str], str]:
    """``df`` (rank, step, part, value in µs) as heatmap cells (rank, row label, ms) and the row labels in order:
    ``parts`` in order, each as one row per step up to HEATMAP_STEPS steps, else as one row of the mean per step
    (and a note saying so)."""
    steps = frame.get_column("step").drop_nulls().unique().sort().to_list() if "step" in frame.columns else []
    if 1 < len(steps) <= HEATMAP_STEPS:
        label = pl.format("{} · step {}", pl.col(part).cast(pl.Utf8), pl.col("step").cast(pl.Utf8).fill_null("—"))
        cells = frame.select(pl.col("rank").cast(pl.Int64), label.alias("row"), (pl.col(value) / 1000.0).alias("ms"))
        have = set(cells.get_column("row").to_list())
        rows = [f"{p} · step {s}" for p in parts for s in [*steps, "—"] if f"{p} · step {s}" in have]
        return cells, rows, ""
    per_step = pl.col(value).sum() / 1000.0 / max(len(steps), 1)
    cells = frame.group_by(pl.col("rank").cast(pl.Int64), pl.col(part).cast(pl.Utf8).alias("row")).agg(
        per_step.alias("ms")
    )
    note = f"each cell is the mean over steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else ""
    return cells, [p for p in parts if p in set(cells.get_column("row").to_list())], note


def rank_heatmap(
    cells: pl.DataFrame,
    rows: list[str],
    *,
    marks: dict[int, list[dict[str, str]]],
    links: dict[int, str],
    what: str,
    note: str,
) -> go.Figure:
    """A heatmap of ``cells`` (rank, row, ms): ``rows`` top to bottom, a column per rank, coloured by the
    deviation from the row's median rank. ``marks``: ranks a finding names (labelled above their column, the
    label leading to the finding); ``links``: per rank, the cause or finding a click on its column opens."""
    ranks = sorted(set(cells.get_column("rank").to_list()))
    ms = _grid(cells, rows, ranks)
    z = [_deviation(row) for row in ms]
    span = min(max([abs(v) for row in z for v in row if v is not None] + [SPAN_LEAST]), SPAN_MOST)
    heat = go.Heatmap(
        x=ranks,
        y=rows,
        z=z,
        customdata=ms,
        zmin=-span,
        zmax=span,
        colorscale=COLORSCALE,
        xgap=1 if len(ranks) <= 128 else 0,
        ygap=1,
        hovertemplate="rank %{x}<br>%{y}: %{customdata:,.2f} ms<br>%{z:+.1%} against the median rank<extra></extra>",
        colorbar={"title": {"text": "vs median<br>rank"}, "tickformat": "+.0%", "thickness": 12},
    )
    shapes, labels = _marks(marks, ranks)
    layout = _layout(
        "",
        barmode=None,
        height=max(220, 24 * len(rows) + 140),
        margin={"l": 16, "r": 16, "t": 80 if marks else 24, "b": 48},
        xaxis={"title": {"text": f"rank ({len(ranks):,} ranks)"}, "type": "linear", "showgrid": False},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True},
        shapes=shapes,
        annotations=labels,
        meta={"note": _note(what, note), "rank_links": {str(key): value for key, value in links.items() if value}},
    )
    return _figure([heat], layout)


def _grid(cells: pl.DataFrame, rows: list[str], ranks: list[int]) -> list[list[float | None]]:
    """The cells as a matrix, ``rows`` by ``ranks`` (None where a rank has no value in a row); several values of
    one cell add up."""
    at_row = {r: index for index, r in enumerate(rows)}
    at_rank = {r: j for j, r in enumerate(ranks)}
    grid: list[list[float | None]] = [[None] * len(ranks) for _ in rows]
    for rank, row, ms in cells.select("rank", "row", "ms").iter_rows():
        index = at_row.get(row)
        if index is None or ms is None:
            continue
        j = at_rank[rank]
        grid[index][j] = (grid[index][j] or 0.0) + ms
    return [[None if v is None else round(v, 4) for v in row] for row in grid]


def _deviation(row: list[float | None]) -> list[float | None]:
    """Each value's deviation from the row's median (of the ranks that have one), as a fraction of it; a row
    whose median is 0 (a part only some ranks have) is measured against its mean instead."""
    values = sorted(v for v in row if v is not None)
    if not values:
        return [None] * len(row)
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    scale = median if median > 0 else (sum(values) / len(values)) or 1.0
    return [None if v is None else round((v - median) / scale, 3) for v in row]


def _runs(ranks: list[int]) -> list[tuple[int, int]]:
    """Consecutive ranks as (first, last) runs."""
    out: list[tuple[int, int]] = []
    for rank in sorted(ranks):
        if out and rank == out[-1][1] + 1:
            out[-1] = (out[-1][0], rank)
        else:
            out.append((rank, rank))
    return out


def _marks(marks: dict[int, list[dict[str, str]]], ranks: list[int]) -> tuple[list[dict], list[dict]]:
    """A bar above each run of named ranks' columns and a label above it with the ids naming them, which leads
    to the first (a slow pipeline stage, or eight hot-expert ranks side by side, is one label). Labels closer
    than LABEL_GAP of the axis to the previous one go on a second line, so none covers another."""
    shown = [mark for mark in sorted(marks) if mark in ranks]
    span = max(max(ranks) - min(ranks), 1) if ranks else 1
    shapes, labels, last_x, lifted = [], [], None, False
    for a, b in _runs(shown):
        found = [f for mark in range(a, b + 1) for f in marks.get(mark, [])]
        ids = sorted(dict.fromkeys(f["id"] for f in found), key=_id_order)
        shapes.append(  # a bar above the column(s), outside the cells: their colour stays in view
            {
                "type": "line",
                "xref": "x",
                "x0": a - 0.5,
                "x1": b + 0.5,
                "yref": "paper",
                "y0": 1.02,
                "y1": 1.02,
                "line": {"color": HIGHLIGHT, "width": 4},
            }
        )
        x = (a + b) / 2
        lifted = last_x is not None and (x - last_x) / span < LABEL_GAP and not lifted
        last_x = x
        where = f"r{a}" if a == b else f"r{a}–{b}"
        named = ", ".join(ids[:2]) + (f" +{len(ids) - 2}" if len(ids) > 2 else "")
        labels.append(
            {
                "x": x,
                "xref": "x",
                "y": 1.16 if lifted else 1.04,
                "yref": "paper",
                "yanchor": "bottom",
                "text": f"<b>{where} · {named}</b>",
                "showarrow": False,
                "font": {"color": HIGHLIGHT, "size": 11},
                "captureevents": True,
                "hovertext": "<br>".join(_esc(f"{f['id']}: {f['title']}") for f in found[:MARKED_RANKS]),
                "name": ids[0],
            }
        )
    return shapes, labels


def _id_order(claim: str) -> tuple[bool, int, str]:
    """Causes before findings, then by number: C2 before C10 before F1."""
    digits = "".join(ch for ch in claim.split(".")[0] if ch.isdigit())
    return (not claim.startswith("C"), int(digits) if digits else 0, claim)


def _note(what: str, note: str) -> str:
    parts = [f"one column per rank: {what}, coloured by how far the rank lies from the median rank"]
    return "; ".join([*parts, note] if note else parts)


def breakdown_heatmap(report: Report, frame: pl.DataFrame, links: dict[tuple[Any, Any], str]) -> go.Figure:
    """Many ranks: the breakdown as a heatmap, a row per bucket (and step), the largest buckets first."""
    frame = frame.with_columns(pl.col("bucket").cast(pl.Utf8)).filter(pl.col("rank").is_not_null())
    totals = frame.group_by("bucket").agg(pl.col("time_us").sum()).sort("time_us", "bucket", descending=[True, False])
    escaped = frame.with_columns(_esc_col(frame, "bucket"))
    order = [_esc(b) for b in totals.get_column("bucket").to_list()]
    cells, rows, note = step_rows(escaped, "bucket", "time_us", order)
    by_rank: dict[int, str] = {}
    for (rank, _step), fid in sorted(links.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        by_rank.setdefault(rank, fid)
    return rank_heatmap(
        cells,
        rows,
        marks=marked_ranks(report),
        links=by_rank,
        what="summed kernel time by bucket",
        note=note,
    )


def rank_comparison_heatmap(
    report: Report, frame: pl.DataFrame, parts: list, cites: dict[tuple[str, str], str]
) -> go.Figure:
    """Many ranks: computing / communication not overlapped / free as a heatmap, a row per part (and step); a
    click on a rank's column leads to the first finding citing one of its step rows."""
    cols = [col for col, _, _ in parts]
    names = {col: name for col, name, _ in parts}
    frame = frame.filter(pl.col("rank").is_not_null())
    keep = [col for col in ("rank", "step") if col in frame.columns]
    long = frame.select(*keep, *cols).unpivot(index=keep, on=cols, variable_name="part", value_name="us")
    long = long.with_columns(pl.col("part").replace_strict(names, return_dtype=pl.Utf8))
    cells, rows, note = step_rows(long, "part", "us", [names[col] for col in cols])
    links: dict[int, str] = {}
    if {"file", "src_line"} <= set(frame.columns):
        for rank, file, line in frame.select("rank", "file", "src_line").iter_rows():
            fid = cites.get((str(file), str(line)), "")
            if fid and rank not in links:
                links[rank] = fid
    return rank_heatmap(
        cells, rows, marks=marked_ranks(report), links=links, what="time in the step by part", note=note
    )
