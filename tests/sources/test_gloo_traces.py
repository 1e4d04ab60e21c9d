"""Real CPU-only 4-rank traces with planted faults (fixtures/torch/gloo_moe_cpu_4rank, written by
bench/gloo_moe.py: torch.distributed over gloo training a small MoE model). Their collectives exist only as CPU
spans, and waiting for a peer is time inside them. The cross-rank analysis must name the rank at fault, say
nothing on the fault-free run, and word the step split for the CPU it measured.

Ground truth: each run's ground_truth.toml (what was planted), and every figure recomputed here from the raw JSON
with plain Python: the gloo spans' durations, the main thread's ops, interval unions.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import re
import statistics

import polars as pl
import pytest
import tomllib
from conftest import TORCH, analysed, run_cli, union_us

from profan.rulepack.pack import load as load_pack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.common.readback import read_back

GLOO = TORCH / "gloo_moe_cpu_4rank"
RUNS = ["none", "sleep", "compute", "hot_expert", "async_grad"]
SYNC = RUNS[:4]  # every collective waited for within the step that issued it
NAMED = ("straggler", "compute-imbalance")
ROLES = default_roles()
COMM = re.compile(ROLES.kineto_comm_ops)  # collective ops on the main thread
WAITS = re.compile(ROLES.kineto_peer_wait_ops)  # collective spans that include waiting for peers (gloo:*)


@pytest.fixture(scope="module")
def reports():
    return {run: analysed(GLOO / run) for run in RUNS}


def truth(run: str) -> dict:
    return tomllib.loads((GLOO / run / "ground_truth.toml").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=32)
def events(run: str, rank: int) -> list[dict]:
    with gzip.open(GLOO / run / f"rank{rank}.pt.trace.json.gz", "rb") as fh:
        return json.load(fh)["traceEvents"]


def named(report, check: str) -> list:
    return [f for f in report.findings if f.check == check and f.severity in ("warning", "critical")]


@functools.lru_cache(maxsize=32)
def lanes(run: str, rank: int) -> tuple[dict[int, tuple[float, float]], list[tuple[float, float, bool, int | None]]]:
    """(ProfilerStep spans, the CPU's work as (start, end, is communication, step)): the main thread's top-level
    ops — an op that encloses a collective op is replaced by its children, its own time being the wait — and the
    gloo spans of the worker threads. A unit belongs to the step whose span holds its start."""
    ev = events(run, rank)
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    main = next(e["tid"] for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X" and e["tid"] == main]
    starts = sorted(e["ts"] for e in ops if COMM.search(e["name"]))
    keep = [
        e
        for e in ops
        if COMM.search(e["name"])
        or bisect.bisect_left(starts, e["ts"] + e["dur"]) == bisect.bisect_left(starts, e["ts"])
    ]
    top, end = [], None
    for e in sorted(keep, key=lambda e: (e["ts"], -e["dur"])):
        if end is None or e["ts"] >= end:
            top.append(e)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    waits = [e for e in ev if e.get("cat") == "user_annotation" and WAITS.search(e["name"])]

    def step_of(t: float) -> int | None:
        return next((n for n, (a, b) in steps.items() if a <= t < b), None)

    work = [
        (e["ts"], e["ts"] + e["dur"], bool(COMM.search(e["name"]) or WAITS.search(e["name"])), step_of(e["ts"]))
        for e in top + waits
    ]
    return steps, work


def split(run: str, rank: int, step: int) -> dict:
    """A step's window (first start to last end of its own units) and, over every unit inside it (clipped), the
    busy and computing unions; also the busy union of the step's own units only."""
    _, work = lanes(run, rank)
    own = [(s, e, c) for s, e, c, st in work if st == step]
    w0, w1 = min(s for s, _, _ in own), max(e for _, e, _ in own)
    inside = [(max(s, w0), min(e, w1), c) for s, e, c, _ in work if s < w1 and e > w0]
    return {
        "window": w1 - w0,
        "busy": union_us([(s, e) for s, e, _ in inside]),
        "computing": union_us([(s, e) for s, e, c in inside if not c]),
        "own_busy": union_us([(s, e) for s, e, _ in own]),
        "others": len(inside) - len(own),
    }


def gloo_spans(run: str, rank: int) -> dict[tuple[int, str, int], dict]:
    """(step, name, k) -> the k-th gloo span of that name in the step."""
    steps, _ = lanes(run, rank)
    out: dict[tuple[int, str, int], dict] = {}
    seen: dict[tuple[int, str], int] = {}
    for e in sorted(
        (e for e in events(run, rank) if e.get("cat") == "user_annotation" and WAITS.search(e["name"])),
        key=lambda e: e["ts"],
    ):
        step = next((n for n, (a, b) in steps.items() if a <= e["ts"] < b), None)
        k = seen.get((step, e["name"]), 0)
        seen[(step, e["name"])] = k + 1
        out[(step, e["name"], k)] = e
    return out


def hold_ups(run: str) -> dict[tuple[int, int], float]:
    """(step, rank) -> how much later than the second-latest rank it arrived, summed over the collectives where it
    is an outlier last arrival — from the raw gloo spans, with the straggler check's thresholds."""
    chk = load_pack().check("straggler")
    spans = {r: gloo_spans(run, r) for r in range(4)}
    out: dict[tuple[int, int], float] = {}
    for key in spans[0]:
        dur = {r: spans[r][key]["dur"] for r in spans}
        med = statistics.median(dur.values())
        late = {r: med - d for r, d in dur.items()}
        center = statistics.median(late.values())
        sigma = 1.4826 * statistics.median(abs(v - center) for v in late.values())
        order = sorted(late, key=lambda r: (-late[r], r))
        last, second = order[0], late[order[1]]
        if late[last] >= chk["min_lag_us"] and late[last] >= chk["mad_z"] * sigma:
            out[(key[0], last)] = out.get((key[0], last), 0.0) + late[last] - second
    return out


def median_computing(run: str) -> dict[int, float]:
    steps = sorted(lanes(run, 0)[0])
    return {r: statistics.median(split(run, r, s)["computing"] for s in steps) for r in range(4)}


# ------------------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("run", SYNC)
def test_collectives_are_aligned_by_the_order_of_their_name(reports, run):
    """No trace carries a process group or sequence number on its gloo spans: the k-th span of a name in a step is
    the same collective on every rank, and each of them is one aligned collective."""
    keys = [set(gloo_spans(run, r)) for r in range(4)]
    assert all(k == keys[0] for k in keys) and len(keys[0]) == 33
    arrivals = reports[run].tables["collective_arrivals"]
    got = {(row["step"], row["group"], row["seq"]) for row in arrivals.iter_rows(named=True)}
    assert got == keys[0]
    assert (arrivals["present"] == 4).all()


def test_async_collective_started_in_another_step_is_said(reports):
    """An all_reduce left in flight at the end of a step starts on its worker thread in that step on one rank and
    in the next on another: the ranks disagree on a step's op count, and the report says so."""
    counts = {r: sum(1 for k in gloo_spans("async_grad", r) if k[:2] == (4, "gloo:all_reduce")) for r in range(4)}
    assert len(set(counts.values())) > 1
    assert any("op count" in n and "step 4, group gloo:all_reduce" in n for n in reports["async_grad"].notes)


def test_sleeping_rank_is_the_straggler_with_a_host_gap(reports):
    t, rep = truth("sleep"), reports["sleep"]
    found = named(rep, "straggler")
    worst = max(found, key=lambda f: f.metrics["lag_us"])
    assert worst.rank == t["fault_rank"] and worst.metrics["cause_class"] == "host_gap"
    want = {s: v for (s, r), v in hold_ups("sleep").items() if r == t["fault_rank"]}
    got = {int(s): v for s, v in worst.metrics["lag_us_per_step"].items()}
    assert got.keys() == want.keys() and len(got) == 3
    assert all(got[s] == pytest.approx(want[s], abs=1e-3) for s in got)
    # the sleep is idle time on the main thread: at least half of it shows in every step's hold-up
    assert min(got.values()) > 0.5 * 1000 * t["fault_ms"]
    assert "main thread ran no op" in worst.message


def test_computing_rank_is_named_by_imbalance_and_as_straggler(reports):
    t, rep = truth("compute"), reports["compute"]
    (imb,) = named(rep, "compute-imbalance")
    comp = median_computing("compute")
    med = statistics.median(v for r, v in comp.items() if r != t["fault_rank"])  # the other ranks' median
    assert imb.rank == t["fault_rank"] == max(comp, key=comp.get)
    assert imb.metrics["ratio"] == pytest.approx(comp[t["fault_rank"]] / med, abs=1e-4)
    assert imb.metrics["steps"] == sorted(lanes("compute", 0)[0]) and imb.metrics["ratio"] >= 1.15
    worst = max(named(rep, "straggler"), key=lambda f: f.metrics["lag_us"])
    assert worst.rank == t["fault_rank"] and worst.metrics["cause_class"] == "compute"


def test_hot_expert_rank_computes_more(reports):
    """The router sends most tokens to expert ``hot_expert``, held by the fault rank: that rank computes most (a
    rank-level figure that needs no expert labels), and the labels the generator put in confirm the routing."""
    t, rep = truth("hot_expert"), reports["hot_expert"]
    (imb,) = named(rep, "compute-imbalance")
    comp = median_computing("hot_expert")
    assert imb.rank == t["fault_rank"] == max(comp, key=comp.get)
    others = statistics.median(v for r, v in comp.items() if r != t["fault_rank"])
    assert imb.metrics["ratio"] == pytest.approx(comp[t["fault_rank"]] / others, abs=1e-4)
    expert_us = {
        r: sum(
            e["dur"]
            for e in events("hot_expert", r)
            if e.get("cat") == "user_annotation" and e["name"].startswith("expert_")
        )
        for r in range(4)
    }
    hot = f"expert_{t['hot_expert']}"
    assert any(e.get("name") == hot for e in events("hot_expert", t["fault_rank"]))
    assert max(expert_us, key=expert_us.get) == t["fault_rank"]
    assert expert_us[t["fault_rank"]] > 2 * statistics.median(expert_us.values())
    assert worst_straggler(rep).rank == t["fault_rank"]
    # the expert's ops, found by their record_function range (forward) and their forward op (backward), are MoE
    # work; the MoE imbalance names the hot rank and expert from the tokens the dispatch all-to-alls carried
    (moe,) = named(rep, "moe-expert-imbalance")
    assert moe.rank == t["fault_rank"] and moe.metrics["metric"] == "tokens" and moe.metrics["ratio"] >= 2.0
    assert moe.metrics["hot_expert"] == t["hot_expert"]
    top = rep.tables["top_kernels"].filter(pl.col("rank") == t["fault_rank"], pl.col("bucket") == "moe")
    assert set(top["rule_id"]) == {"CPU-MOE-002"}
    assert any(f"annotation={hot}" in d for d in top["decided_by"])
    assert any(n.startswith("autograd::engine::evaluate_function") for n in top["name"])  # the backward too
    for fault_free in ("none", "compute", "async_grad", "sleep"):  # equal routing: the spread of time is noise
        assert not named(reports[fault_free], "moe-expert-imbalance")


def worst_straggler(rep):
    return max(named(rep, "straggler"), key=lambda f: f.metrics["lag_us"])


def test_fault_free_run_names_nobody(reports):
    rep = reports["none"]
    assert not named(rep, "straggler") and not named(rep, "compute-imbalance")
    assert any(f.check == "straggler" and f.title.startswith("No straggler") for f in rep.findings)
    # the rank with the largest median step computes less than the median rank in some step: it changes sides
    comp, chk = median_computing("none"), load_pack()
    top, steps = max(comp, key=comp.get), sorted(lanes("none", 0)[0])
    per_step = {s: [split("none", r, s)["computing"] for r in range(4)] for s in steps}
    assert any(per_step[s][top] <= statistics.median(per_step[s]) for s in steps)
    # no rank holds the others up by the check's share of the step in half the steps or more
    share = chk.check("straggler")["min_step_share"]
    held = [
        rank for (step, rank), lag in hold_ups("none").items() if lag >= share * split("none", rank, step)["window"]
    ]
    assert all(held.count(r) < (len(steps) + 1) // 2 for r in range(4)), held


@pytest.mark.parametrize("run", RUNS)
def test_cpu_only_split_speaks_of_the_cpu(reports, run):
    rep = reports[run]
    steps = rep.tables["trace_steps"].filter(pl.col("scope") == "step")
    assert set(steps["device"].to_list()) == {"CPU"}
    for f in rep.findings:
        assert "GPU" not in f.title and "GPU" not in f.message, (f.id, f.title)
        if f.check == "device-idle":
            assert "CPU idle" in f.title and f.metrics["device"] == "CPU"
    # every step's Free is its window minus the union of all the CPU's work inside it
    for row in steps.iter_rows(named=True):
        s = split(run, row["rank"], row["step"])
        assert row["step_us"] == pytest.approx(s["window"])
        assert row["free_us"] == pytest.approx(s["window"] - s["busy"], abs=1e-3)
        assert row["computing_us"] == pytest.approx(s["computing"], abs=1e-3)
        assert row["other_events"] == s["others"]


def test_overlapping_steps_count_every_event_in_the_window(reports):
    """With --async-grad each step's gradient all_reduce still runs when the next step starts: steps overlap,
    and the next step's window holds a span that an earlier step launched. Free counts it as busy."""
    steps = reports["async_grad"].tables["trace_steps"].filter(pl.col("scope") == "step")
    inflated = 0
    for row in steps.iter_rows(named=True):
        s = split("async_grad", row["rank"], row["step"])
        assert row["free_us"] == pytest.approx(s["window"] - s["busy"], abs=1e-3)
        assert row["other_events"] == s["others"]
        inflated += s["busy"] > s["own_busy"] + 100  # the step's own events alone would call that time idle
    assert inflated >= 6


@pytest.mark.parametrize("run", RUNS)
def test_every_cited_event_is_in_the_set_its_select_names(reports, run):
    checked = 0
    for f in reports[run].findings:
        for ev in f.evidence:
            if not ev.events:
                continue
            cited = [json.loads(text) for _, text in read_back(GLOO / run, ev)]
            assert len(cited) == len(ev.events)
            cats = ev.select.get("cat")
            if cats is not None:
                assert all(e["cat"] in ([cats] if isinstance(cats, str) else cats) for e in cited), (f.id, ev.select)
            if isinstance(ev.select.get("name"), str):
                assert all(e["name"] == ev.select["name"] for e in cited), (f.id, ev.select)
            if ev.select.get("source") == "aligned collectives":
                assert all(WAITS.search(e["name"]) for e in cited)
                assert ev.file == f"rank{ev.values['rank']}.pt.trace.json.gz"
            if ev.select.get("bucket_not") == "communication":  # compute events of the imbalance
                assert not any(COMM.search(e["name"]) or WAITS.search(e["name"]) for e in cited)
            checked += 1
    assert checked


def test_evidence_command_prints_the_straggler_events(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("analyze", str(GLOO / "sleep"), "-f", "json", "-o", str(out), "-q").returncode == 0
    doc = json.loads(out.read_text())
    f = max((f for f in doc["findings"] if f["check"] == "straggler"), key=lambda f: f["metrics"].get("lag_us", 0))
    res = run_cli("evidence", str(out), f["id"], "--format", "json")
    assert res.returncode == 0, res.stderr
    for item, ev in zip(json.loads(res.stdout)["evidence"], f["evidence"], strict=True):
        rank = int(ev["file"][4])
        assert [json.loads(r["text"]) for r in item["rows"]] == [events("sleep", rank)[i] for i in ev["events"]]
