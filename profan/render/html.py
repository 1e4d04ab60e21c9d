"""HTML renderer: one self-contained file (Plotly inlined, no network request) with charts and evidence drill-down.

Profiling happens on air-gapped clusters, so the page carries everything it needs: the Plotly library, the CSS,
the script and the data. A Content-Security-Policy forbids every fetch, so a regression cannot quietly reach out.

Every string taken from the traces (kernel names, shapes, paths, args) goes through Jinja2 autoescaping; the chart
data is embedded as JSON with ``<``, ``>`` and ``&`` escaped, and labels handed to Plotly (which understands a few
HTML tags) are HTML-escaped first so a kernel called ``<b>x</b>`` is drawn as exactly that text. Control
characters (a CR or an ESC sequence in a kernel name) are shown as visible escapes (``textfmt.visible``), in the
page text as in the chart labels.

The renderer formats and lays out the Report; it computes nothing. The one thing it reads from disk is the cited
source rows, to show them (see ``evidence_rows``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import polars as pl
from markupsafe import Markup

from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import Report
from profan.render.evidence_rows import EvidenceTable, read_evidence
from profan.render.textfmt import (
    FILTERS,
    PIPE_COLUMNS,
    column_kind,
    column_label,
    fmt_cell,
    fmt_ms,
    fmt_pct,
    id_list,
    locators,
    visible,
)
from profan.render.verdict import cause_view, findings_by_cause, span_text, verdict
from profan.rulepack.paths import templates_dir
from profan.trust import report_root

ROW_BUDGET = 1000  # evidence rows (and their table headers) embedded in the page, all findings together
ITEM_CAPS = (20, 10, 5, 3, 2, 1)  # rows shown per evidence item: the largest cap that fits the budget
CELL_CHARS = 240  # longer cells are cut (the full text is in the cell's tooltip up to TITLE_CHARS)
TITLE_CHARS = 600
TABLE_ROWS = 300  # rows of a summary table shown in the page; the JSON/Excel reports have them all
HEATMAP_ROWS = 40
MEMBER_ROWS = 200  # rows of a group finding's member table in the page; the JSON report has every member

TABLE_INFO: dict[str, tuple[str, str]] = {
    "breakdown": (
        "Device time by bucket",
        "Summed kernel durations per rank, step and bucket. Overlapping "
        "kernels are summed, so shares are of summed kernel time, not of the "
        "step.",
    ),
    "breakdown_all_steps": (
        "Device time by bucket, all steps",
        "Ranks with many steps: each bucket over all steps, with the lowest and highest share it takes of one step.",
    ),
    "steps": ("Step time per rank", "One row per rank and step, from step_trace_time.csv."),
    "trace_steps": ("Step time from the trace", "Per rank and step, from the device events of the trace."),
    "top_kernels": (
        "Top kernels per bucket",
        "The kernels that carry each bucket, with the source rows behind "
        "them (kernel_details.csv lines or trace event indexes).",
    ),
    "boundness": (
        "Boundness of the hot kernels",
        "Duration-weighted pipe utilisation ratios (PipeUtilization "
        "columns of kernel_details.csv): the dominant pipe says what bounds "
        "the kernel.",
    ),
    "communication": ("Communication", "Per-operation times from communication.json."),
    "comm_bandwidth": (
        "Link bandwidth",
        "Bandwidth per transfer and transport (size / transit time), against "
        "the link's prior from rules/hardware where one applies.",
    ),
    "comm_links": ("Links between ranks", "Per source/destination pair, from communication_matrix.json."),
    "comm_exposed": (
        "Exposed communication",
        "Communication not overlapped with compute per rank and step, split into transfer and waiting.",
    ),
    "trace_communication": ("Communication (trace)", "Collective and point-to-point kernels of the traces."),
    "straggler_ranks": ("Stragglers", "Per rank and step: how late the rank arrives at aligned collectives."),
    "collective_arrivals": ("Collective arrivals", "Each aligned collective: who arrived last, and how late."),
    "compare_steps": ("Steps: A vs B", "Step totals on both sides and their difference (B minus A)."),
    "compare_buckets": ("Buckets: A vs B", "Summed kernel time per bucket on both sides, with the rows behind them."),
    "compare_kernels": ("Kernels: A vs B", "Kernels matched by name and shape; delta is B minus A."),
}
SECTION_ORDER = ("breakdown", "steps", "trace_steps", "top_kernels", "boundness", "communication")
STEP_TABLES = ("steps", "trace_steps")  # the first with computing/communication/free columns feeds the rank chart

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
STEP_PARTS = (
    ("computing_us", "Computing", "#3b6fb6"),
    ("comm_not_overlapped_us", "Communication (not overlapped)", "#d9534f"),
    ("free_us", "Free (device idle)", "#c4c9cf"),
)
HIGHLIGHT = "#7a0019"

# metrics keys through which a finding names the rank(s) that hold the others back
_SLOW_RANK_KEYS = ("straggler_ranks", "slow_ranks", "late_ranks", "straggler_rank", "slow_rank", "late_rank")


def render_html(report: Report, out: Path | None = None) -> str | None:
    text = build_html(report)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        return None
    return text


def build_html(report: Report, *, row_budget: int = ROW_BUDGET) -> str:
    """The page as text, the verdict first. `row_budget` bounds the evidence rows embedded (a 64-rank job cites
    thousands); the causes' rows are embedded first."""
    root = data_root(report)
    owners = [*report.causes, *report.findings]
    caps = item_caps(owners, row_budget)
    tables = read_evidence(root, owners, caps)
    highlights = highlighted_ranks(report.findings)
    is_compare = report.source.get("kind") == "compare"
    ctx = {
        "title": (
            f"profan compare — {report.source.get('mode', '')}"
            if is_compare
            else f"profan report — {Path(str(report.source.get('root', ''))).name}"
        ),
        "sides": [
            (side, side_view(report.source[side]))
            for side in ("a", "b")
            if is_compare and isinstance(report.source.get(side), dict)
        ],
        "source": report.source,
        "ranks": [rank_view(r) for r in report.source.get("ranks", [])],
        "steps": steps_seen(report),
        "warnings": report.warnings,
        "notes": report.notes,
        "meta": report.meta,
        "counts": {s: sum(f.severity == s for f in report.findings) for s in SEVERITIES},
        **findings_context(report, tables),
        "highlights": highlights,
        "sections": table_sections(report),
        "rank_table": step_table(report)[0],
        "charts": chart_specs(report, highlights),
        "row_budget": row_budget,
        "embedded_rows": sum(t.shown for ts in tables.values() for t in ts),
        "css": Markup(_asset("report.css")),
        "js": Markup(_asset("report.js")),
        "plotly_js": Markup(plotly_js()),
    }
    return environment().get_template("report.html.j2").render(**ctx)


def findings_context(report: Report, tables: dict[str, list[EvidenceTable]]) -> dict[str, Any]:
    """The verdict (causes with their evidence tables) and the findings: those a cause explains under it, the
    rest by severity."""
    grouped, unexplained = findings_by_cause(report)
    titles = {c.id: c.title for c in report.causes}
    groups = [(s, [finding_view(f, tables[f.id], titles) for f in unexplained if f.severity == s]) for s in SEVERITIES]
    view = verdict(report)
    view["causes"] = [html_cause_view(c, tables[c.id]) for c in report.causes]
    return {
        "verdict": view,
        "cause_groups": [(cause_view(c), [finding_view(f, tables[f.id], titles) for f in fs]) for c, fs in grouped],
        "groups": groups,
        "unexplained_count": len(unexplained),
        "sev_anchors": {s for s, items in groups if items},
    }


def html_cause_view(c: Cause, tables: list[EvidenceTable]) -> dict[str, Any]:
    """A cause of the verdict callout, with its cited rows read back and a short gain for its summary line."""
    share = c.impact_share
    short = (
        "no estimate"
        if c.impact_us is None
        else f"{fmt_ms(c.impact_us)} ms per step" + (f" · {fmt_pct(share)}" if share is not None else "")
    )
    return {**cause_view(c), "gain_short": short, "evidence": [evidence_view(t, c.id) for t in tables]}


def _shown(value: Any) -> Any:
    """Every value the template prints, before autoescaping: control characters as visible escapes."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,
        finalize=_shown,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    return env


def plotly_js() -> str:
    """The bundled plotly.min.js of the installed plotly package, safe to inline in a <script> element."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")


def _asset(name: str) -> str:
    text = (templates_dir() / name).read_text(encoding="utf-8")
    return text.replace("</", "<\\/") if name.endswith(".js") else text


def data_root(report: Report) -> Path | None:
    """Where the report's cited rows are read back from (None: nowhere it may read; each row then says so)."""
    try:
        return report_root(report)
    except ProfanInputError:
        return None


# ------------------------------------------------------------------------------------------ evidence


def item_caps(owners: Sequence[Cause | Finding], budget: int) -> dict[tuple[str, int], int]:
    """Rows shown per evidence item of the causes and findings: the same cap for every item, the largest that
    keeps the page within budget (each table's header row counts as a row: a kernel_details.csv header is as wide
    as a row); if even one row each is too many, the first items (the causes, then the most severe findings) keep
    one row and the rest show their locators only."""
    items = [(f.id, i, len(ev.locators)) for f in owners for i, ev in enumerate(f.evidence, start=1)]
    for cap in ITEM_CAPS:
        if sum(min(n, cap) + 1 for _, _, n in items if n) <= budget:
            return {(fid, i): min(n, cap) for fid, i, n in items}
    out, left = {}, budget
    for fid, i, n in items:
        out[(fid, i)] = 1 if left >= 2 and n else 0
        left -= 2 * out[(fid, i)]
    return out


def _cut(text: str, limit: int = CELL_CHARS) -> dict[str, str]:
    if len(text) <= limit:
        return {"t": text, "title": ""}
    return {"t": text[: limit - 1] + "…", "title": text[:TITLE_CHARS]}


def evidence_view(t: EvidenceTable, finding_id: str) -> dict[str, Any]:
    ev = t.evidence
    rows = []
    for r in t.rows:
        d = r.as_dict()
        rows.append({"loc": r.locator, "cells": [_cut(d.get(c, "")) for c in t.columns]})
    more = ev.row_count - t.shown
    return {
        "id": f"{finding_id}-e{t.index}",
        "file": ev.file,
        "kind": ev.kind,
        "summary": locators(ev.to_dict()),
        "row_count": ev.row_count,
        "cited": t.cited,
        "shown": t.shown,
        "truncated": more > 0,
        "select": json.dumps(ev.select, ensure_ascii=False, default=str),
        "vals": [(k, fmt_value(v)) for k, v in ev.values.items()],
        "ev_note": ev.note,
        "columns": t.columns,
        "rows": rows,
        "error": t.error,
        "hl": [c in ev.values or c in ev.select for c in t.columns],  # the columns the claim sums or filters on
    }


def fmt_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ", ".join(fmt_value(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {fmt_value(x)}" for k, x in v.items())
    return str(v)


def finding_view(f: Finding, tables: list[EvidenceTable], cause_titles: dict[str, str] | None = None) -> dict[str, Any]:
    members = [
        {
            "id": m.id,
            "rank": m.rank,
            "step": m.step,
            "severity": m.severity,
            "title": m.title,
            "evidence": locators(m.evidence[0].to_dict(), limit=3),
            "more": len(m.evidence) - 1,
        }
        for m in f.members[:MEMBER_ROWS]
    ]
    return {
        "id": f.id,
        "check": f.check,
        "severity": f.severity,
        "title": f.title,
        "message": f.message,
        "rank": f.rank,
        "step": f.step,
        "span": span_text(f.ranks, f.steps),
        "explained_by": f.explained_by,
        "cause_title": (cause_titles or {}).get(f.explained_by or "", ""),
        "metrics": [(k, fmt_value(v)) for k, v in f.metrics.items()],
        "evidence": [evidence_view(t, f.id) for t in tables],
        "rows_total": sum(ev.row_count for ev in f.evidence),
        "members": members,
        "members_total": len(f.members),
    }


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


# ------------------------------------------------------------------------------------------ summary


def rank_view(r: dict[str, Any]) -> dict[str, Any]:
    info = r.get("info") or {}
    return {
        "rank": r.get("rank"),
        "path": r.get("path", ""),
        "origin": r.get("rank_origin", ""),
        "files": sorted((r.get("files") or {}).items()),
        "rows_read": ", ".join(f"{k} {fmt_value(v)}" for k, v in (r.get("rows_read") or {}).items()) or "—",
        "skipped": ", ".join(f"{k} {fmt_value(v)}" for k, v in (r.get("rows_skipped") or {}).items() if v) or "none",
        "info": ", ".join(f"{k} {v}" for k, v in info.items() if v not in (None, "")),
    }


def side_view(side: dict[str, Any]) -> dict[str, str]:
    """One side of a comparison: where it was read, which ranks and steps."""
    return {
        "path": str(side.get("path", "")),
        "ranks": ", ".join(str(r) for r in side.get("ranks") or []) or "—",
        "steps": id_list(side.get("steps") or []) or "—",
    }


def steps_seen(report: Report) -> list[Any]:
    for name in ("steps", "breakdown"):
        df = report.tables.get(name)
        if df is not None and "step" in df.columns:
            return [s for s in df.get_column("step").unique(maintain_order=True).to_list() if s is not None]
    return []


# ------------------------------------------------------------------------------------------ tables


def table_view(name: str, df: pl.DataFrame, max_rows: int = TABLE_ROWS) -> dict[str, Any]:
    cols = []
    for c, dt in df.schema.items():
        kind = column_kind(c, str(dt))
        num = kind not in ("text", "file", "list")
        code = kind in ("file", "list") or c in ("op", "name", "op_name", "kernel")
        cols.append(
            {
                "name": c,
                "label": column_label(c, kind, ms_for_us=True),
                "kind": kind,
                "num": num,
                "cls": "num" if num else "code" if code else "",
            }
        )
    rows = []
    for rec in df.head(max_rows).iter_rows():
        cells = []
        for col, v in zip(cols, rec, strict=True):
            cell = _cut(fmt_cell(v, col["kind"]), 120)
            text = cell["t"]  # long prose or shape lists wrap; identifiers and pointers stay on one line
            cell["wrap"] = col["kind"] != "file" and len(text) > 60 and any(ch in text for ch in " ;,")
            cells.append(cell)
        rows.append(cells)
    title, intro = TABLE_INFO.get(name, (name.replace("_", " ").capitalize(), ""))
    return {
        "name": name,
        "title": title,
        "intro": intro,
        "columns": cols,
        "rows": rows,
        "total": df.height,
        "shown": min(df.height, max_rows),
    }


def table_sections(report: Report) -> list[dict[str, Any]]:
    """A section per report table, known ones first; tables added later get a generic section."""
    names = [n for n in SECTION_ORDER if n in report.tables]
    names += [n for n in report.tables if n not in names]
    out = []
    for n in names:
        df = report.tables[n]
        if df is None or df.is_empty():
            continue
        sec = {"name": n, **table_view(n, df), "groups": []}
        if n == "top_kernels" and "bucket" in df.columns:
            sec["groups"] = [
                (str(b), table_view(n, part.drop("bucket")))
                for (b,), part in df.group_by("bucket", maintain_order=True)
            ]
        out.append(sec)
    return out


# ------------------------------------------------------------------------------------------ charts


def _esc(s: Any) -> str:
    """Text for Plotly labels: Plotly reads a few HTML tags in strings, so untrusted text is entity-escaped."""
    return html.escape(visible(str(s)), quote=False)


def _label(rank: Any, step: Any, many_steps: bool, many_ranks: bool = False) -> str:
    if many_steps:
        return f"r{rank} · s{step}" if step is not None else f"r{rank} · no step"
    return f"r{rank}" if many_ranks else f"rank {rank}"


def _many_steps(df: pl.DataFrame) -> bool:
    """Label bars with their step when a rank has more than one (kernels outside any step count as one)."""
    return "step" in df.columns and df.get_column("step").n_unique() > 1


def _many_ranks(df: pl.DataFrame) -> bool:
    return "rank" in df.columns and df.get_column("rank").n_unique() > 16


def _ms(us: Any) -> float | None:
    return None if us is None else us / 1000.0


def bucket_color(bucket: str, i: int) -> str:
    return BUCKET_COLORS.get(bucket.lower(), PALETTE[i % len(PALETTE)])


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


def breakdown_chart(df: pl.DataFrame, links: dict[tuple, str] | None = None) -> dict[str, Any] | None:
    """Stacked bars per rank (and step); `links` maps (rank, step) to the finding whose evidence holds the rows."""
    if df.is_empty() or not {"rank", "bucket", "time_us"} <= set(df.columns):
        return None
    links = links or {}
    many = _many_steps(df)
    many_ranks = _many_ranks(df)
    xs: list[str] = []
    traces: dict[str, dict[str, Any]] = {}
    for rec in df.iter_rows(named=True):
        x = _label(rec["rank"], rec.get("step"), many, many_ranks)
        if x not in xs:
            xs.append(x)
        b = str(rec["bucket"])
        t = traces.setdefault(
            b,
            {
                "type": "bar",
                "name": _esc(b),
                "x": [],
                "y": [],
                "customdata": [],
                "marker": {"color": bucket_color(b, len(traces))},
                "hovertemplate": "%{x}<br>" + _esc(b) + ": %{y:,.2f} ms"
                "<br>share %{customdata[0]}<br>%{customdata[1]} kernels"
                "<br>%{customdata[2]}"
                "<extra></extra>",
            },
        )
        t["x"].append(x)
        t["y"].append(_ms(rec["time_us"]))
        fid = links.get((rec["rank"], rec.get("step")), "")
        t["customdata"].append(
            [fmt_cell(rec.get("share"), "pct"), rec.get("kernels", ""), f"click: rows in {fid}" if fid else "", fid]
        )
    layout = _layout("summed kernel time (ms)")
    layout["xaxis"]["categoryorder"] = "array"
    layout["xaxis"]["categoryarray"] = xs
    return {"id": "chart-breakdown", "data": list(traces.values()), "layout": layout}


def rank_chart(
    df: pl.DataFrame, highlights: dict[int, list[dict[str, str]]], cites: dict[tuple[str, int], str] | None = None
) -> dict[str, Any] | None:
    """Computing / communication / free per rank; `cites` maps (file, line) to the first finding citing it."""
    cites = cites or {}
    parts = [p for p in STEP_PARTS if p[0] in df.columns]
    if df.is_empty() or "rank" not in df.columns or not parts:
        return None
    many = _many_steps(df)
    recs = list(df.iter_rows(named=True))
    many_ranks = _many_ranks(df)
    xs = [_label(r["rank"], r.get("step"), many, many_ranks) for r in recs]
    hot = [r["rank"] in highlights for r in recs]
    src = []
    for r in recs:
        fid = cites.get((r.get("file"), r.get("src_line")), "")
        src.append([_esc(f"{r.get('file', '')}:{r.get('src_line', '')}"), f"click: {fid}" if fid else "", fid])
    data = []
    for col, name, color in parts:
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": xs,
                "y": [_ms(r[col]) for r in recs],
                "customdata": src,
                "marker": {
                    "color": color,
                    "line": {
                        "color": [HIGHLIGHT if h else "rgba(0,0,0,0)" for h in hot],
                        "width": [2.5 if h else 0 for h in hot],
                    },
                },
                "hovertemplate": "%{x}<br>" + name + ": %{y:,.2f} ms<br>%{customdata[0]}<br>%{customdata[1]}"
                "<extra></extra>",
            }
        )
    annotations = []
    for r, x in zip(recs, xs, strict=True):
        fs = highlights.get(r["rank"])
        if not fs:
            continue
        top = _ms(r.get("step_us")) if r.get("step_us") is not None else sum(_ms(r[c]) or 0 for c, _, _ in parts)
        annotations.append(
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
    layout = _layout("time in step (ms)", annotations=annotations)
    return {"id": "chart-ranks", "data": data, "layout": layout}


def boundness_chart(df: pl.DataFrame) -> dict[str, Any] | None:
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
    z = [[r.get(p) for p in pipes] for r in recs]
    data = [
        {
            "type": "heatmap",
            "x": list(pipes),
            "y": labels,
            "z": z,
            "zmin": 0,
            "zmax": 1,
            "colorscale": [[0, "#f4f7fb"], [0.5, "#7fa7d6"], [1, "#173f7a"]],
            "customdata": [[h] * len(pipes) for h in hover],
            "hovertemplate": "%{y}<br>%{customdata}<br>%{x}: %{z:.0%}<extra></extra>",
            "texttemplate": "%{z:.0%}",
            "textfont": {"size": 11},
            "colorbar": {"title": {"text": "ratio"}, "tickformat": ".0%"},
        }
    ]
    layout = _layout(
        "",
        height=max(260, 26 * len(recs) + 90),
        barmode=None,
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        xaxis={"side": "top", "type": "category"},
        margin={"l": 16, "r": 16, "t": 40, "b": 16},
    )
    return {
        "id": "chart-boundness",
        "data": data,
        "layout": layout,
        "note": f"heatmap of the first {len(recs)} of {df.height} rows; the table has them all"
        if df.height > len(recs)
        else "",
    }


def bandwidth_chart(df: pl.DataFrame) -> dict[str, Any] | None:
    """Measured bandwidth per transfer against its size, one colour per transport, with the prior (the link's
    expected bandwidth from rules/hardware) as a dashed line where one applies."""
    if df.is_empty() or not {"bandwidth_gbps", "size_mb", "transport"} <= set(df.columns):
        return None
    rows = df.filter(pl.col("bandwidth_gbps").is_not_null() & (pl.col("size_mb") > 0))
    if "is_link" in rows.columns:
        rows = rows.filter(pl.col("is_link").fill_null(True))
    if rows.is_empty():
        return None
    data, shapes, annotations = [], [], []
    for i, ((transport,), part) in enumerate(rows.group_by("transport", maintain_order=True)):
        color = PALETTE[i % len(PALETTE)]
        recs = list(part.iter_rows(named=True))
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": _esc(transport),
                "x": [r["size_mb"] for r in recs],
                "y": [r["bandwidth_gbps"] for r in recs],
                "marker": {"color": color, "size": 8, "opacity": 0.8, "line": {"width": 0.5, "color": "#fff"}},
                "customdata": [
                    _esc(f"rank {r.get('rank', '?')} · {r.get('op_name') or r.get('op') or ''}") for r in recs
                ],
                "hovertemplate": "%{customdata}<br>"
                + _esc(transport)
                + ": %{y:,.1f} GB/s for %{x:,.2f} MB<extra></extra>",
            }
        )
        priors = [r["prior_gbps"] for r in recs if r.get("prior_gbps") is not None]
        if priors:
            shapes.append(
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "y0": priors[0],
                    "y1": priors[0],
                    "line": {"color": color, "dash": "dash", "width": 1.5},
                }
            )
            annotations.append(
                {
                    "xref": "paper",
                    "x": 1,
                    "xanchor": "right",
                    "y": priors[0],
                    "yanchor": "bottom",
                    "text": _esc(f"{transport} prior {priors[0]:,.0f} GB/s"),
                    "showarrow": False,
                    "font": {"color": color, "size": 11},
                }
            )
    layout = _layout(
        "bandwidth (GB/s)",
        barmode=None,
        shapes=shapes,
        annotations=annotations,
        showlegend=True,
        xaxis={"type": "log", "title": {"text": "transfer size (MB)"}, "gridcolor": "#eceff3"},
    )
    return {
        "id": "chart-comm_bandwidth",
        "data": data,
        "layout": layout,
        "note": "" if shapes else "no bandwidth prior applies to these links (see the notes above)",
    }


def compare_chart(df: pl.DataFrame) -> dict[str, Any] | None:
    """`profan compare`: summed time per bucket on side A and side B, side by side."""
    if df.is_empty() or not {"bucket", "a_time_us", "b_time_us"} <= set(df.columns):
        return None
    recs = list(df.iter_rows(named=True))
    xs = [_esc(r["bucket"]) for r in recs]
    data = [
        {
            "type": "bar",
            "name": name,
            "x": xs,
            "y": [_ms(r[col]) for r in recs],
            "marker": {"color": color},
            "hovertemplate": "%{x}<br>" + name + ": %{y:,.2f} ms<extra></extra>",
        }
        for col, name, color in (("a_time_us", "A", "#9aa5b1"), ("b_time_us", "B", "#3b6fb6"))
    ]
    return {"id": "chart-compare_buckets", "data": data, "layout": _layout("summed kernel time (ms)", barmode="group")}


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


def chart_specs(report: Report, highlights: dict[int, list[dict[str, str]]]) -> dict[str, dict[str, Any]]:
    out = {}
    # a group finding stands for its members: a bar of a member's rank and step leads to the group
    breakdown_links = {
        (m.rank, m.step): f.id
        for f in reversed(report.findings)
        if f.check == "step-breakdown"
        for m in (f.members or (f,))
    }
    cites = {
        (ev.file, line): f.id
        for f in reversed(report.findings)
        for m in (*f.members, f)
        for ev in m.evidence
        for line in ev.lines
    }
    for key, spec in (
        ("breakdown", breakdown_chart(report.tables.get("breakdown", pl.DataFrame()), breakdown_links)),
        ("rank_comparison", rank_chart(step_table(report)[1], highlights, cites)),
        ("boundness", boundness_chart(report.tables.get("boundness", pl.DataFrame()))),
        ("comm_bandwidth", bandwidth_chart(report.tables.get("comm_bandwidth", pl.DataFrame()))),
        ("compare_buckets", compare_chart(report.tables.get("compare_buckets", pl.DataFrame()))),
    ):
        if spec is not None:
            out[key] = spec
    return out
