"""HTML renderer: one self-contained file (Plotly inlined, no network request) with charts and evidence drill-down.

Profiling happens on air-gapped clusters, so the page carries everything it needs: the Plotly library, the CSS,
the script and the data. A Content-Security-Policy forbids every fetch, so a regression cannot quietly reach out.

Every string taken from the traces (kernel names, shapes, paths, args) goes through Jinja2 autoescaping; the chart
data is embedded as JSON with ``<``, ``>`` and ``&`` escaped. The charts are the figures of `profan.figures` (the
ones a notebook gets), whose labels are HTML-escaped before Plotly (which understands a few HTML tags) sees them,
so a kernel called ``<b>x</b>`` is drawn as exactly that text. Control characters (a CR or an ESC sequence in a
kernel name) are shown as visible escapes (``textfmt.visible``), in the page text as in the chart labels.

The renderer formats and lays out the Report; it computes nothing. The one thing it reads from disk is the cited
source rows, to show them (see ``evidence_rows``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import polars as pl
from markupsafe import Markup

from profan import figures
from profan.figures import highlighted_ranks, step_table
from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.findings import SEVERITIES, Finding
from profan.model.report import Report
from profan.render.evidence_rows import EvidenceTable, read_evidence
from profan.render.textfmt import (
    FILTERS,
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
    "step_blocks": (
        "Step time in time",
        "Per rank and step, the compute, exposed communication and idle blocks the timeline draws (at most 31 per "
        "step: a block merging short stretches keeps the exact time of each part it holds).",
    ),
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
    "memory_peaks": (
        "Memory peaks",
        "Per rank: peak allocated and reserved memory (MB), when it happens and what was live then "
        "(memory_record.csv / operator_memory.csv lines, or the trace's memory events).",
    ),
    "memory_holders": ("Memory held at the peak", "Per rank: the ops whose allocations are live at the peak."),
    "memory_curve": ("Memory over time", "The curve the memory chart draws: each rank's peaks kept exactly."),
    "memory_modules": ("Device memory per CANN module", "Most memory each module reserved (npu_module_mem.csv)."),
}
SECTION_ORDER = ("breakdown", "steps", "trace_steps", "top_kernels", "boundness", "communication")


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
        "charts": chart_specs(report),
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

# The page's charts: the figures of `profan.figures` (the same a notebook gets), by key, with the element each is
# drawn in.
CHART_ELEMENTS = {
    "timeline": "chart-timeline",
    "breakdown": "chart-breakdown",
    "rank_comparison": "chart-ranks",
    "boundness": "chart-boundness",
    "comm_bandwidth": "chart-comm_bandwidth",
    "compare_buckets": "chart-compare_buckets",
    "memory_peaks": "chart-memory",
}


def chart_specs(report: Report) -> dict[str, dict[str, Any]]:
    """Each figure the report has, as the page's script draws it: its data and layout, the element it goes in
    and the note under it (the figure's ``layout.meta``)."""
    out = {}
    for key, make in figures.FIGURES.items():
        fig = make(report)
        if fig is None:
            continue
        d = fig.to_plotly_json()
        meta = d["layout"].get("meta") or {}
        out[key] = {"id": CHART_ELEMENTS[key], "data": d["data"], "layout": d["layout"], "note": meta.get("note", "")}
    return out
