"""How an RL step batches its passes, on real captures of bench/rl_loop.py (fixtures/torch/rl_grpo_cpu): the
rollout's generate passes and sequences per forward from the forwards' shapes (under_batched: --gen-batch), the
log-prob passes' micro-batch (logprob_small: --logprob-micro-batch), and a colocated job's engine switches
(colocated: --colocate) against the loop's own timers, each held against what the bench planted
(ground_truth.toml) and against the trace read directly."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import polars as pl
import pytest
import tomllib

from profan.model.rl_ledger import ledger_grid
from profan.pipeline import analyze

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "rl_grpo_cpu"


def truth(run: str) -> dict:
    return tomllib.loads((RUNS / run / "ground_truth.toml").read_text())


@pytest.fixture(scope="module")
def reports():
    return {run: analyze(RUNS / run) for run in ("under_batched", "logprob_small", "colocated")}


def forwards_in_trace(path: Path, annotation: str) -> list[list[int]]:
    """Per span of ``annotation`` (in time order), the [sequences, tokens] of every aten::embedding inside it,
    read from the trace's JSON directly."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == annotation and e.get("ph") == "X")
    ops = [(e["ts"], e["args"]["Input Dims"][1]) for e in events if e.get("name") == "aten::embedding"]
    return [[dims for ts, dims in ops if start <= ts <= end] for start, end in spans]


def test_generation_passes_are_what_the_bench_planted(reports):
    planted = truth("under_batched")
    gen = reports["under_batched"].tables["rl_generation"]
    passes = math.ceil(planted["prompts_per_rank"] / planted["gen_batch"])
    assert set(gen["passes"]) == {passes}
    assert set(gen["sequences"]) == {planted["prompts_per_rank"]}
    assert set(gen["sequences_per_forward"]) == {planted["gen_batch"]}
    assert set(gen["forwards"]) == {passes * planted["response_len"][0]}  # one forward per new token and pass


def test_generation_forwards_match_the_trace(reports):
    gen = reports["under_batched"].tables["rl_generation"].filter(pl.col("rank") == 0).sort("step")
    spans = forwards_in_trace(RUNS / "under_batched" / "e2e" / "rollout_prof_rank-0.json.gz", "generate_sequences")
    assert gen["forwards"].to_list() == [len(dims) for dims in spans]
    assert gen["passes"].to_list() == [sum(d[1] > 1 for d in dims) for dims in spans]  # prefills open the passes


def test_logprob_micro_batch_is_what_the_bench_planted(reports):
    planted = truth("logprob_small")
    passes = reports["logprob_small"].tables["rl_logprob"]
    sequences = planted["prompts_per_rank"] * planted["rollout_ranks"]
    assert set(passes["phase"]) == {"old log-prob", "reference"}
    assert set(passes["micro_batch"]) == {planted["logprob_micro_batch"]}
    assert set(passes["sequences"]) == {sequences}
    assert set(passes["forwards"]) == {sequences // planted["logprob_micro_batch"]}
    trace = forwards_in_trace(RUNS / "logprob_small" / "e2e" / "actor_prof_rank-0.json.gz", "compute_ref_log_prob")
    ref = passes.filter(pl.col("phase") == "reference").sort("step")
    assert ref["forwards"].to_list() == [len(dims) for dims in trace]
    led = reports["logprob_small"].tables["rl_ledger"]
    joined = ref.join(led, on=["step", "phase", "rank"], suffix="_led")
    assert (joined["idle_us"] == joined["idle_us_led"]).all()  # the idle is the ledger's


def test_no_batching_table_where_the_shapes_are_unrecorded():
    rep = analyze(RUNS / "normal")
    assert "rl_generation" not in rep.tables and "rl_logprob" not in rep.tables
    assert any(n.startswith("RL job: the traces record no input shapes") for n in rep.notes)


def test_colocated_switches_against_the_loops_timers(reports):
    rep, planted = reports["colocated"], truth("colocated")
    switches = rep.tables["rl_switches"]
    assert set(switches["role"]) == {"actor_rollout"} and set(switches["count"]) == {1}
    for step in (1, 2):
        mine = switches.filter(pl.col("step") == step)
        wake = float(mine.filter(pl.col("switch") == "switch to rollout")["switch_us"][0])
        sleep = float(mine.filter(pl.col("switch") == "switch to trainer")["switch_us"][0])
        reshard = planted["step"][str(step)]["timing_s/reshard"] * 1e6
        assert abs(wake - reshard) / reshard < 0.05, (step, wake, reshard)
        assert abs(sleep - planted["step"][str(step)]["sleep_s"] * 1e6) < 100  # its timer has 0.1 ms around it
    phases = rep.tables["rl_phases"]
    inside = phases.filter(pl.col("measured") == "trace (inside generation)")
    assert inside.filter(pl.col("step") == 1)["phase"].to_list() == ["switch to rollout", "switch to trainer"]
    grid = ledger_grid(rep.tables)
    first = grid.filter((pl.col("step") == 1) & (pl.col("time") == "phase in the traces"))
    steps = rep.tables["rl_steps"].filter(pl.col("step") == 1)
    assert first["switch to rollout_us"][0] == pytest.approx(inside["phase_us"][0])
    assert first["sum_us"][0] == pytest.approx(float(steps["step_us"][0]))  # the switches are not summed twice
