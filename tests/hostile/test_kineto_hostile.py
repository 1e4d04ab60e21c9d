"""Kineto traces mutated in the ways that used to change the verdict without a word: an absurd start time (one
kernel at ``ts: 1e30`` made a 10^27 ms step and a false "GPU idle 100%"), device events with no category or of
phase B (they vanished, leaving the GPU "idle 99.6%"), and ``args`` that is no object (it refused the whole trace).
Each test mutates the Qwen1.5 H100 sample and holds the report against the unmutated one and the raw JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import analysed

import profan

QWEN = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "qwen1.5-0.5b_h100_1rank"
TRACE = QWEN / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
DAY_US = 86400e6  # rules/limits.toml max_duration_us


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFAN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def base():
    return analysed(QWEN)


def _doc() -> dict[str, Any]:
    return json.loads(gzip.decompress(TRACE.read_bytes()))


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's kernel events in start order (the first and last set the step window)."""
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def _analyse(tmp_path: Path, doc: dict[str, Any]) -> profan.Report:
    folder = tmp_path / "rank"
    folder.mkdir()
    (folder / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return profan.analyze(folder)


def _step(rep: profan.Report) -> dict[str, Any]:
    return rep.tables["trace_steps"].filter(pl.col("scope") == "step").row(0, named=True)


def _skipped(rep: profan.Report) -> int:
    return rep.source["ranks"][0].get("rows_skipped", {}).get("kineto_trace", 0)


def test_absurd_starts_are_skipped_and_the_step_keeps_its_length(tmp_path, base):
    doc = _doc()
    ks = _kernels(doc)
    bad = [ks[len(ks) // 2], ks[len(ks) // 3], ks[len(ks) // 4], ks[len(ks) // 5]]
    for e, ts in zip(bad, (1e30, -bad[1]["ts"], bad[2]["ts"] + 2 * DAY_US, 9.3e15), strict=True):
        e["ts"] = ts
    rep = _analyse(tmp_path, doc)
    assert _step(rep)["step_us"] == pytest.approx(_step(base)["step_us"], abs=1e-6)
    assert (_step(rep)["start_us"], _step(rep)["end_us"]) == (_step(base)["start_us"], _step(base)["end_us"])
    kept = base.breakdown["time_us"].sum() - sum(e["dur"] for e in bad)
    assert rep.breakdown["time_us"].sum() == pytest.approx(kept)
    assert _skipped(rep) == 4 and any("skipped 4 of" in w and "median start" in w for w in rep.warnings)
    assert [c.check for c in rep.causes] == [c.check for c in base.causes]  # no false "GPU idle 100%"


def test_kernels_without_category_are_read_and_begin_events_counted(tmp_path, base):
    doc = _doc()
    ks = _kernels(doc)
    for e in ks[1::8]:  # no cat, but a stream and a correlation id: device work, read as a kernel
        del e["cat"]
    counted = ks[2::50]
    for e in counted[::2]:  # cat null and no stream: counted, not read
        e["cat"] = None
        del e["args"]["stream"]
    for e in counted[1::2]:  # a begin event, not a complete one: counted, not read
        e["ph"] = "B"
    rep = _analyse(tmp_path, doc)
    kept = base.breakdown["time_us"].sum() - sum(e["dur"] for e in counted)
    assert rep.breakdown["time_us"].sum() == pytest.approx(kept)
    assert _step(rep)["step_us"] == pytest.approx(_step(base)["step_us"], abs=1e-6)
    assert _skipped(rep) == len(counted)
    (line,) = [w for w in rep.warnings if f"skipped {len(counted)} of" in w]
    assert f"{len(counted[::2])} with a launch's correlation id but no category" in line
    assert f"{len(counted[1::2])} device events of phase B/E" in line
    assert any(f"read {len(ks[1::8])} event(s) with no category as device activity" in w for w in rep.warnings)


def test_all_kernels_without_category_leave_the_verdict_unchanged(tmp_path, base):
    doc = _doc()
    for e in _kernels(doc):
        del e["cat"]
    rep = _analyse(tmp_path, doc)
    assert rep.breakdown["time_us"].sum() == pytest.approx(base.breakdown["time_us"].sum())
    assert _step(rep)["free_us"] == pytest.approx(_step(base)["free_us"])
    assert [c.check for c in rep.causes] == [c.check for c in base.causes]


def test_args_that_are_no_object_cost_only_their_own_args(tmp_path, base):
    doc = _doc()
    bad = _kernels(doc)[3::40]
    for k, e in enumerate(bad):
        e["args"] = ["x", ["a", 1], 7, "{no json"][k % 4]
    rep = _analyse(tmp_path, doc)
    assert rep.breakdown["time_us"].sum() == pytest.approx(base.breakdown["time_us"].sum())
    assert any(f"read {len(bad)} event(s) whose args is not a JSON object" in w for w in rep.warnings)
