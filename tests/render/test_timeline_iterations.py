"""The timeline of a serving capture draws its model iterations (`profan.figures.iteration_lane`): on the real
packed-batch CPU loop where long prompts join the decodes, one band per iteration on an iterations lane under the
rank's device lane, at the iteration's start on the timeline's clock for its period, coloured by phase; the HTML
page carries them. A training capture has no such lane."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import analysed

from profan import figures
from profan.figures import timeline_layout
from profan.figures.iteration_lane import PHASE_COLORS
from profan.render.html import build_html

REPO = Path(__file__).resolve().parents[2]
JOIN = REPO / "fixtures/torch/serving_llama_cpu_prefill_join"


def test_iteration_bands_are_the_iterations_by_phase():
    report = analysed(JOIN)
    its = report.tables["serving_iterations"]
    fig = figures.timeline(report)
    assert fig.layout.meta["lanes"][1] == "rank 0 · iterations" and fig.layout.meta["iterations"] == its.height
    t0 = timeline_layout.lay_out(report, None, timeline_layout.TIMELINE_RANKS).t0
    bands = {}
    for trace in fig.data:
        if (trace.name or "").endswith(" iterations"):
            phase = trace.name.removesuffix(" iterations")
            assert trace.marker.color == PHASE_COLORS[phase]
            assert set(trace.y) == {"rank 0 · iterations"}
            for base, width, custom in zip(trace.base, trace.x, trace.customdata, strict=True):
                bands[int(custom[0])] = (phase, base, width, custom)
    assert sorted(bands) == its["iteration"].to_list()
    for row in its.iter_rows(named=True):
        phase, base, width, custom = bands[row["iteration"]]
        assert phase == row["phase"]
        assert base == pytest.approx((row["start_us"] - t0) / 1000, abs=1e-9)
        assert width == pytest.approx(row["period_us"] / 1000, rel=1e-12)
        assert custom[4] == str(row["tokens"]) and custom[5] == f"trace.json.gz#{row['event_idx']}"
    assert [i for i, band in sorted(bands.items()) if band[0] == "mixed"] == [6, 11]
    page = build_html(report)
    assert '"name": "mixed iterations"' in page and "rank 0 \\u00b7 iterations" in page  # the figure's JSON, escaped


def test_training_timeline_has_no_iteration_lane():
    fig = figures.timeline(analysed(REPO / "fixtures/torch/gloo_moe_cpu_4rank/sleep"))
    assert not [lane for lane in fig.layout.meta["lanes"] if "iterations" in lane]
    assert "iterations" not in fig.layout.meta
