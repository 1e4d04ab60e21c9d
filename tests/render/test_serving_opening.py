"""The verdict's opening on a serving capture quotes its model iterations — how many, by phase with the p50
period of one, and the marker that cut them — in Markdown, HTML and the workbook, instead of "no step time"; a
training capture still opens with its step. Held against the raw trace of the real CPU capture
serving_llama_cpu_interference (its forwards' starts) and its truth (the phases)."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import statistics

import openpyxl
import pytest
import tomllib
from conftest import TORCH

from profan.model.textfmt import ms
from profan.pipeline import analyze
from profan.render.html import build_html
from profan.render.markdown import render_markdown
from profan.render.xlsx import render_xlsx

CAPTURE = TORCH / "serving_llama_cpu_interference"


@pytest.fixture(scope="module")
def report():
    return analyze(CAPTURE)


def _expected() -> str:
    """The opening from the raw trace: each forward's period runs to the next one's start, the last to its end."""
    with gzip.open(CAPTURE / "trace.json.gz", "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    forwards = sorted(
        (float(e["ts"]), float(e["dur"]))
        for e in events
        if re.fullmatch(r"nn\.Module: LlamaForCausalLM_\d+", e.get("name", ""))
    )
    periods = [nxt[0] - cur[0] for cur, nxt in itertools.pairwise(forwards)] + [forwards[-1][1]]
    phases = tomllib.loads((CAPTURE / "ground_truth.toml").read_text())["phases"]
    by = {p: [t for t, ph in zip(periods, phases, strict=True) if ph == p] for p in ("prefill", "decode")}
    each = ", ".join(f"{p} {len(ts)} (p50 {ms(statistics.median(ts))} each)" for p, ts in by.items())
    return f"{len(forwards)} model iterations on rank 0, cut by marker causal-lm-forward: {each}"


def test_markdown_and_html_open_with_the_iterations(report):
    want = _expected()
    md = render_markdown(report)
    assert f"**The iterations:** {want}; no step time (no step windows)." in md
    assert "no step time in this capture" not in md
    page = build_html(report)
    assert f"<strong>The iterations:</strong> {want}; no step time (no step windows).</p>" in page


def test_workbook_opens_with_the_iterations(report, tmp_path):
    out = tmp_path / "r.xlsx"
    render_xlsx(report, out)
    cells = [(row[0], row[1]) for row in openpyxl.load_workbook(out).worksheets[0].iter_rows(values_only=True)]
    assert ("The iterations", f"{_expected()}; no step time (no step windows)") in cells


def test_a_training_capture_still_opens_with_its_step():
    md = render_markdown(analyze(TORCH / "nccl_a100_1rank" / "nccl_data.json.gz"))
    assert "**The step:** " in md and "**The iterations:**" not in md
