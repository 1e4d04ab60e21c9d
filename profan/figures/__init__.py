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

The figures live in six modules: `profan.figures.style` (colours, layout, escaping), `profan.figures.charts`
(the bar charts, heatmap and scatter), `profan.figures.rank_heatmap` (the per-rank charts of a job of many ranks:
a heatmap column per rank instead of a bar per rank and step), `profan.figures.memory` (allocated and reserved
memory over time), `profan.figures.timeline_layout` (one step's timeline laid out) and
`profan.figures.step_timeline` (the timeline drawn). A new figure is a function of a Report and one entry in
`FIGURES`.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from profan.figures.charts import bandwidth, boundness, breakdown, compare_buckets, rank_comparison
from profan.figures.memory import memory
from profan.figures.step_timeline import timeline
from profan.figures.style import HIGHLIGHT, highlighted_ranks, step_table
from profan.figures.timeline_layout import CAUSE_LANES, TIMELINE_RANKS
from profan.model.report import Report

__all__ = [
    "CAUSE_LANES",
    "FIGURES",
    "HIGHLIGHT",
    "TIMELINE_RANKS",
    "bandwidth",
    "boundness",
    "breakdown",
    "compare_buckets",
    "highlighted_ranks",
    "memory",
    "rank_comparison",
    "step_table",
    "timeline",
]

# The figures the HTML report draws, by the key its page uses.
FIGURES: dict[str, Callable[[Report], go.Figure | None]] = {
    "timeline": timeline,
    "breakdown": breakdown,
    "rank_comparison": rank_comparison,
    "boundness": boundness,
    "comm_bandwidth": bandwidth,
    "compare_buckets": compare_buckets,
    "memory_peaks": memory,  # drawn in the memory_peaks table's section
}
