"""The layer-pattern fallback: a serving capture without any marker (no ProfilerStep, no annotation, no graph
launch, no module frame) is cut into its iterations by the repetition of its decoder layers. Held against real CPU
captures with their module frames and annotations removed here, and their truth (ground_truth.toml)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
import tomllib

from profan.sources.trace import kineto_iterations
from profan.sources.trace.kineto_rank import load_cached

REPO = Path(__file__).resolve().parents[2]
CAPTURES = ["serving_llama_cpu_uniform", "serving_llama_cpu_interference", "serving_mixtral_cpu_moe"]
PACKED = "serving_llama_cpu_prefill_join"  # one packed row of every request's tokens: its phases need the labels


def _stripped(name: str, tmp: Path, keep=lambda events: events) -> tuple[Path, list[dict], dict]:
    """The real capture without its python_function frames and user annotations (every marker it had), written
    to ``tmp``; its events and its truth."""
    folder = REPO / "fixtures/torch" / name
    with gzip.open(folder / "trace.json.gz", "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    doc["traceEvents"] = keep(
        [e for e in doc["traceEvents"] if e.get("cat") not in ("python_function", "user_annotation")]
    )
    out = tmp / f"{name}.json.gz"
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return out, doc["traceEvents"], tomllib.loads((folder / "ground_truth.toml").read_text())


def _iterations(path: Path):
    kt, _ = load_cached(path)
    return kineto_iterations.rank_iterations(kt, kt.device, "user_annotation")


@pytest.mark.parametrize("name", [*CAPTURES, PACKED])
def test_layer_pattern_finds_the_truths_iterations(name, tmp_path):
    """Stripped of its markers, the capture is cut by its layer pattern into as many iterations as the truth
    says, each cited by its token op event (the embedding its forward starts with) and tiling the span from the
    first embedding to the last op; the unpacked captures' phases (from the token inputs) are the truth's."""
    path, events, truth = _stripped(name, tmp_path)
    its = _iterations(path)
    assert its is not None
    embeds = [i for i, e in enumerate(events) if e.get("name") == "aten::embedding" and e.get("ph") == "X"]
    assert its.height == truth["iterations"] == len(embeds)
    assert set(its["rule"]) == {"layer-pattern"} and set(its["marker"]) == {"layer_pattern"}
    assert its["event_idx"].to_list() == embeds
    assert its["start_us"].to_list() == [float(events[i]["ts"]) for i in embeds]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["ts"] >= events[embeds[0]]["ts"]]
    span = max(e["ts"] + e["dur"] for e in ops) - events[embeds[0]]["ts"]
    assert its["period_us"].sum() == pytest.approx(span, rel=1e-2)
    if name != PACKED:
        assert its["phase"].to_list() == truth["phases"]


def test_no_repetition_stays_one_span(tmp_path):
    """The same capture cut to its first iteration (up to the second embedding), and one with only the ops that
    run once per iteration (no op repeats layer by layer): no iteration table, the capture stays one span."""
    first = {"cut": None}

    def one_iteration(events):
        starts = [e["ts"] for e in events if e.get("name") == "aten::embedding"]
        first["cut"] = starts[1]
        return [e for e in events if e.get("ts", 0) < starts[1]]

    path, _, _ = _stripped(CAPTURES[0], tmp_path, one_iteration)
    assert first["cut"] is not None and _iterations(path) is None

    def no_layers(events):  # only the ops each iteration runs once: nothing repeats layer by layer
        counts = Counter(e.get("name") for e in events)
        return [e for e in events if counts[e.get("name")] <= 4]

    path, events, _ = _stripped(CAPTURES[0], tmp_path, no_layers)
    assert sum(e.get("name") == "aten::embedding" for e in events) == 4  # the token ops are still there
    assert _iterations(path) is None
