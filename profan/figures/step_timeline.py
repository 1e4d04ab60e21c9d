"""The timeline of one step: one pair of lanes per rank on the common clock.

The upper lane of a rank is its device time in time — compute, exposed communication and idle blocks where they
happened (the report's ``step_blocks`` table, cut per step from the trace's device lanes or the kernel file's
timed rows); the lower lane is its collectives where they happened, the part before the last rank arrives drawn
as waiting. A rank whose data places nothing in time (no trace, no kernel file) shows its step's totals end to
end instead, and says so. The first cause's ranks are shaded and its cited collectives outlined as windows.

`profan.figures.timeline_layout` lays the step out (which ranks, the clock, every block in ms with its source
row); this module draws it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.figures.iteration_lane import iteration_rows, iteration_traces
from profan.figures.style import HIGHLIGHT, TRANSFER, WAITING, _esc, _esc_col, _figure, _layout
from profan.figures.timeline_layout import (
    BLOCK_PARTS,
    COST_PARTS,
    LANE_BLOCKS,
    TABLE_PARTS,
    TIMELINE_LINKS,
    TIMELINE_RANKS,
    Timeline,
    lay_out,
)
from profan.model.report import Report


def _lanes(tl: Timeline, serving: set[int]) -> tuple[list[str], dict[int, tuple[str, ...]]]:
    """Lane names (y categories, top to bottom) and per rank its (split lane, collectives lane), with its
    iterations lane third for the ranks in ``serving`` (`iteration_lane`)."""
    has_comm = not tl.every.is_empty()
    per_rank = {}
    lanes = [f"all {tl.total} ranks · arrivals"] if tl.aggregated and has_comm else []
    for rank in tl.ranks:
        tag = " · ".join(tl.tags.get(rank, [])) if tl.aggregated or rank in tl.hot else ""
        split = f"rank {rank}" + (f" · {tag}" if tag else "")
        its = (f"rank {rank} · iterations",) if rank in serving else ()
        per_rank[rank] = (split, f"rank {rank} · comm" if has_comm else split, *its)
        lanes += [split, *its, f"rank {rank} · comm"] if has_comm else [split, *its]
    return lanes, per_rank


@dataclass(frozen=True)
class BarLook:
    """What a bar trace shows besides its bars: its legend name, colour and hover template."""

    name: str
    color: str
    hover: str


def _bars(look: BarLook, frame: pl.DataFrame, y: pl.Expr, base: str, length: str, custom: list[pl.Expr]):
    """One horizontal bar per row of ``df`` on lane ``y``, from column ``base`` for column ``length`` (ms), with
    ``custom`` as the hover's data; None when ``df`` is empty."""
    if frame.is_empty():
        return None
    cols = frame.select(y.alias("y"), pl.col(base), pl.col(length), pl.concat_list(custom).alias("cd"))
    marker: dict[str, Any] = {"color": look.color, "line": {"width": 0}}
    if "pieces" in frame.columns and (frame.get_column("pieces") > 1).any():  # merged blocks paler
        marker["opacity"] = frame.select(pl.when(pl.col("pieces") > 1).then(0.55).otherwise(1.0)).to_series().to_list()
    return go.Bar(
        name=look.name,
        orientation="h",
        y=cols.get_column("y").to_list(),
        base=cols.get_column(base).to_list(),
        x=cols.get_column(length).to_list(),
        customdata=cols.get_column("cd").to_list(),
        width=0.62,
        marker=marker,
        hovertemplate=look.hover,
    )


def _click(owner: pl.Expr) -> pl.Expr:
    return pl.when(owner != "").then(pl.format("click: {}", owner)).otherwise(pl.lit(""))


def _split_traces(tl: Timeline, lane_of: dict[int, tuple[str, ...]]) -> list:
    """One bar trace per part: compute, exposed communication, idle (in time, or a rank's totals)."""
    y = pl.col("rank").replace_strict({key: value[0] for key, value in lane_of.items()}, return_dtype=pl.Utf8)
    hover = (
        "%{y}<br><b>%{customdata[0]}</b>: %{customdata[1]}<br>%{customdata[2]}<br>%{customdata[3]}"
        "<br>%{customdata[4]}<extra></extra>"
    )
    colors = {name: color for _, name, color in (*BLOCK_PARTS, *COST_PARTS, *TABLE_PARTS)}
    order = {name: index for index, name in enumerate(colors)}
    out = []
    split = tl.split.with_columns(pl.col("part").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
    for (part,), frame in split.sort("_o", "rank", "start_ms").group_by("part", maintain_order=True):
        custom = [pl.col("part"), pl.col("when"), pl.col("detail"), pl.col("evidence"), _click(pl.col("owner"))]
        look = BarLook(str(part), colors[str(part)], hover)
        out.append(_bars(look, frame, y, "start_ms", "dur_ms", [*custom, pl.col("owner")]))
    return [t for t in out if t is not None]


def _comm_traces(tl: Timeline, lane_of: dict[int, tuple[str, ...]]) -> list:
    """Each collective as a block on its rank's comm lane: the part before the last rank arrives drawn as waiting,
    the rest as the collective."""
    blocks = tl.blocks
    if blocks.is_empty():
        return []
    y = pl.col("rank").replace_strict({key: value[1] for key, value in lane_of.items()}, return_dtype=pl.Utf8)
    last = pl.col("last_rank").cast(pl.Utf8).fill_null("?")
    note_wait = pl.format("waits {} ms for rank {} to arrive", pl.col("wait_ms").round(3), last)
    note_rest = pl.when(pl.col("aligned") & (pl.col("rank") == pl.col("last_rank"))).then(pl.lit("the last to arrive"))
    start = pl.col("start_ms").round(3).cast(pl.Utf8)
    hover = (
        "%{y}<br><b>%{customdata[0]}</b><br>starts at %{customdata[1]} ms, lasts %{customdata[2]} ms"
        "<br>%{customdata[3]}<br>%{customdata[4]}<br>%{customdata[5]}<extra></extra>"
    )

    def custom(note: pl.Expr) -> list[pl.Expr]:
        dur = pl.col("dur_ms").round(4).cast(pl.Utf8)
        return [
            pl.col("label"),
            start,
            dur,
            note.fill_null(""),
            pl.col("evidence"),
            _click(pl.col("owner")),
            pl.col("owner"),
        ]

    waiting = blocks.filter(pl.col("wait_ms") > 0)
    rest = blocks.with_columns(
        (pl.col("start_ms") + pl.col("wait_ms")).alias("rest_ms"),
        (pl.col("dur_ms") - pl.col("wait_ms")).alias("len_ms"),
    ).filter(pl.col("len_ms") > 0)
    return [
        t
        for t in (
            _bars(
                BarLook("Collective: waiting for the last rank", WAITING, hover),
                waiting,
                y,
                "start_ms",
                "wait_ms",
                custom(note_wait),
            ),
            _bars(BarLook("Collective", TRANSFER, hover), rest, y, "rest_ms", "len_ms", custom(note_rest)),
        )
        if t is not None
    ]


def _arrival_traces(tl: Timeline, lane: str) -> list:
    """With aggregated ranks, one lane over all of them: each aligned collective from its first rank's arrival to
    its last rank's — where that bar is long, every rank that came earlier waits."""
    if not tl.aggregated or tl.every.is_empty():
        return []
    hot = (
        tl.every.join(tl.cited, on=["file", "loc"])
        .select("group", "seq")
        .unique()
        .with_columns(pl.lit(True).alias("hot"))
    )
    keys = (
        tl.every.filter(pl.col("aligned"))
        .group_by("group", "seq")
        .agg(pl.col("name", "first_us", "last_us", "first_rank", "last_rank").first(), pl.len().alias("n"))
        .join(hot, on=["group", "seq"], how="left")
        .with_columns(((pl.col("last_us") - pl.col("first_us")) / 1000.0).alias("spread_ms"))
        .filter(pl.col("spread_ms") > 0)
        .sort("spread_ms", descending=True)
        .head(TIMELINE_LINKS)
    )
    if keys.is_empty():
        return []
    owner = pl.when(pl.col("hot").fill_null(False)).then(pl.lit(tl.cause.id if tl.cause else "")).otherwise(pl.lit(""))
    keys = keys.with_columns(
        ((pl.col("first_us") - tl.t0) / 1000.0).alias("start_ms"),
        _esc_col(keys, "name").alias("label"),
        owner.alias("owner"),
    )
    custom = [
        pl.col("label"),
        pl.format(
            "{} ranks; rank {} first, rank {} last, {} ms later",
            "n",
            "first_rank",
            "last_rank",
            pl.col("spread_ms").round(3),
        ),
        _click(pl.col("owner")),
        pl.col("owner"),
    ]
    hover = "%{y}<br><b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]}<extra></extra>"
    y = pl.lit(lane)
    look = BarLook("Arrival spread over all ranks", WAITING, hover)
    return [_bars(look, keys, y, "start_ms", "spread_ms", custom)]


def _link_traces(tl: Timeline, lane_of: dict[int, tuple[str, ...]]) -> list:
    """A line joining one collective's arrivals across the lanes (the cause's collectives in its colour)."""
    frame = tl.blocks.filter(pl.col("aligned"))
    if frame.is_empty():
        return []
    order = {rank: index for index, rank in enumerate(tl.ranks)}
    frame = frame.with_columns(
        pl.col("rank").replace_strict(order, return_dtype=pl.Int64).alias("lane"),
        pl.col("rank")
        .replace_strict({rank: value[1] for rank, value in lane_of.items()}, return_dtype=pl.Utf8)
        .alias("y"),
        pl.col("by_cause").any().over("group", "seq").alias("hot"),
        (pl.col("last_us") - pl.col("first_us")).alias("spread"),
    )
    keys = frame.group_by("group", "seq").agg(pl.len().alias("n"), pl.col("spread").first(), pl.col("hot").first())
    keys = keys.filter(pl.col("n") > 1).sort("hot", "spread", descending=True).head(TIMELINE_LINKS)
    pts = frame.join(keys.select("group", "seq"), on=["group", "seq"]).select(
        "group", "seq", "hot", "lane", "start_ms", "y"
    )
    # a gap (null point) after each collective's arrivals: one trace draws every line without joining them
    gaps = keys.select("group", "seq", "hot", pl.lit(len(order)).alias("lane"), start_ms=None, y=None)
    pts = pl.concat([pts, gaps], how="vertical_relaxed").sort("group", "seq", "lane")
    out = []
    for hot, color, width in ((False, "#8a94a3", 1.0), (True, HIGHLIGHT, 2.0)):
        part = pts.filter(pl.col("hot") == hot)
        if part.is_empty():
            continue
        out.append(
            go.Scatter(
                x=part.get_column("start_ms").to_list(),
                y=part.get_column("y").to_list(),
                mode="lines+markers",
                name="Same collective, arrivals" + (" (cited by the cause)" if hot else ""),
                line={"color": color, "width": width},
                marker={"symbol": "line-ns-open", "size": 12, "color": color, "line": {"width": 2, "color": color}},
                hoverinfo="skip",
                connectgaps=False,
            )
        )
    return out


def _lane_style(lanes: list[str], lane_of: dict[int, tuple[str, ...]], hot: list[int]) -> list[str]:
    """Tick labels: the cause's lanes bold in its colour (lane names are profan's own text, no trace text)."""
    marked = {lane for r in hot for lane in lane_of[r]}
    return [f'<span style="color:{HIGHLIGHT}"><b>{lane}</b></span>' if lane in marked else lane for lane in lanes]


def _marks(tl: Timeline, lanes: list[str], lane_of: dict[int, tuple[str, ...]]) -> tuple[list, list]:
    """Shapes and labels: a band behind each of the cause's ranks, and its windows across every lane."""
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    if tl.cause is None:
        return shapes, notes
    cid = tl.cause.id
    for r in tl.hot:
        idx = [lanes.index(lane) for lane in dict.fromkeys(lane_of[r])]
        shapes.append(
            {
                "type": "rect",
                "name": f"{cid} rank {r}",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": min(idx) - 0.5,
                "y1": max(idx) + 0.5,
                "fillcolor": "rgba(122,0,25,0.08)",
                "line": {"color": HIGHLIGHT, "width": 1},
                "layer": "below",
            }
        )
        notes.append(
            {
                "xref": "paper",
                "x": 1,
                "xanchor": "left",
                "yref": "y",
                "y": lane_of[r][0],
                "text": f"<b>{cid}</b>",
                "showarrow": False,
                "font": {"color": HIGHLIGHT},
                "captureevents": True,
                "hovertext": _esc(tl.cause.title),
                "name": cid,
            }
        )
    for x0, x1 in tl.windows:
        shapes.append(
            {
                "type": "rect",
                "name": f"{cid} window",
                "xref": "x",
                "x0": x0,
                "x1": x1,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(122,0,25,0.10)",
                "line": {"color": HIGHLIGHT, "width": 1, "dash": "dot"},
                "layer": "below",
            }
        )
    return shapes, notes


def _x_range(tl: Timeline) -> list[float]:
    """From the earliest block to the latest end, with a little room: markers would otherwise pad the axis."""
    spans = [tl.split.select("start_ms", (pl.col("start_ms") + pl.col("dur_ms")).alias("end_ms"))]
    every = tl.every.select(((pl.col("start_us") - tl.t0) / 1000.0).alias("start_ms"))
    spans.append(every.with_columns((pl.col("start_ms") + tl.every.get_column("dur_us") / 1000.0).alias("end_ms")))
    both = pl.concat(spans)
    lo = min(0.0, both.get_column("start_ms").min() or 0.0)
    hi = both.get_column("end_ms").max() or 1.0
    pad = (hi - lo) * 0.01
    return [lo - pad, hi + pad]


def _note(tl: Timeline) -> str:
    """What the picture shows, for the page (the figure's ``meta``)."""
    parts = [f"Step {tl.step} ({tl.why})" if tl.step is not None else "The whole capture (it has no step markers)"]
    if tl.aggregated:
        parts.append(f"{len(tl.ranks)} of {tl.total} ranks have lanes (tagged with why); the top lane spans all")
    if tl.cause is not None:
        hot = ", ".join(str(r) for r in tl.hot) or "none in the data"
        parts.append(f"{tl.cause.id}'s ranks ({hot}) are shaded")
        if tl.windows:
            parts.append(f"dotted windows: where ranks wait at the collectives {tl.cause.id} cites")
    parts += _placement_note(tl)
    if tl.dropped:
        parts.append(f"{tl.dropped:,} shorter collectives are not drawn (at most {LANE_BLOCKS} per lane)")
    return "; ".join(parts)


def _placement_note(tl: Timeline) -> list[str]:
    """Which upper lanes are in time, how many short stretches their blocks merge, and which show totals."""
    out = []
    if tl.placed:
        many = tl.split.filter((pl.col("pieces") > 1) & pl.col("rank").is_in(tl.placed)).unique("block_id")
        n, blocks = int(many.get_column("pieces").sum() or 0), many.height
        merged = (
            f"; {n:,} short stretches are merged into {blocks} blocks (each block's hover gives the exact compute, "
            "exposed communication and idle time in it)"
            if n
            else ""
        )
        out.append(f"upper lanes: compute, exposed communication and idle where they happened{merged}")
    totals = [rank for rank in tl.ranks if rank not in tl.placed and rank in set(tl.split.get_column("rank").to_list())]
    if totals:
        out.append(
            f"rank{'s' if len(totals) > 1 else ''} {', '.join(map(str, totals))}: the step's totals end to end "
            "(no trace or timed kernel rows place them in time)"
        )
    return out


def _timeline_meta(tl: Timeline, lanes: list[str]) -> dict[str, Any]:
    return {
        "step": tl.step,
        "why": tl.why,
        "cause": tl.cause.id if tl.cause else None,
        "cause_ranks": tl.hot,
        "ranks": tl.ranks,
        "total_ranks": tl.total,
        "lanes": lanes,
        "windows": [list(window) for window in tl.windows],
        "clock": tl.clock,
        "in_time": tl.placed,
        "note": _note(tl),
    }


def _iterations_meta(meta: dict[str, Any], its: pl.DataFrame, dropped: int) -> dict[str, Any]:
    """The figure's meta with what the iteration lanes draw (as it was for a capture with no iterations)."""
    if its.is_empty():
        return meta
    note = f"iteration lanes: each model iteration's period, coloured by phase ({its.height:,} drawn"
    note += f"; {dropped:,} shorter ones not drawn, at most {LANE_BLOCKS} per rank)" if dropped else ")"
    return {**meta, "iterations": its.height, "note": f"{meta['note']}; {note}"}


def timeline(report: Report, step: Any = None, *, max_ranks: int = TIMELINE_RANKS) -> go.Figure | None:
    """One step on the common clock, one pair of lanes per rank: the rank's compute, exposed communication and
    idle time where they happened (table step_blocks; a rank whose data places nothing in time shows its step's
    totals end to end, and the note says which), and the rank's collectives where they happened — the part
    before the last rank arrives drawn as waiting, a line joining each collective across ranks. The ranks of the
    cause it shows (`timeline_layout.focus`: the first that names some ranks, not all) are shaded and the collectives
    it cites outlined as windows; every block leads (hover, click on the page) to its source row and to the
    cause or finding citing it.

    ``step``: the step to draw (default: that cause's step, else the slowest). Beyond ``max_ranks`` ranks,
    the lanes are the cause's ranks, its comparison rank and the ranks with the shortest, median and longest
    step, under one lane of every rank's arrivals. ``layout.meta`` says what was chosen."""
    tl = lay_out(report, step, max_ranks)
    if tl is None:
        return None
    its, its_dropped = iteration_rows(report, tl)
    lanes, lane_of = _lanes(tl, set(its["rank"].to_list()) if not its.is_empty() else set())
    traces = [
        *_split_traces(tl, lane_of),
        *_comm_traces(tl, lane_of),
        *(_arrival_traces(tl, lanes[0]) if tl.aggregated else []),
        *_link_traces(tl, lane_of),
        *iteration_traces(its, {rank: lane[2] for rank, lane in lane_of.items() if len(lane) > 2}),
    ]
    shapes, notes = _marks(tl, lanes, lane_of)
    layout = _layout(
        "",
        barmode="overlay",
        height=max(240, 26 * len(lanes) + 130),
        margin={"l": 16, "r": 40, "t": 56, "b": 56},
        xaxis={"title": {"text": tl.clock}, "gridcolor": "#eceff3", "zeroline": False, "range": _x_range(tl)},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": lanes,
            "tickmode": "array",
            "tickvals": lanes,
            "ticktext": _lane_style(lanes, lane_of, tl.hot),
            "autorange": "reversed",
            "automargin": True,
        },
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        shapes=shapes,
        annotations=notes,
        meta=_iterations_meta(_timeline_meta(tl, lanes), its, its_dropped),
    )
    return _figure(traces, layout)
