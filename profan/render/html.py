"""HTML renderer: one self-contained file (Plotly inlined, no network request) with charts and evidence drill-down.

Profiling happens on air-gapped clusters, so the page carries everything it needs: the Plotly library (packed:
gzip and base64, unpacked by the page's script once it has loaded), the CSS, the script and the data. A
Content-Security-Policy forbids every fetch, so a regression cannot quietly reach out.

A job of many ranks is shown as its verdict needs (`SCALE_RANKS`): per-rank charts become heatmaps (one column per
rank), and per-rank tables list the rows of the ranks the verdict names under a summary across all ranks, each
saying where every row is (the JSON report, the workbook, ``--tables DIR``). So a 1,000-rank page stays a few MB
and opens as fast as a 4-rank one.

Every string taken from the traces (kernel names, shapes, paths, args) goes through Jinja2 autoescaping; the chart
data is embedded as JSON with ``<``, ``>`` and ``&`` escaped. The charts are the figures of `profan.figures` (the
ones a notebook gets), whose labels are HTML-escaped before Plotly (which understands a few HTML tags) sees them,
so a kernel called ``<b>x</b>`` is drawn as exactly that text. Control characters (a CR or an ESC sequence in a
kernel name) are shown as visible escapes (``textfmt.visible``), in the page text as in the chart labels.

The renderer formats and lays out the Report; it computes nothing. The one thing it reads from disk is the cited
source rows, to show them (see ``evidence_rows``).
"""

from __future__ import annotations

import base64
import functools
import gzip
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
from profan.model.rl_ledger import ledger_grid
from profan.model.textfmt import (
    FILTERS,
    column_kind,
    column_label,
    drill_target,
    fmt_cell,
    fmt_pct,
    fmt_ranks,
    id_list,
    locators,
    ms,
    source_mark,
    visible,
)
from profan.render.evidence_rows import EvidenceTable, read_evidence
from profan.render.json_report import CLASSES, ROW_LIMIT, by_class, kept_members, named_ranks
from profan.render.table_text import text_table
from profan.render.verdict import (
    cause_view,
    compare_verdict,
    drill_ids,
    findings_by_cause,
    share_of,
    span_text,
    verdict,
)
from profan.rulepack.paths import templates_dir
from profan.trust import report_root

ROW_BUDGET = 1000  # evidence rows (and their table headers) embedded in the page, all findings together
ITEM_CAPS = (20, 10, 5, 3, 2, 1)  # rows shown per evidence item: the largest cap that fits the budget
CELL_CHARS = 240  # longer cells are cut (the full text is in the cell's tooltip up to TITLE_CHARS)
TITLE_CHARS = 600
TABLE_ROWS = 300  # rows of a summary table shown in the page; the JSON/Excel reports have them all
SCALE_TABLE_ROWS = 100  # at scale (SCALE_RANKS), rows of a table listed, and of a summary across ranks
MEMBER_ROWS = 200  # rows of a group finding's member table in the page; the JSON report has every member
# A job of more ranks than this is shown as the Markdown report shows it: each per-rank table as the rows of the
# ranks the verdict names (and the first rank, for comparison) under a summary across all ranks, each group
# finding's worst members and those of the named ranks. Listed in full, 64 ranks made a page of 144,000 elements
# and 1,000 ranks one of 14 MB; the rest is in the JSON report, the workbook and `--tables DIR`.
SCALE_RANKS = 8
SCALE_MEMBERS = 20  # members listed per group finding at scale, besides those of the named ranks
SCALE_ITEMS = 6  # evidence items shown per cause or finding at scale, besides those read from a named rank's files
SCALE_ROW_BUDGET = 400  # evidence rows embedded at scale (a cluster's kernel rows are 40-odd cells wide)
SCALE_READ = 24  # ranks listed in "What was read" at scale, besides the named ranks (those with skipped rows first)
# identifier columns a summary across ranks leaves out: they number things, they do not measure them
ID_COLUMNS = {"rank", "step", "steps", "device_id", "src_rank", "dst_rank", "src_local", "dst_local", "size_bin"}

RL_GRID = "rl_step_ledger"  # the RL ledger as phases in columns (`model.rl_ledger.ledger_grid`): no report table
TABLE_INFO: dict[str, tuple[str, str]] = {
    RL_GRID: (
        "RL step ledger",
        "Per step, each phase's time in the traces and by the framework's own timer, then per role and rank its "
        "busy and idle time in each phase: one pool idles while the other works. Rows per phase: tables rl_phases "
        "and rl_ledger.",
    ),
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
    "serving_phases": (
        "Model iterations per phase",
        "Serving capture: per rank and phase (prefill, decode, mixed), the iterations, their period (p50 / p90 / max), "
        "device busy and idle time inside them (between_kernels_us: between the iteration's own kernels), the host's "
        "gaps after them and the device's idle before the next (device_gap_us), tokens per iteration and time per "
        "token where the token input was read, the slowest.",
    ),
    "serving_phase_buckets": (
        "Device time per phase and bucket",
        "Serving capture: per rank and phase, the device time of its iterations in each bucket (attention, FFN, "
        "MoE, communication, …; summed kernel time), its share of the phase and its time per iteration.",
    ),
    "serving_iterations": (
        "Model iterations",
        "Serving capture: one row per rank and iteration, citing the event that marked it (event_idx) and the one "
        "that decided its phase (phase_event).",
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
    "compare_causes": (
        "Causes: A vs B",
        "Each side's causes (as profan analyze finds them) matched by check and ranks: gains and bounds side by side.",
    ),
    "compare_steps": ("Steps: A vs B", "Step totals on both sides and their difference (B minus A)."),
    "compare_buckets": ("Buckets: A vs B", "Summed kernel time per bucket on both sides, with the rows behind them."),
    "compare_phases": (
        "Serving phases: A vs B",
        "Per phase (prefill, mixed, decode), both sides' iterations, period p50 / p90 / mean, busy share and time per "
        "token, pooled over each side's ranks, with their slowest iterations' events; delta is B minus A.",
    ),
    "compare_phase_buckets": (
        "Phase buckets: A vs B",
        "Per phase and bucket, device time per iteration on both sides.",
    ),
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
SECTION_ORDER = (
    "serving_phases",
    "serving_phase_buckets",
    "breakdown",
    "steps",
    "trace_steps",
    "top_kernels",
    "boundness",
    "communication",
)


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
    scale = scale_view(report)
    shown = shown_items(report, owners, scale)
    caps = item_caps(owners, row_budget if scale is None else min(row_budget, SCALE_ROW_BUDGET), shown)
    tables = read_evidence(root, owners, caps)
    if shown is not None:
        tables = {fid: [t for t in value if t.index in shown[fid]] for fid, value in tables.items()}
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
        "compare_verdict": compare_verdict(report),
        "source": report.source,
        "ranks": [rank_view(r) for r in report.source.get("ranks", [])],
        "read": read_view(report, scale),
        "scale": scale,
        "steps": steps_seen(report),
        "warnings": report.warnings,
        "notes": report.notes,
        "meta": report.meta,
        "counts": {s: sum(finding.severity == s for finding in report.findings) for s in SEVERITIES},
        **findings_context(report, tables, scale),
        "highlights": highlights,
        "sections": table_sections(report, scale),
        "rank_table": step_table(report)[0],
        "charts": chart_specs(report),
        "row_budget": row_budget,
        "embedded_rows": sum(t.shown for value in tables.values() for t in value),
        "css": Markup(_asset("report.css")),
        "js": Markup(_asset("report.js")),
        "plotly_packed": plotly_packed(),
        "drill": drill_target(report.source),
        "drill_ids": drill_ids(report),
        "mark": Markup(source_mark(report.source)),
    }
    return environment().get_template("report.html.j2").render(**ctx)


def findings_context(
    report: Report, tables: dict[str, list[EvidenceTable]], scale: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The verdict (causes with their evidence tables) and the findings: those a cause explains under it, the
    rest by severity."""
    grouped, unexplained = findings_by_cause(report)
    titles = {cause.id: cause.title for cause in report.causes}
    keep = set(scale["keep"]) if scale else None

    def view_of(finding: Finding) -> dict[str, Any]:
        return finding_view(finding, tables[finding.id], titles, keep)

    groups = [(s, [view_of(finding) for finding in unexplained if finding.severity == s]) for s in SEVERITIES]
    view = verdict(report)
    per = share_of(view["step"])
    view["causes"] = [html_cause_view(cause, tables[cause.id], per) for cause in report.causes]
    return {
        "verdict": view,
        "cause_groups": [(cause_view(cause, per), [view_of(finding) for finding in fs]) for cause, fs in grouped],
        "groups": groups,
        "unexplained_count": len(unexplained),
        "sev_anchors": {s for s, items in groups if items},
    }


def html_cause_view(cause: Cause, tables: list[EvidenceTable], per: str) -> dict[str, Any]:
    """A cause of the verdict callout, with its cited rows read back and a short gain for its summary line.
    ``per``: what its share is of (`share_of`)."""
    share = cause.impact_share
    short = (
        "no estimate"
        if cause.impact_us is None
        else f"{ms(cause.impact_us)} per step" + (f" · {fmt_pct(share)}" if share is not None else "")
    )
    return {
        **cause_view(cause, per),
        "gain_short": short,
        "evidence": [evidence_view(table, cause.id) for table in tables],
        "sources": len(cause.evidence),
        "sources_note": sources_note(cause, tables),
    }


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


@functools.cache
def plotly_packed() -> str:
    """plotly.min.js gzipped and base64-encoded, for the page to unpack (report.js) and run after it has loaded.
    Inlined as text, the 4.6 MB library was most of the file and most of the time the browser took to read it;
    packed it is a third of the size and one text node the parser skips over. Made once per process (mtime 0:
    the same bytes every time)."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")


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


def item_caps(
    owners: Sequence[Cause | Finding], budget: int, shown: dict[str, set[int]] | None = None
) -> dict[tuple[str, int], int]:
    """Rows shown per evidence item of the causes and findings: the same cap for every item, the largest that
    keeps the page within budget (each table's header row counts as a row: a kernel_details.csv header is as wide
    as a row); if even one row each is too many, the first items (the causes, then the most severe findings) keep
    one row and the rest show their locators only. Items ``shown`` leaves out (at scale) get no rows."""
    every = [
        (owner.id, index, len(evidence.locators))
        for owner in owners
        for index, evidence in enumerate(owner.evidence, start=1)
    ]
    items = [(fid, index, n) for fid, index, n in every if shown is None or index in shown[fid]]
    out = {(fid, index): 0 for fid, index, _ in every}
    for cap in ITEM_CAPS:
        if sum(min(n, cap) + 1 for _, _, n in items if n) <= budget:
            return out | {(fid, index): min(n, cap) for fid, index, n in items}
    left = budget
    for fid, index, n in items:
        out[(fid, index)] = 1 if left >= 2 and n else 0
        left -= 2 * out[(fid, index)]
    return out


def shown_items(
    report: Report, owners: Sequence[Cause | Finding], scale: dict[str, Any] | None
) -> dict[str, set[int]] | None:
    """At scale, the evidence items each cause and finding shows: its first SCALE_ITEMS and those read from the
    files of the ranks the page keeps (a finding measured on every rank cites one item per rank); None: all."""
    if scale is None:
        return None
    keep = set(scale["keep"])
    folders = tuple(
        str(r.get("path", "")).rstrip("/") + "/"
        for r in report.source.get("ranks") or []
        if r.get("rank") in keep and r.get("path")
    )
    return {
        owner.id: {
            index
            for index, evidence in enumerate(owner.evidence, start=1)
            if index <= SCALE_ITEMS or (folders and str(evidence.file).startswith(folders))
        }
        for owner in owners
    }


def sources_note(owner: Cause | Finding, tables: list[EvidenceTable]) -> str:
    """The evidence items not shown at scale: how many, from which files, and how to print them."""
    left = len(owner.evidence) - len(tables)
    if left <= 0:
        return ""
    shown = {table.index for table in tables}
    files: dict[str, int] = {}
    for index, evidence in enumerate(owner.evidence, start=1):
        if index not in shown:
            name = Path(str(evidence.file)).name
            files[name] = files.get(name, 0) + 1
    which = ", ".join(f"{name} ×{n:,}" for name, n in sorted(files.items(), key=lambda kv: -kv[1])[:4])
    return (
        f"{left:,} more source{'s' if left > 1 else ''} ({which}, one per rank or file) not shown; "
        f"profan evidence on this page's data and {owner.id} (the command below) prints every cited row."
    )


def _cut(text: str, limit: int = CELL_CHARS) -> dict[str, str]:
    if len(text) <= limit:
        return {"t": text, "title": ""}
    return {"t": text[: limit - 1] + "…", "title": text[:TITLE_CHARS]}


def evidence_view(t: EvidenceTable, finding_id: str) -> dict[str, Any]:
    evidence = t.evidence
    rows = []
    for row in t.rows:
        d = row.as_dict()
        rows.append({"loc": row.locator, "cells": [_cut(d.get(column, "")) for column in t.columns]})
    more = evidence.row_count - t.shown
    return {
        "id": f"{finding_id}-e{t.index}",
        "file": evidence.file,
        "kind": evidence.kind,
        "summary": locators(evidence.to_dict()),
        "row_count": evidence.row_count,
        "cited": t.cited,
        "shown": t.shown,
        "truncated": more > 0,
        "select": json.dumps(evidence.select, ensure_ascii=False, default=str),
        "vals": [(key, fmt_value(value)) for key, value in evidence.values.items()],
        "ev_note": evidence.note,
        "columns": t.columns,
        "rows": rows,
        "error": t.error,
        "hl": [
            column in evidence.values or column in evidence.select for column in t.columns
        ],  # the columns the claim sums or filters on
    }


def fmt_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ", ".join(fmt_value(value) for value in v)
    if isinstance(v, dict):
        return ", ".join(f"{key}: {fmt_value(value)}" for key, value in v.items())
    return str(v)


def shown_members(finding: Finding, keep: set[int] | None) -> list[Finding]:
    """The members of a group listed on the page: the first MEMBER_ROWS; at scale (``keep``: the ranks the
    verdict names) the first SCALE_MEMBERS — they come worst first — and those of the named ranks."""
    if keep is None:
        return list(finding.members[:MEMBER_ROWS])
    return list(kept_members(finding, SCALE_MEMBERS, keep))


def finding_view(
    finding: Finding,
    tables: list[EvidenceTable],
    cause_titles: dict[str, str] | None = None,
    keep: set[int] | None = None,
) -> dict[str, Any]:
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
        for m in shown_members(finding, keep)
    ]
    return {
        "id": finding.id,
        "check": finding.check,
        "severity": finding.severity,
        "title": finding.title,
        "message": finding.message,
        "rank": finding.rank,
        "step": finding.step,
        "span": span_text(finding.ranks, finding.steps),
        "explained_by": finding.explained_by,
        "cause_title": (cause_titles or {}).get(finding.explained_by or "", ""),
        "metrics": [(key, fmt_value(value)) for key, value in finding.metrics.items()],
        "evidence": [evidence_view(table, finding.id) for table in tables],
        "sources": len(finding.evidence),
        "sources_note": sources_note(finding, tables),
        "rows_total": sum(evidence.row_count for evidence in finding.evidence),
        "members": members,
        "members_total": len(finding.members),
        "members_note": members_note(finding, len(members), keep),
    }


def members_note(finding: Finding, shown: int, keep: set[int] | None) -> str:
    """Which members the page lists, and where the rest are."""
    total = len(finding.members)
    if shown >= total:
        return ""
    which = f"the first {shown}"
    if keep is not None:
        which = f"the {SCALE_MEMBERS} worst and those of rank{'s' if len(keep) > 1 else ''} {fmt_ranks(keep)}"
    where = f"all are in the JSON report (members of {finding.id})"
    if keep is not None:
        where = (
            f"the JSON report has them, a group of thousands cut to its worst members and those of the named ranks "
            f"(meta.members_cut); profan evidence DATA_DIR {finding.id}.N reads any member back from the data"
        )
    return f"Showing {shown:,} of {total:,} members: {which}; {where}."


# ------------------------------------------------------------------------------------------ summary


def rank_view(r: dict[str, Any]) -> dict[str, Any]:
    info = r.get("info") or {}
    return {
        "rank": r.get("rank"),
        "path": r.get("path", ""),
        "origin": r.get("rank_origin", ""),
        "files": sorted((r.get("files") or {}).items()),
        "rows_read": ", ".join(f"{key} {fmt_value(value)}" for key, value in (r.get("rows_read") or {}).items()) or "—",
        "skipped": ", ".join(
            f"{key} {fmt_value(value)}" for key, value in (r.get("rows_skipped") or {}).items() if value
        )
        or "none",
        "info": ", ".join(f"{key} {value}" for key, value in info.items() if value not in (None, "")),
    }


def scale_view(report: Report) -> dict[str, Any] | None:
    """None for a job of SCALE_RANKS ranks or fewer (the page lists everything); else the ranks whose rows the
    page lists (``keep``: those the verdict names, the ranks the causes compare them with, and the first rank)
    and how many ranks there are."""
    ranks = sorted(r["rank"] for r in report.source.get("ranks") or [] if isinstance(r.get("rank"), int))
    if len(ranks) <= SCALE_RANKS or report.source.get("kind") == "compare":
        return None
    typical = [cause.metrics.get("typical_rank") for cause in report.causes]
    keep = sorted({*named_ranks(report), ranks[0], *(r for r in typical if isinstance(r, int) and r in ranks)})
    return {"keep": keep, "keep_text": fmt_ranks(keep), "ranks": len(ranks)}


def read_view(report: Report, scale: dict[str, Any] | None) -> dict[str, Any]:
    """The rows of "What was read": every rank, or at scale the named ranks and up to SCALE_READ others (those
    with skipped rows first), with a line counting the ranks that hold each file."""
    ranks = report.source.get("ranks") or []
    if scale is None:
        return {"rows": [rank_view(rank) for rank in ranks], "note": ""}
    keep = set(scale["keep"])
    skipped = [
        rank for rank in ranks if rank.get("rank") not in keep and any((rank.get("rows_skipped") or {}).values())
    ]
    rest = [rank for rank in ranks if rank.get("rank") not in keep and rank not in skipped]
    listed = {id(rank) for rank in [*skipped, *rest][:SCALE_READ]}
    rows = [rank_view(rank) for rank in ranks if rank.get("rank") in keep or id(rank) in listed]
    files: dict[str, int] = {}
    for rank in ranks:
        for name in rank.get("files") or {}:
            files[name] = files.get(name, 0) + 1
    held = ", ".join(f"{name} {n:,}" for name, n in sorted(files.items()))
    note = (
        f"{len(rows)} of {len(ranks):,} ranks listed: rank{'s' if len(keep) > 1 else ''} {scale['keep_text']} "
        "(the ranks the verdict names, those it compares them with, and the first rank)"
        f"{' and ranks with skipped rows' if skipped else ''}, then the "
        f"first others. Ranks holding each file: {held}. The JSON report lists every rank (source.ranks)."
    )
    return {"rows": rows, "note": note}


def side_view(side: dict[str, Any]) -> dict[str, str]:
    """One side of a comparison: where it was read, which ranks and steps."""
    return {
        "path": str(side.get("path", "")),
        "ranks": ", ".join(str(r) for r in side.get("ranks") or []) or "—",
        "steps": id_list(side.get("steps") or []) or "—",
    }


def steps_seen(report: Report) -> list[Any]:
    for name in ("steps", "breakdown"):
        frame = report.tables.get(name)
        if frame is not None and "step" in frame.columns:
            return [s for s in frame.get_column("step").unique(maintain_order=True).to_list() if s is not None]
    return []


# ------------------------------------------------------------------------------------------ tables


def table_view(
    name: str, frame: pl.DataFrame, max_rows: int = TABLE_ROWS, whole: pl.DataFrame | None = None
) -> dict[str, Any]:
    """A table as the page lists it: its first ``max_rows`` rows, formatted as the Markdown report formats them
    (`table_text`, timestamps from the ``whole`` table's t0), with a note on where the rest is (``whole``: the
    report table ``frame`` is a part of)."""
    rows_in_report = 0 if whole is None else whole.height
    text = text_table(frame, max_rows, origin_of=whole)
    cols = []
    for column in text.columns:
        num = column.kind not in ("text", "file", "list")
        code = column.kind in ("file", "list") or column.name in ("op", "name", "op_name", "kernel")
        cols.append(
            {
                "name": column.name,
                "label": column.label,
                "kind": column.kind,
                "num": num,
                "cls": "num" if num else "code" if code else "",
            }
        )
    rows = []
    for rec in text.rows:
        cells = []
        for col, value in zip(cols, rec, strict=True):
            cell = _cut(value, 120)
            shown = cell["t"]  # long prose or shape lists wrap; identifiers and pointers stay on one line
            cell["wrap"] = col["kind"] != "file" and len(shown) > 60 and any(ch in shown for ch in " ;,")
            cells.append(cell)
        rows.append(cells)
    title, intro = TABLE_INFO.get(name, (name.replace("_", " ").capitalize(), ""))
    return {
        "name": name,
        "title": title,
        "intro": intro,
        "columns": cols,
        "rows": rows,
        "total": frame.height,
        "shown": min(frame.height, max_rows),
        "origin_note": text.note,
        "full_rows": (
            "all rows are in the JSON and Excel reports"
            if max(frame.height, rows_in_report) <= ROW_LIMIT
            else "all rows are in the Excel report and --tables DIR"
        ),
    }


def table_sections(report: Report, scale: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A section per report table, known ones first; tables added later get a generic section."""
    names = [table for table in SECTION_ORDER if table in report.tables]
    names += [table for table in report.tables if table not in names]
    grid = ledger_grid(report.tables)
    ledger = [] if grid is None else [section_view(RL_GRID, grid, None)]  # an RL job's ledger leads its tables
    return ledger + [
        section_view(table, frame, scale)
        for table in names
        if (frame := report.tables[table]) is not None and not frame.is_empty()
    ]


def section_view(name: str, frame: pl.DataFrame, scale: dict[str, Any] | None) -> dict[str, Any]:
    """One table's section: its rows (the first TABLE_ROWS), the top kernels per bucket. At scale a per-rank
    table lists the rows of the ranks ``scale`` keeps, under a summary across all ranks (``cut``), and every
    table its first SCALE_TABLE_ROWS rows."""
    rows = TABLE_ROWS if scale is None else SCALE_TABLE_ROWS
    full = frame
    cut = scale is not None and "rank" in frame.columns and frame.get_column("rank").n_unique() > SCALE_RANKS
    if cut:
        frame = frame.filter(pl.col("rank").is_in(scale["keep"]))  # type: ignore[index]
    sec = {"name": name, **table_view(name, frame, rows, full), "groups": [], "cut": None}
    if cut:
        sec["cut"] = cut_view(name, full, frame, scale)  # type: ignore[arg-type]
    if name == "top_kernels" and "bucket" in frame.columns:
        sec["groups"] = [
            (str(b), table_view(name, part.drop("bucket"), rows, full))
            for (b,), part in frame.group_by("bucket", maintain_order=True)
        ]
    return sec


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


# ------------------------------------------------------------------------------------------ tables at scale


def cut_view(name: str, full: pl.DataFrame, shown: pl.DataFrame, scale: dict[str, Any]) -> dict[str, Any]:
    """What a per-rank table at scale shows, where the rest is, and its summary across all ranks: per class of
    row (the same kernel, op or link on every rank) where the JSON report defines classes, else per column."""
    ranks = full.get_column("rank").n_unique()
    json_has = (
        "the JSON report has every row"
        if full.height <= ROW_LIMIT
        else "the JSON report keeps the named ranks' rows and a summary per class (meta.tables_cut)"
    )
    note = (
        f"{full.height:,} rows over {ranks:,} ranks; listed: the {shown.height:,} rows of rank"
        f"{'s' if len(scale['keep']) > 1 else ''} {scale['keep_text']} (the ranks the verdict names, those it "
        "compares them with, and the first rank). Every row: profan analyze DIR --tables OUT_DIR "
        f"(OUT_DIR/{name}.parquet) and the xlsx workbook; {json_has}."
    )
    if name in CLASSES:
        keys, values = CLASSES[name]
        summary = class_summary(full, keys, values)
        heavy = next((f"max_{value}" for value in values if f"max_{value}" in summary.columns), None)
        if heavy is not None:  # the kinds of row with the largest values first: those a reader looks for
            summary = summary.sort(heavy, descending=True, nulls_last=True)
        across = table_view(name, summary, SCALE_TABLE_ROWS)
        what = "each kind of row across all ranks (how many rows and ranks; min, median and max, and their ranks)"
        if summary.height > SCALE_TABLE_ROWS:
            what += f"; the {SCALE_TABLE_ROWS} with the largest {heavy.removeprefix('max_')} of {summary.height:,}"
    else:
        across = column_summary(full)
        what = "each column across all rows: min, median and max, and the rank (and step) holding them"
    return {"note": note, "across": across, "across_what": what}


def class_summary(frame: pl.DataFrame, keys: list[str], values: list[str]) -> pl.DataFrame:
    """`by_class` (the JSON report's summary per class) with columns named for the page: ``min_time_us`` keeps
    the unit suffix that says how to show it, ``rank_of_min_time`` is a rank number."""
    out = by_class(frame, keys, values)
    names = {}
    for value in values:
        stem = value.rsplit("_", 1)[0] if value.endswith(("_us", "_ms", "_mb")) else value
        names |= {f"{value}_{s}": f"{s}_{value}" for s in ("min", "median", "max")}
        names |= {f"{value}_min_rank": f"rank_of_min_{stem}", f"{value}_max_rank": f"rank_of_max_{stem}"}
    out = out.rename({key: x for key, x in names.items() if key in out.columns})
    return out.with_columns(pl.col(column).cast(pl.Utf8) for column in out.columns if column.startswith("rank_of_"))


def column_summary(frame: pl.DataFrame) -> dict[str, Any]:
    """A table view with one row per measuring column of ``df``: its min, median and max over all rows, and
    the rank (and step) of the rows holding the min and the max."""
    cols = [
        (key, kind)
        for key, value in frame.schema.items()
        if key not in ID_COLUMNS
        and (kind := column_kind(key, str(value))) not in ("text", "file", "list", "id", "timestamp")
    ]
    where = pl.format("rank {} · step {}", "rank", "step") if "step" in frame.columns else pl.format("rank {}", "rank")
    at = frame.select(where.alias("at")).get_column("at")
    rows = []
    for key, kind in cols:
        s = frame.get_column(key)
        if s.null_count() == s.len():
            continue
        lo, hi = s.arg_min(), s.arg_max()
        cells = [column_label(key, kind, ms_for_us=True), s.min(), at[lo], s.median(), s.max(), at[hi]]
        rows.append(
            [
                {"t": fmt_cell(cell, kind) if index in (1, 3, 4) else str(cell), "title": "", "wrap": False}
                for index, cell in enumerate(cells)
            ]
        )
    heads = [("measure", False), ("min", True), ("at", False), ("median", True), ("max", True), ("at", False)]
    columns = [
        {"name": h, "label": h, "kind": "float" if num else "text", "num": num, "cls": "num" if num else ""}
        for h, num in heads
    ]
    return {
        "name": "across",
        "title": "",
        "intro": "",
        "columns": columns,
        "rows": rows,
        "total": len(rows),
        "shown": len(rows),
    }
