"""Plotly figures of a Report, for a notebook and for the HTML report alike.

One function per chart: it takes the Report and returns a ``plotly.graph_objects.Figure``, or None when the report
has nothing for it (a comparison has no timeline, a GPU trace no boundness heatmap). The HTML report embeds exactly
these figures, so a chart reads the same in a notebook as on the page, and a fix to one is a fix to both.

Plotly reads a few HTML tags in strings, so text taken from a trace (kernel names, files, JSON pointers) is
entity-escaped before it becomes a label: a kernel called ``<b>x</b>`` is drawn as exactly that text. Control
characters are shown as visible escapes (``textfmt.visible``), as everywhere else in the reports.

>>> import profan
>>> report = profan.analyze("fixtures/ascend/msinsight-qwen3-4rank-2025q4")
>>> profan.figures.timeline(report).show()
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.report import Report
from profan.render.textfmt import PIPE_COLUMNS, fmt_cell, visible
from profan.sources.kineto import SOURCE_ANNOTATION, SOURCE_KERNEL

__all__ = [
    "FIGURES",
    "bandwidth",
    "boundness",
    "breakdown",
    "compare_buckets",
    "rank_comparison",
    "timeline",
]

BUCKET_COLORS = {
    "attention": "#3b6fb6",
    "ffn": "#5aa469",
    "moe": "#8e6cc0",
    "communication": "#d9534f",
    "conv": "#2fa3a8",
    "optimizer": "#e0a030",
    "memory": "#b07a4f",
    "vector": "#9aa5b1",
    "ai_cpu": "#c76fa8",
    "other": "#c4c9cf",
    "idle": "#e8eaed",
    "free": "#e8eaed",
}
PALETTE = ("#3b6fb6", "#5aa469", "#8e6cc0", "#e0a030", "#2fa3a8", "#c76fa8", "#b07a4f", "#6b8e23", "#708090")
COMPUTE, TRANSFER, WAITING, IDLE = "#3b6fb6", "#d9534f", "#f0ad4e", "#c4c9cf"
STEP_PARTS = (
    ("computing_us", "Computing", COMPUTE),
    ("comm_not_overlapped_us", "Communication (not overlapped)", TRANSFER),
    ("free_us", "Free (device idle)", IDLE),
)
STEP_TABLES = ("steps", "trace_steps")  # the first with computing/communication/free columns feeds the rank chart
HIGHLIGHT = "#7a0019"
HEATMAP_ROWS = 40

# metrics keys through which a finding names the rank(s) that hold the others back
_SLOW_RANK_KEYS = ("straggler_ranks", "slow_ranks", "late_ranks", "straggler_rank", "slow_rank", "late_rank")
_TEMPLATE = go.layout.Template()  # no theme: each layout sets its colours, the same in a notebook and on the page


# ------------------------------------------------------------------------------------------ shared


def _esc(s: Any) -> str:
    """Text for Plotly labels: Plotly reads a few HTML tags in strings, so untrusted text is entity-escaped."""
    return html.escape(visible(str(s)), quote=False)


def _esc_col(df: pl.DataFrame, name: str) -> pl.Expr:
    """``_esc`` over a column, computed once per distinct value (names and files repeat across many rows)."""
    values = df.get_column(name).cast(pl.Utf8).fill_null("").unique().to_list()
    return pl.col(name).cast(pl.Utf8).fill_null("").replace_strict({v: _esc(v) for v in values}, return_dtype=pl.Utf8)


def _num(name: str, dtype: pl.DataType) -> pl.Expr:
    """A column as a number, null where it is not one: a report read back from JSON is untrusted input."""
    return pl.col(name).cast(dtype, strict=False)


def _ms(us: Any) -> float | None:
    return None if us is None else us / 1000.0


def bucket_color(bucket: str, i: int) -> str:
    return BUCKET_COLORS.get(bucket.lower(), PALETTE[i % len(PALETTE)])


def _label(rank: Any, step: Any, many_steps: bool, many_ranks: bool = False) -> str:
    if many_steps:
        return f"r{rank} · s{step}" if step is not None else f"r{rank} · no step"
    return f"r{rank}" if many_ranks else f"rank {rank}"


def _many_steps(df: pl.DataFrame) -> bool:
    """Label bars with their step when a rank has more than one (kernels outside any step count as one)."""
    return "step" in df.columns and df.get_column("step").n_unique() > 1


def _many_ranks(df: pl.DataFrame) -> bool:
    return "rank" in df.columns and df.get_column("rank").n_unique() > 16


def _layout(ytitle: str, **kw: Any) -> dict[str, Any]:
    base = {
        "barmode": "stack",
        "height": 380,
        "margin": {"l": 64, "r": 16, "t": 24, "b": 64},
        "yaxis": {"title": {"text": ytitle}, "gridcolor": "#eceff3", "zeroline": False},
        "xaxis": {"type": "category", "automargin": True, "tickangle": -40},
        "legend": {"orientation": "h", "y": 1.12, "x": 0, "traceorder": "normal"},
        "hovermode": "closest",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "bargap": 0.25,
    }
    base.update(kw)
    return base


def _figure(traces: list, layout: dict[str, Any]) -> go.Figure:
    return go.Figure(data=traces, layout=go.Layout(template=_TEMPLATE, **layout))


def _table(report: Report, name: str) -> pl.DataFrame:
    df = report.tables.get(name)
    return pl.DataFrame() if df is None else df


def highlighted_ranks(findings: list[Finding]) -> dict[int, list[dict[str, str]]]:
    """Ranks a finding names as holding the job back (straggler, slow pipeline stage), with those findings."""
    out: dict[int, list[dict[str, str]]] = {}
    for f in findings:
        ranks: list[int] = []
        for key in _SLOW_RANK_KEYS:
            v = f.metrics.get(key)
            if isinstance(v, list | tuple):
                ranks += [int(x) for x in v if isinstance(x, int)]
            elif isinstance(v, int) and not isinstance(v, bool):
                ranks.append(v)
        if not ranks and "straggler" in f.check and f.rank is not None:
            ranks = [f.rank]
        for r in dict.fromkeys(ranks):
            out.setdefault(r, []).append({"id": f.id, "check": f.check, "title": f.title})
    return out


def step_table(report: Report) -> tuple[str, pl.DataFrame]:
    """The table the rank comparison draws: step_trace_time rows (Ascend) or per-step rows of a trace; when a
    table also holds whole-trace rows (``scope``), the per-step ones are drawn if there are any."""
    for name in STEP_TABLES:
        df = report.tables.get(name)
        if df is None or df.is_empty() or not {"rank", "computing_us"} <= set(df.columns):
            continue
        if "scope" in df.columns and (df.get_column("scope") == "step").any():
            df = df.filter(pl.col("scope") == "step")
        return name, df
    return "", pl.DataFrame()


def _citers(items: Iterable[Cause | Finding]) -> dict[tuple[str, str], str]:
    """(file, locator as text) -> the id of the first cause or finding citing that row; a member's rows lead to
    its group, whose block on the page holds the member table."""
    out: dict[tuple[str, str], str] = {}
    for item in items:
        for m in (item, *getattr(item, "members", ())):
            for ev in m.evidence:
                for loc in ev.locators:
                    out.setdefault((ev.file, str(loc)), item.id)
    return out


# ------------------------------------------------------------------------------------------ bar charts


def breakdown(report: Report) -> go.Figure | None:
    """Summed kernel time per rank (and step) by bucket, stacked. A bar leads (click, on the page) to the
    step-breakdown finding that holds its rank and step: a group finding stands for its members."""
    df = _table(report, "breakdown")
    if df.is_empty() or not {"rank", "bucket", "time_us"} <= set(df.columns):
        return None
    links = {
        (m.rank, m.step): f.id
        for f in reversed(report.findings)
        if f.check == "step-breakdown"
        for m in (f.members or (f,))
    }
    many, many_ranks = _many_steps(df), _many_ranks(df)
    xs: list[str] = []
    traces: dict[str, dict[str, Any]] = {}
    for rec in df.iter_rows(named=True):
        x = _label(rec["rank"], rec.get("step"), many, many_ranks)
        if x not in xs:
            xs.append(x)
        b = str(rec["bucket"])
        t = traces.setdefault(b, {"name": b, "x": [], "y": [], "customdata": [], "color": bucket_color(b, len(traces))})
        t["x"].append(x)
        t["y"].append(_ms(rec["time_us"]))
        fid = links.get((rec["rank"], rec.get("step")), "")
        t["customdata"].append(
            [fmt_cell(rec.get("share"), "pct"), rec.get("kernels", ""), f"click: rows in {fid}" if fid else "", fid]
        )
    bars = [
        go.Bar(
            name=_esc(t["name"]),
            x=t["x"],
            y=t["y"],
            customdata=t["customdata"],
            marker={"color": t["color"]},
            hovertemplate="%{x}<br>" + _esc(t["name"]) + ": %{y:,.2f} ms"
            "<br>share %{customdata[0]}<br>%{customdata[1]} kernels<br>%{customdata[2]}<extra></extra>",
        )
        for t in traces.values()
    ]
    layout = _layout("summed kernel time (ms)")
    layout["xaxis"].update(categoryorder="array", categoryarray=xs)
    return _figure(bars, layout)


def _rank_annotations(recs: list[dict], xs: list[str], highlights: dict, parts: list) -> list[dict[str, Any]]:
    out = []
    for r, x in zip(recs, xs, strict=True):
        fs = highlights.get(r["rank"])
        if not fs:
            continue
        top = _ms(r.get("step_us")) if r.get("step_us") is not None else sum(_ms(r[c]) or 0 for c, _, _ in parts)
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
    df = step_table(report)[1]
    parts = [p for p in STEP_PARTS if p[0] in df.columns]
    if df.is_empty() or "rank" not in df.columns or not parts:
        return None
    highlights = highlighted_ranks(report.findings)
    cites = _citers(report.findings)
    many, many_ranks = _many_steps(df), _many_ranks(df)
    recs = list(df.iter_rows(named=True))
    xs = [_label(r["rank"], r.get("step"), many, many_ranks) for r in recs]
    hot = [r["rank"] in highlights for r in recs]
    src = []
    for r in recs:
        fid = cites.get((str(r.get("file")), str(r.get("src_line"))), "")
        src.append([_esc(f"{r.get('file', '')}:{r.get('src_line', '')}"), f"click: {fid}" if fid else "", fid])
    outline = {"color": [HIGHLIGHT if h else "rgba(0,0,0,0)" for h in hot], "width": [2.5 if h else 0 for h in hot]}
    bars = [
        go.Bar(
            name=name,
            x=xs,
            y=[_ms(r[col]) for r in recs],
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
    df = _table(report, "boundness")
    pipes = [p for p in PIPE_COLUMNS if p in df.columns]
    if df.is_empty() or not pipes:
        return None
    recs = list(df.head(HEATMAP_ROWS).iter_rows(named=True))
    labels, hover = [], []
    for i, r in enumerate(recs):
        name = str(r.get("op") or r.get("name") or i)
        short = name if len(name) <= 36 else name[:35] + "…"
        labels.append(_esc(f"{i + 1}. r{r.get('rank', '?')} {short}"))
        hover.append(_esc(f"{name} ({r.get('input_shapes') or ''})"[:200]))
    heat = go.Heatmap(
        x=list(pipes),
        y=labels,
        z=[[r.get(p) for p in pipes] for r in recs],
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
        f"heatmap of the first {len(recs)} of {df.height} rows; the table has them all" if df.height > len(recs) else ""
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


def bandwidth(report: Report) -> go.Figure | None:
    """Measured bandwidth per transfer against its size, one colour per transport, with the prior (the link's
    expected bandwidth from rules/hardware) as a dashed line where one applies."""
    df = _table(report, "comm_bandwidth")
    if df.is_empty() or not {"bandwidth_gbps", "size_mb", "transport"} <= set(df.columns):
        return None
    rows = df.filter(pl.col("bandwidth_gbps").is_not_null() & (pl.col("size_mb") > 0))
    if "is_link" in rows.columns:
        rows = rows.filter(pl.col("is_link").fill_null(True))
    if rows.is_empty():
        return None
    what = pl.format(
        "rank {} · {}",
        pl.col("rank").cast(pl.Utf8).fill_null("?") if "rank" in rows.columns else pl.lit("?"),
        pl.coalesce([pl.col(c).cast(pl.Utf8) for c in ("op_name", "op") if c in rows.columns] + [pl.lit("")]),
    )
    rows = rows.with_columns(what.alias("_what"))
    rows = rows.with_columns(_esc_col(rows, "_what"))
    points, shapes, annotations = [], [], []
    for i, ((transport,), part) in enumerate(rows.group_by("transport", maintain_order=True)):
        color = PALETTE[i % len(PALETTE)]
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
    note = "" if shapes else "no bandwidth prior applies to these links (see the notes above)"
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
    df = _table(report, "compare_buckets")
    if df.is_empty() or not {"bucket", "a_time_us", "b_time_us"} <= set(df.columns):
        return None
    xs = [_esc(b) for b in df.get_column("bucket").to_list()]
    bars = [
        go.Bar(
            name=name,
            x=xs,
            y=(df.get_column(col) / 1000.0).to_list(),
            marker={"color": color},
            hovertemplate="%{x}<br>" + name + ": %{y:,.2f} ms<extra></extra>",
        )
        for col, name, color in (("a_time_us", "A", "#9aa5b1"), ("b_time_us", "B", "#3b6fb6"))
    ]
    return _figure(bars, _layout("summed kernel time (ms)", barmode="group"))


# ------------------------------------------------------------------------------------------ timeline

TIMELINE_RANKS = 16  # up to this many ranks, every rank has lanes; beyond, the cause's ranks and representatives
CAUSE_LANES = 8  # lanes kept for the cause's ranks when the ranks are aggregated
LANE_BLOCKS = 300  # collective blocks drawn per lane (the longest); the rest are counted in the note
TIMELINE_LINKS = 200  # collectives joined across lanes (widest arrival spread first)
TIMELINE_WINDOWS = 20  # cause windows outlined (widest first)

# The step's split per rank, one lane segment per part, in this order: step_cost's columns where the report has
# the table (exposed communication split into transfer and waiting), else the step table's.
COST_PARTS = (
    ("compute_us", "Compute", COMPUTE),
    ("exposed_transfer_us", "Exposed transfer", TRANSFER),
    ("exposed_wait_us", "Exposed waiting", WAITING),
    ("exposed_unsplit_us", "Exposed communication", TRANSFER),
    ("idle_us", "Idle", IDLE),
)
TABLE_PARTS = (
    ("computing_us", "Compute", COMPUTE),
    ("comm_not_overlapped_us", "Exposed communication", TRANSFER),
    ("free_us", "Idle", IDLE),
)
SPLIT_SCHEMA = {"rank": pl.Int64, "part": pl.Utf8, "order": pl.Int64, "dur_us": pl.Float64, "file": pl.Utf8}
COMM_SCHEMA = {
    "rank": pl.Int64,
    "name": pl.Utf8,
    "group": pl.Utf8,
    "start_us": pl.Float64,
    "dur_us": pl.Float64,
    "file": pl.Utf8,
    "loc": pl.Utf8,
    "at": pl.Utf8,
}


@dataclass
class _Timeline:
    """The laid-out content of the timeline of one step, before it is drawn."""

    step: Any
    why: str  # why this step: "the step of C1", "the slowest step", "step 3"
    cause: Cause | None
    t0: float  # the common clock's µs at x = 0
    clock: str  # what x = 0 is
    ranks: list[int]  # ranks with lanes, in lane order
    tags: dict[int, list[str]]  # why an aggregated rank has lanes (C1, slowest step, …)
    total: int  # ranks in the step
    split: pl.DataFrame  # the lanes' ranks: rank, part, dur_us, start_ms, dur_ms, evidence, owner
    every: pl.DataFrame  # every rank's collectives of the step, aligned: group, seq, first_us, last_us, wait_us, …
    cited: pl.DataFrame  # (file, loc) of the rows the cause cites
    blocks: pl.DataFrame = field(default_factory=pl.DataFrame)  # the collectives drawn on the lanes, in ms
    windows: list[tuple[float, float]] = field(default_factory=list)  # ms
    dropped: int = 0  # blocks not drawn (LANE_BLOCKS)

    @property
    def aggregated(self) -> bool:
        return self.total > len(self.ranks)

    @property
    def hot(self) -> list[int]:
        return [r for r in (self.cause.ranks if self.cause else ()) if r in self.ranks]


def _split_rows(report: Report, step: Any) -> pl.DataFrame:
    """Per rank of ``step``: its compute, exposed communication and idle time (µs) in lane order, each with the
    row that holds it (a step_trace_time.csv line, or the trace events that bound the step)."""
    df, parts = _table(report, "step_cost"), COST_PARTS
    if df.is_empty() or "rank" not in df.columns:
        df, parts = step_table(report)[1], TABLE_PARTS
    cols = [c for c, _, _ in parts if c in df.columns]
    if df.is_empty() or "rank" not in df.columns or not cols:
        return pl.DataFrame(schema={**SPLIT_SCHEMA, "loc": pl.Utf8, "at": pl.Utf8})
    if "step" in df.columns:
        df = df.filter(pl.col("step").eq_missing(step))
    line = next((c for c in ("line", "src_line") if c in df.columns), None)
    first, last = (pl.col(c) if c in df.columns else pl.lit(None) for c in ("first_event", "last_event"))
    at_line = pl.col(line) if line else pl.lit(None)
    df = df.with_columns(
        pl.col("file").cast(pl.Utf8).fill_null("") if "file" in df.columns else pl.lit("").alias("file"),
        pl.coalesce(at_line, first).cast(pl.Utf8).alias("loc"),
        pl.when(at_line.is_not_null())
        .then(pl.format(":{}", at_line))
        .when(first.is_not_null())
        .then(pl.format(" events {}–{}", first, last))
        .otherwise(pl.lit(""))
        .alias("at"),
    )
    order = pl.DataFrame(
        [(c, name, i) for i, (c, name, _) in enumerate(parts)], schema=["col", "part", "order"], orient="row"
    )
    df = df.with_columns(_num("rank", pl.Int64), *[_num(c, pl.Float64) for c in cols]).filter(
        pl.col("rank").is_not_null()
    )
    long = df.select("rank", "file", "loc", "at", *cols).unpivot(
        index=["rank", "file", "loc", "at"], on=cols, variable_name="col", value_name="dur_us"
    )
    long = long.join(order, on="col").filter(pl.col("dur_us") > 0)
    return long.select("rank", "part", pl.col("order").cast(pl.Int64), "dur_us", "file", "loc", "at").sort(
        "rank", "order"
    )


def _step_windows(report: Report, step: Any) -> pl.DataFrame:
    """Each rank's start and end of ``step`` on the trace's clock, where a trace gives them."""
    ts = _table(report, "trace_steps")
    if ts.is_empty() or not {"rank", "step", "start_us", "end_us"} <= set(ts.columns):
        return pl.DataFrame(schema={"rank": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64})
    if "scope" in ts.columns:
        ts = ts.filter(pl.col("scope") == "step")
    ts = ts.filter(pl.col("step").eq_missing(step) & pl.col("start_us").is_not_null())
    return ts.unique("rank", keep="first", maintain_order=True).select(
        _num("rank", pl.Int64), _num("start_us", pl.Float64), _num("end_us", pl.Float64)
    )


def _ops_rows(c: pl.DataFrame, step: Any) -> pl.DataFrame:
    """communication.json ops (Ascend): start and elapsed time per op, cited by JSON pointer."""
    if "step" in c.columns:
        c = c.filter(pl.col("step").eq_missing(step))
    name = [pl.col(n).cast(pl.Utf8) for n in ("op_name", "op") if n in c.columns]
    return c.select(
        _num("rank", pl.Int64),
        pl.coalesce([*name, pl.lit("")]).alias("name"),
        (pl.col("group_hash").cast(pl.Utf8) if "group_hash" in c.columns else pl.lit("")).fill_null("").alias("group"),
        _num("start_us", pl.Float64),
        (_num("elapse_ms", pl.Float64) * 1000.0).alias("dur_us"),
        pl.col("file").cast(pl.Utf8) if "file" in c.columns else pl.lit("").alias("file"),
        (pl.col("pointer").cast(pl.Utf8) if "pointer" in c.columns else pl.lit(None, pl.Utf8)).alias("loc"),
        pl.format(" {}", pl.col("pointer")).alias("at") if "pointer" in c.columns else pl.lit("").alias("at"),
    )


def _trace_rows(t: pl.DataFrame, step: Any, windows: pl.DataFrame) -> pl.DataFrame:
    """Collective events of a trace: the device kernels where the trace has them (a host op spans its launch,
    not the transfer), else the annotations; cited by event index."""
    if "source" in t.columns:
        for src in (SOURCE_KERNEL, SOURCE_ANNOTATION):
            if (t.get_column("source") == src).any():
                t = t.filter(pl.col("source") == src)
                break
    if "step" in t.columns:
        t = t.filter(pl.col("step").eq_missing(step))
    elif not windows.is_empty():
        t = t.join(windows, on="rank").filter(pl.col("ts_us").is_between(pl.col("start_us"), pl.col("end_us")))
    else:
        return pl.DataFrame(schema=COMM_SCHEMA)
    group = [pl.col(g).cast(pl.Utf8) for g in ("pg_name", "group") if g in t.columns]
    idx = pl.col("event_idx").cast(pl.Utf8) if "event_idx" in t.columns else pl.lit(None, pl.Utf8)
    return t.select(
        _num("rank", pl.Int64),
        pl.col("name").cast(pl.Utf8).fill_null("") if "name" in t.columns else pl.lit("").alias("name"),
        pl.coalesce([*group, pl.lit("")]).alias("group"),
        _num("ts_us", pl.Float64).alias("start_us"),
        _num("dur_us", pl.Float64),
        pl.col("file").cast(pl.Utf8) if "file" in t.columns else pl.lit("").alias("file"),
        idx.alias("loc"),
        pl.format(" event {}", idx).fill_null("").alias("at"),
    )


def _comm_rows(report: Report, step: Any, windows: pl.DataFrame) -> pl.DataFrame:
    """Every rank's collectives of ``step`` on the common clock, aligned across ranks: the k-th op of a group in
    the step (``seq``) is the same collective on every rank (as the straggler analysis aligns them) when its name
    agrees. ``wait_us``: from the rank's arrival to the last rank's — the time it waits for the others."""
    c, t = _table(report, "communication"), _table(report, "trace_communication")
    if not c.is_empty() and {"rank", "start_us", "elapse_ms"} <= set(c.columns):
        rows = _ops_rows(c, step)
    elif not t.is_empty() and {"rank", "ts_us", "dur_us"} <= set(t.columns):
        rows = _trace_rows(t, step, windows)
    else:
        rows = pl.DataFrame(schema=COMM_SCHEMA)
    rows = rows.filter(pl.all_horizontal(pl.col("rank", "start_us", "dur_us").is_not_null()) & (pl.col("dur_us") >= 0))
    rows = rows.with_columns(
        pl.col("start_us").rank("ordinal").over("rank", "group").sub(1).cast(pl.Int64).alias("seq")
    )
    by_start = pl.col("rank").sort_by("start_us")
    keys = (
        rows.group_by("group", "seq")
        .agg(
            pl.len().alias("n"),
            pl.col("name").n_unique().alias("names"),
            pl.col("start_us").min().alias("first_us"),
            pl.col("start_us").max().alias("last_us"),
            by_start.first().alias("first_rank"),
            by_start.last().alias("last_rank"),
        )
        .filter((pl.col("n") > 1) & (pl.col("names") == 1))
        .drop("n", "names")
    )
    rows = rows.join(keys, on=["group", "seq"], how="left")
    wait = (pl.col("last_us") - pl.col("start_us")).clip(0.0, None)
    return rows.with_columns(
        pl.min_horizontal(wait, pl.col("dur_us")).fill_null(0.0).alias("wait_us"),
        pl.col("first_us").is_not_null().alias("aligned"),
    )


def _step_choices(report: Report, step: Any) -> list[tuple[Any, str]]:
    """The steps to draw, best first: the one asked for; else the first cause's step, then the slowest step (the
    cause's step may be one the step tables lack)."""
    if step is not None:
        return [(step, f"step {step}")]
    out = []
    cause = report.causes[0] if report.causes else None
    if cause is not None and cause.steps:
        out.append((cause.steps[0], f"the step of {cause.id}"))
    df = _split_source(report)
    cols = [c for c in ("step_us", *(c for c, _, _ in (*COST_PARTS, *TABLE_PARTS))) if c in df.columns]
    if "step" in df.columns and cols:
        slowest = df.filter(pl.col("step").is_not_null()).sort(cols[0], descending=True, nulls_last=True)
        if slowest.height:
            out.append((slowest.get_column("step")[0], "the slowest step"))
    return [*out, (None, "the only step")]


def _split_source(report: Report) -> pl.DataFrame:
    df = _table(report, "step_cost")
    return df if not df.is_empty() and "rank" in df.columns else step_table(report)[1]


def _lane_ranks(
    ranks: list[int], totals: pl.DataFrame, cause: Cause | None, max_ranks: int
) -> tuple[list[int], dict[int, list[str]]]:
    """Every rank up to ``max_ranks``; beyond, the cause's ranks (at most CAUSE_LANES), the rank it compares them
    with, and the ranks with the shortest, median and longest step — each tagged with why it is shown."""
    tags: dict[int, list[str]] = {}
    hot = [r for r in (cause.ranks if cause else ()) if r in ranks]
    for r in hot:
        tags.setdefault(r, []).append(cause.id)  # type: ignore[union-attr]
    if len(ranks) <= max_ranks:
        return ranks, tags
    chosen = hot[:CAUSE_LANES]
    typical = cause.metrics.get("typical_rank") if cause else None
    if isinstance(typical, int) and typical in ranks:
        chosen.append(typical)
        tags.setdefault(typical, []).append("typical")
    order = totals.sort("total", "rank").get_column("rank").to_list()
    if order:
        for r, why in (
            (order[0], "shortest step"),
            (order[len(order) // 2], "median step"),
            (order[-1], "longest step"),
        ):
            chosen.append(r)
            tags.setdefault(r, []).append(why)
    return sorted(dict.fromkeys(chosen)), tags


def _first_with_rows(report: Report, step: Any) -> tuple[Any, str, pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """(step, why, split rows, step windows, collectives) of the first step choice the report has rows for."""
    for choice, why in _step_choices(report, step):
        split = _split_rows(report, choice)
        windows = _step_windows(report, choice)
        blocks = _comm_rows(report, choice, windows)
        if not (split.is_empty() and blocks.is_empty()):
            return choice, why, split, windows, blocks
    if step is not None:
        raise ValueError(f"step {step} has no step or communication rows in this report")
    return None


def _timeline_data(report: Report, step: Any, max_ranks: int) -> _Timeline | None:
    cause = report.causes[0] if report.causes else None
    found = _first_with_rows(report, step)
    if found is None:
        return None
    step, why, split, windows, blocks = found
    all_ranks = sorted(set(split.get_column("rank").to_list()) | set(blocks.get_column("rank").to_list()))
    totals = split.group_by("rank").agg(pl.col("dur_us").sum().alias("total"))
    ranks, tags = _lane_ranks(all_ranks, totals, cause, max_ranks)
    starts = [s for s in (windows.get_column("start_us").min(), blocks.get_column("start_us").min()) if s is not None]
    t0 = float(starts[0]) if starts else 0.0
    which = f"step {step}" if step is not None else "the capture"
    clock = (
        f"ms from the start of {which} on its earliest rank"
        if not windows.is_empty()
        else f"ms from the first collective of {which} (the data has no step start)"
        if not blocks.is_empty()
        else f"ms into {which}"
    )
    owners = _citers([*report.causes, *report.findings])
    cited = pl.DataFrame(
        sorted(_citers([cause]) if cause else []), schema={"file": pl.Utf8, "loc": pl.Utf8}, orient="row"
    )
    split = _place_split(split.filter(pl.col("rank").is_in(ranks)), windows, t0, owners)
    tl = _Timeline(step, why, cause, t0, clock, ranks, tags, len(all_ranks), split, blocks, cited)
    tl.windows = _cause_windows(tl)
    tl.blocks, tl.dropped = _lane_blocks(tl, owners)
    return tl


def _owner_col(df: pl.DataFrame, owners: dict[tuple[str, str], str]) -> pl.DataFrame:
    """``owner``: the cause or finding citing each row's (file, loc), '' when none does."""
    keys = df.select("file", "loc").unique().drop_nulls()
    found = [(f, loc, owners[(f, loc)]) for f, loc in keys.iter_rows() if (f, loc) in owners]
    table = pl.DataFrame(found, schema={"file": pl.Utf8, "loc": pl.Utf8, "owner": pl.Utf8}, orient="row")
    return df.join(table, on=["file", "loc"], how="left").with_columns(pl.col("owner").fill_null(""))


def _place_split(split: pl.DataFrame, windows: pl.DataFrame, t0: float, owners: dict) -> pl.DataFrame:
    """Each rank's split laid end to end from its step start (or from x = 0 where no trace gives it)."""
    split = split.join(windows.select("rank", "start_us"), on="rank", how="left")
    origin = ((pl.col("start_us") - t0) / 1000.0).fill_null(0.0)
    split = split.with_columns(
        (origin + pl.col("dur_us").cum_sum().over("rank", order_by="order") / 1000.0 - pl.col("dur_us") / 1000.0).alias(
            "start_ms"
        ),
        (pl.col("dur_us") / 1000.0).alias("dur_ms"),
    )
    split = _owner_col(split, owners)
    return split.with_columns(pl.concat_str(_esc_col(split, "file"), pl.col("at")).alias("evidence"))


def _cause_windows(tl: _Timeline) -> list[tuple[float, float]]:
    """The time the cause's cited collectives cost: from the first rank's arrival to the last rank's at each one
    the cause cites a row of (the others wait there), or the cited op itself when it has no peer in the data."""
    if tl.cited.is_empty() or tl.every.is_empty():
        return []
    hit = tl.every.join(tl.cited, on=["file", "loc"])
    x0 = pl.when(pl.col("aligned") & (pl.col("last_us") > pl.col("first_us"))).then("first_us").otherwise("start_us")
    x1 = (
        pl.when(pl.col("aligned") & (pl.col("last_us") > pl.col("first_us")))
        .then("last_us")
        .otherwise(pl.col("start_us") + pl.col("dur_us"))
    )
    spans = hit.select(((x0 - tl.t0) / 1000.0).alias("x0"), ((x1 - tl.t0) / 1000.0).alias("x1")).sort("x0")
    # overlapping windows (two p2p pairs of one stage, say) are one window
    fresh = pl.col("x0") > pl.col("x1").cum_max().shift(1).fill_null(float("-inf"))
    spans = spans.with_columns(fresh.cum_sum().alias("w")).group_by("w").agg(pl.col("x0").min(), pl.col("x1").max())
    spans = spans.sort(pl.col("x1") - pl.col("x0"), descending=True).head(TIMELINE_WINDOWS).sort("x0")
    return [(round(a, 6), round(b, 6)) for a, b in spans.select("x0", "x1").iter_rows()]


def _lane_blocks(tl: _Timeline, owners: dict) -> tuple[pl.DataFrame, int]:
    """The collectives drawn on the lanes (the LANE_BLOCKS longest per rank), in ms, with their hover text."""
    b = tl.every.filter(pl.col("rank").is_in(tl.ranks))
    kept = b.sort("dur_us", descending=True).filter(pl.int_range(pl.len()).over("rank") < LANE_BLOCKS)
    kept = _owner_col(kept, owners).with_columns(
        ((pl.col("start_us") - tl.t0) / 1000.0).alias("start_ms"),
        (pl.col("dur_us") / 1000.0).alias("dur_ms"),
        (pl.col("wait_us") / 1000.0).alias("wait_ms"),
    )
    kept = kept.join(
        tl.cited.with_columns(pl.lit(True).alias("by_cause")), on=["file", "loc"], how="left"
    ).with_columns(pl.col("by_cause").fill_null(False))
    kept = kept.with_columns(
        _esc_col(kept, "name").alias("label"),
        pl.concat_str(_esc_col(kept, "file"), _esc_col(kept, "at")).alias("evidence"),
    )
    return kept.sort("rank", "start_us"), b.height - kept.height


# ------------------------------------------------------------------------------------------ timeline: drawing


def _lanes(tl: _Timeline) -> tuple[list[str], dict[int, tuple[str, str]]]:
    """Lane names (y categories, top to bottom) and per rank its (split lane, collectives lane)."""
    has_comm = not tl.every.is_empty()
    per_rank = {}
    lanes = [f"all {tl.total} ranks · arrivals"] if tl.aggregated and has_comm else []
    for r in tl.ranks:
        tag = " · ".join(tl.tags.get(r, [])) if tl.aggregated or r in tl.hot else ""
        split = f"rank {r}" + (f" · {tag}" if tag else "")
        per_rank[r] = (split, f"rank {r} · comm" if has_comm else split)
        lanes += [split, f"rank {r} · comm"] if has_comm else [split]
    return lanes, per_rank


def _bars(name: str, color: str, df: pl.DataFrame, y: pl.Expr, base: str, x: str, custom: list[pl.Expr], hover: str):
    if df.is_empty():
        return None
    cols = df.select(y.alias("y"), pl.col(base), pl.col(x), pl.concat_list(custom).alias("cd"))
    return go.Bar(
        name=name,
        orientation="h",
        y=cols.get_column("y").to_list(),
        base=cols.get_column(base).to_list(),
        x=cols.get_column(x).to_list(),
        customdata=cols.get_column("cd").to_list(),
        width=0.62,
        marker={"color": color, "line": {"width": 0}},
        hovertemplate=hover,
    )


def _click(owner: pl.Expr) -> pl.Expr:
    return pl.when(owner != "").then(pl.format("click: {}", owner)).otherwise(pl.lit(""))


def _split_traces(tl: _Timeline, lane_of: dict[int, tuple[str, str]]) -> list:
    """One bar trace per part of the split: compute, exposed communication, idle."""
    y = pl.col("rank").replace_strict({r: v[0] for r, v in lane_of.items()}, return_dtype=pl.Utf8)
    hover = (
        "%{y}<br><b>%{customdata[0]}</b>: %{x:,.3f} ms in the step (a total; the report does not place it in time)"
        "<br>%{customdata[1]}<br>%{customdata[2]}<extra></extra>"
    )
    out = []
    colors = {name: color for _, name, color in (*COST_PARTS, *TABLE_PARTS)}
    for (part,), df in tl.split.group_by("part", maintain_order=True):
        custom = [pl.col("part"), pl.col("evidence"), _click(pl.col("owner")), pl.col("owner")]
        out.append(_bars(str(part), colors[str(part)], df, y, "start_ms", "dur_ms", custom, hover))
    return [t for t in out if t is not None]


def _comm_traces(tl: _Timeline, lane_of: dict[int, tuple[str, str]]) -> list:
    """Each collective as a block on its rank's comm lane: the part before the last rank arrives drawn as waiting,
    the rest as the collective."""
    b = tl.blocks
    if b.is_empty():
        return []
    y = pl.col("rank").replace_strict({r: v[1] for r, v in lane_of.items()}, return_dtype=pl.Utf8)
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

    waiting = b.filter(pl.col("wait_ms") > 0)
    rest = b.with_columns(
        (pl.col("start_ms") + pl.col("wait_ms")).alias("rest_ms"),
        (pl.col("dur_ms") - pl.col("wait_ms")).alias("len_ms"),
    ).filter(pl.col("len_ms") > 0)
    return [
        t
        for t in (
            _bars(
                "Collective: waiting for the last rank",
                WAITING,
                waiting,
                y,
                "start_ms",
                "wait_ms",
                custom(note_wait),
                hover,
            ),
            _bars("Collective", TRANSFER, rest, y, "rest_ms", "len_ms", custom(note_rest), hover),
        )
        if t is not None
    ]


def _arrival_traces(tl: _Timeline, lane: str) -> list:
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
    return [_bars("Arrival spread over all ranks", WAITING, keys, y, "start_ms", "spread_ms", custom, hover)]


def _link_traces(tl: _Timeline, lane_of: dict[int, tuple[str, str]]) -> list:
    """A line joining one collective's arrivals across the lanes (the cause's collectives in its colour)."""
    b = tl.blocks.filter(pl.col("aligned"))
    if b.is_empty():
        return []
    order = {r: i for i, r in enumerate(tl.ranks)}
    b = b.with_columns(
        pl.col("rank").replace_strict(order, return_dtype=pl.Int64).alias("lane"),
        pl.col("rank").replace_strict({r: v[1] for r, v in lane_of.items()}, return_dtype=pl.Utf8).alias("y"),
        pl.col("by_cause").any().over("group", "seq").alias("hot"),
        (pl.col("last_us") - pl.col("first_us")).alias("spread"),
    )
    keys = b.group_by("group", "seq").agg(pl.len().alias("n"), pl.col("spread").first(), pl.col("hot").first())
    keys = keys.filter(pl.col("n") > 1).sort("hot", "spread", descending=True).head(TIMELINE_LINKS)
    pts = b.join(keys.select("group", "seq"), on=["group", "seq"]).select(
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


def _lane_style(lanes: list[str], lane_of: dict[int, tuple[str, str]], hot: list[int]) -> list[str]:
    """Tick labels: the cause's lanes bold in its colour (lane names are profan's own text, no trace text)."""
    marked = {lane for r in hot for lane in lane_of[r]}
    return [f'<span style="color:{HIGHLIGHT}"><b>{lane}</b></span>' if lane in marked else lane for lane in lanes]


def _marks(tl: _Timeline, lanes: list[str], lane_of: dict[int, tuple[str, str]]) -> tuple[list, list]:
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


def _x_range(tl: _Timeline) -> list[float]:
    """From the earliest block to the latest end, with a little room: markers would otherwise pad the axis."""
    spans = [tl.split.select("start_ms", (pl.col("start_ms") + pl.col("dur_ms")).alias("end_ms"))]
    every = tl.every.select(((pl.col("start_us") - tl.t0) / 1000.0).alias("start_ms"))
    spans.append(every.with_columns((pl.col("start_ms") + tl.every.get_column("dur_us") / 1000.0).alias("end_ms")))
    both = pl.concat(spans)
    lo = min(0.0, both.get_column("start_ms").min() or 0.0)
    hi = both.get_column("end_ms").max() or 1.0
    pad = (hi - lo) * 0.01
    return [lo - pad, hi + pad]


def _note(tl: _Timeline) -> str:
    """What the picture shows, for the page (the figure's ``meta``)."""
    parts = [f"Step {tl.step} ({tl.why})" if tl.step is not None else "The whole capture (it has no step markers)"]
    if tl.aggregated:
        parts.append(f"{len(tl.ranks)} of {tl.total} ranks have lanes (tagged with why); the top lane spans all")
    if tl.cause is not None:
        hot = ", ".join(str(r) for r in tl.hot) or "none in the data"
        parts.append(f"{tl.cause.id}'s ranks ({hot}) are shaded")
        if tl.windows:
            parts.append(f"dotted windows: where ranks wait at the collectives {tl.cause.id} cites")
    if tl.dropped:
        parts.append(f"{tl.dropped:,} shorter collectives are not drawn (at most {LANE_BLOCKS} per lane)")
    return "; ".join(parts)


def _timeline_meta(tl: _Timeline, lanes: list[str]) -> dict[str, Any]:
    return {
        "step": tl.step,
        "why": tl.why,
        "cause": tl.cause.id if tl.cause else None,
        "cause_ranks": tl.hot,
        "ranks": tl.ranks,
        "total_ranks": tl.total,
        "lanes": lanes,
        "windows": [list(w) for w in tl.windows],
        "clock": tl.clock,
        "note": _note(tl),
    }


def timeline(report: Report, step: Any = None, *, max_ranks: int = TIMELINE_RANKS) -> go.Figure | None:
    """One step on the common clock, one pair of lanes per rank: the step's compute, exposed communication and
    idle time (totals, laid end to end from the rank's step start: the report keeps them per step, not per
    kernel), and the rank's collectives where they happened — the part before the last rank arrives drawn as
    waiting, a line joining each collective across ranks. The first cause's ranks are shaded and the collectives
    it cites outlined as windows; every block leads (hover, click on the page) to its source row and to the
    cause or finding citing it.

    ``step``: the step to draw (default: the first cause's step, else the slowest). Beyond ``max_ranks`` ranks,
    the lanes are the cause's ranks, its comparison rank and the ranks with the shortest, median and longest
    step, under one lane of every rank's arrivals. ``layout.meta`` says what was chosen."""
    tl = _timeline_data(report, step, max_ranks)
    if tl is None:
        return None
    lanes, lane_of = _lanes(tl)
    traces = [
        *_split_traces(tl, lane_of),
        *_comm_traces(tl, lane_of),
        *(_arrival_traces(tl, lanes[0]) if tl.aggregated else []),
        *_link_traces(tl, lane_of),
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
        meta=_timeline_meta(tl, lanes),
    )
    return _figure(traces, layout)


# The figures the HTML report draws, by the key its page uses.
FIGURES: dict[str, Callable[[Report], go.Figure | None]] = {
    "timeline": timeline,
    "breakdown": breakdown,
    "rank_comparison": rank_comparison,
    "boundness": boundness,
    "comm_bandwidth": bandwidth,
    "compare_buckets": compare_buckets,
}
