"""What every figure of a report shares: colours, the layout, and the escaping of trace text.

Plotly reads a few HTML tags in strings, so text taken from a trace (kernel names, files, JSON pointers) is
entity-escaped before it becomes a label: a kernel called ``<b>x</b>`` is drawn as exactly that text. Control
characters are shown as visible escapes (``textfmt.visible``), as everywhere else in the reports.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go
import polars as pl

from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.report import Report
from profan.model.textfmt import visible

BUCKET_COLORS = {
    "attention": "#3b6fb6",
    "attention_proj": "#86a8dc",  # lighter attention: the attention layer's matmuls
    "ffn": "#5aa469",
    "gemm": "#a3c9a0",  # lighter ffn: dense matmuls of no known layer
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


def _esc(s: Any) -> str:
    """Text for Plotly labels: Plotly reads a few HTML tags in strings, so untrusted text is entity-escaped."""
    return html.escape(visible(str(s)), quote=False)


def _esc_col(frame: pl.DataFrame, name: str) -> pl.Expr:
    """``_esc`` over a column, computed once per distinct value (names and files repeat across many rows)."""
    values = frame.get_column(name).cast(pl.Utf8).fill_null("").unique().to_list()
    return (
        pl.col(name)
        .cast(pl.Utf8)
        .fill_null("")
        .replace_strict({value: _esc(value) for value in values}, return_dtype=pl.Utf8)
    )


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


def _many_steps(frame: pl.DataFrame) -> bool:
    """Label bars with their step when a rank has more than one (kernels outside any step count as one)."""
    return "step" in frame.columns and frame.get_column("step").n_unique() > 1


def _many_ranks(frame: pl.DataFrame) -> bool:
    return "rank" in frame.columns and frame.get_column("rank").n_unique() > 16


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
    frame = report.tables.get(name)
    return pl.DataFrame() if frame is None else frame


def highlighted_ranks(findings: list[Finding]) -> dict[int, list[dict[str, str]]]:
    """Ranks a finding names as holding the job back (straggler, slow pipeline stage), with those findings."""
    out: dict[int, list[dict[str, str]]] = {}
    for finding in findings:
        ranks: list[int] = []
        for key in _SLOW_RANK_KEYS:
            v = finding.metrics.get(key)
            if isinstance(v, list | tuple):
                ranks += [int(x) for x in v if isinstance(x, int)]
            elif isinstance(v, int) and not isinstance(v, bool):
                ranks.append(v)
        if not ranks and "straggler" in finding.check and finding.rank is not None:
            ranks = [finding.rank]
        for r in dict.fromkeys(ranks):
            out.setdefault(r, []).append({"id": finding.id, "check": finding.check, "title": finding.title})
    return out


def step_table(report: Report) -> tuple[str, pl.DataFrame]:
    """The table the rank comparison draws: step_trace_time rows (Ascend) or per-step rows of a trace; when a
    table also holds whole-trace rows (``scope``), the per-step ones are drawn if there are any."""
    for name in STEP_TABLES:
        frame = report.tables.get(name)
        if frame is None or frame.is_empty() or not {"rank", "computing_us"} <= set(frame.columns):
            continue
        if "scope" in frame.columns and (frame.get_column("scope") == "step").any():
            frame = frame.filter(pl.col("scope") == "step")
        return name, frame
    return "", pl.DataFrame()


def _citers(items: Iterable[Cause | Finding]) -> dict[tuple[str, str], str]:
    """(file, locator as text) -> the id of the first cause or finding citing that row; a member's rows lead to
    its group, whose block on the page holds the member table."""
    out: dict[tuple[str, str], str] = {}
    for item in items:
        for m in (item, *getattr(item, "members", ())):
            for evidence in m.evidence:
                for loc in evidence.locators:
                    out.setdefault((evidence.file, str(loc)), item.id)
    return out
