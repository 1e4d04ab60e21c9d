"""EP cost on real CPU/gloo MoE runs: dispatch, combine and all-to-all time per step split into hidden (beside
compute) and exposed, checked against an interval sweep written here over the raw events, and the cause a
capture gets where the exchange is more than a third of the step."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from conftest import TORCH, merged_runs

import profan
from profan.rulepack.pack import load
from profan.sources.trace import kineto_rank

OVERLAP = TORCH / "gloo_moe_ep_overlap"
BALANCED = TORCH / "gloo_moe_seeds" / "balanced_seed1"
# each row of moe_ep_cost and the rules' parts it is the union of (ep_total: all of them, overlaps counted once)
EP_PARTS = {
    "dispatch": {"dispatch"},
    "combine": {"combine"},
    "all_to_all": {"all_to_all"},
    "ep_total": {"dispatch", "combine", "all_to_all"},
}


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the intersection of two sets of disjoint runs, by a two-pointer walk (no union arithmetic)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _sweep(run, rank: int) -> dict[tuple[int, str], tuple[float, float]]:
    """(step, part) -> (busy, hidden) by the sweep above, over the rank's device events as the trace reader
    places and the rules classify them."""
    pack = load()
    path = run / f"rank{rank}.pt.trace.json.gz"
    kt, _ = kineto_rank.load_cached(path, pack.roles)
    dev = kineto_rank.classify_events(kt.device, pack.rules_for("cpu"), pack.roles)
    parts = pack.rule_parts()
    rows = dev.filter(pl.col("step").is_not_null()).select("step", "ts_us", "end_us", "bucket", "rule_id").rows()
    out = {}
    for step in {r[0] for r in rows}:
        compute = merged_runs([(a, b) for s, a, b, bucket, _ in rows if s == step and bucket != "communication"])
        for part, of in EP_PARTS.items():
            mine = merged_runs(
                [
                    (a, b)
                    for s, a, b, bucket, rule in rows
                    if s == step and bucket == "communication" and parts.get(rule) in of
                ]
            )
            if mine:
                out[(step, part)] = (sum(b - a for a, b in mine), _overlap(mine, compute))
    return out


@pytest.fixture(scope="module")
def overlap_report():
    return profan.analyze(OVERLAP)


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_hidden_and_exposed_match_an_independent_sweep(overlap_report, rank):
    table = overlap_report.tables["moe_ep_cost"].filter(pl.col("rank") == rank)
    want = _sweep(OVERLAP, rank)
    got = {(r["step"], r["part"]): r for r in table.iter_rows(named=True)}
    assert set(got) == set(want)
    for key, (busy, hidden) in want.items():
        assert got[key]["busy_us"] == pytest.approx(busy, abs=0.01)
        assert got[key]["hidden_us"] == pytest.approx(hidden, abs=0.01)
        assert got[key]["exposed_us"] == pytest.approx(busy - hidden, abs=0.01)
    # the shared expert ran while gloo's worker thread moved the tokens: some of the exchange is hidden
    assert table.filter(pl.col("part") == "all_to_all")["hidden_us"].sum() > 1000


def test_ep_events_are_the_raw_all_to_alls_in_their_ranges(overlap_report):
    """Rank 0, step 2: the dispatch part's events are the c10d all-to-alls inside a dispatch range (forward) or
    whose forward op was (backward); all_to_all is gloo's worker-thread all-to-alls, named in no range there."""
    events = json.loads(gzip.decompress((OVERLAP / "rank0.pt.trace.json.gz").read_bytes()))["traceEvents"]
    x = [e for e in events if e.get("ph") == "X"]
    (step,) = [e for e in x if e["name"] == "ProfilerStep#2"]
    inside = [e for e in x if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    gloo = [e for e in inside if e["name"] == "gloo:all_to_all"]
    row = overlap_report.tables["moe_ep_cost"].filter(pl.col("rank") == 0, pl.col("step") == 2)
    a2a = row.filter(pl.col("part") == "all_to_all").row(0, named=True)
    assert a2a["events"] == len(gloo) and a2a["time_us"] == pytest.approx(sum(e["dur"] for e in gloo), abs=0.01)
    ranges = [e for e in inside if e["name"] in ("dispatch", "combine") and e.get("cat") == "user_annotation"]
    c10d = [e for e in inside if e["name"] == "c10d::alltoall_base_"]
    in_dispatch = [
        e for e in c10d if any(r["name"] == "dispatch" and r["ts"] <= e["ts"] < r["ts"] + r["dur"] for r in ranges)
    ]
    dispatch = row.filter(pl.col("part") == "dispatch").row(0, named=True)
    assert dispatch["events"] >= len(in_dispatch) > 0  # forward ones by their range; backward ones by their forward's


def test_a_third_of_the_step_in_the_exchange_gets_a_cause_with_the_exposed_gain(overlap_report):
    table = overlap_report.tables["moe_ep_cost"]
    per_rank = (
        table.filter(pl.col("part") == "ep_total")
        .group_by("rank")
        .agg(pl.col("exposed_us").mean(), pl.col("window_us").mean())
    )
    assert (per_rank["exposed_us"] / per_rank["window_us"]).min() > 1 / 3
    (cause,) = [c for c in overlap_report.causes if c.check == "moe-ep-exposed"]
    assert cause.impact_us == pytest.approx(per_rank["exposed_us"].min(), rel=1e-3)
    assert "DualPipe" in cause.action and "low-latency" in cause.action
    moe = [f for f in overlap_report.ungrouped() if f.check == "moe-expert-imbalance"]
    assert not [f for f in moe if f.severity in ("warning", "critical")]  # a balanced run: no hot expert


def test_bare_all_to_alls_are_priced_but_make_no_cause():
    """A capture with only bare all-to-alls (no dispatch/combine range, no EP kernel) may be context parallelism:
    its exchange is priced and found, at most info (rules/checks.toml unnamed_max_severity: on the healthy gloo runs
    bare all-to-alls are 44-56% of the step by design), and no cause is built on it."""
    rep = profan.analyze(BALANCED)
    assert set(rep.tables["moe_ep_cost"]["part"]) == {"all_to_all", "ep_total"}
    found = [f for f in rep.ungrouped() if f.check == "moe-ep-exposed"]
    assert len(found) == 4 and {f.severity for f in found} == {"info"}
    assert not found[0].metrics["named"] and "context parallelism" in found[0].message
    assert not [c for c in rep.causes if c.check == "moe-ep-exposed"]


def _gpu_trace(path) -> None:
    """Two steps of one GPU rank: GEMMs on stream 7, DeepEP-named dispatch and combine kernels on stream 20.
    Synthetic, for what no capture at hand has (an EP library's kernels on their own stream): per step the
    dispatch [1500, 3500) runs beside the GEMMs [100, 2100) and [2100, 3100), hidden 1600 µs; the combine
    [4000, 5500) beside the GEMM [5000, 8000), hidden 500 µs."""
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel"
    dispatch = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)"
    combine = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)"
    plan = [(gemm, 7, 100, 2000), (dispatch, 20, 1500, 2000), (gemm, 7, 2100, 1000), (combine, 20, 4000, 1500)]
    plan.append((gemm, 7, 5000, 3000))
    events, corr = [], 0
    for step in (1, 2):
        base = step * 10000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 9000,
            }
        )
        for name, stream, offset, dur in plan:
            corr += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": base + offset - 50,
                    "dur": 5,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": base + offset,
                    "dur": dur,
                    "args": {"stream": stream, "correlation": corr, "device": 0},
                }
            )
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 8}}))


def test_deep_ep_kernels_on_their_own_stream_hidden_behind_gemms(tmp_path):
    _gpu_trace(tmp_path / "rank0.pt.trace.json")
    rep = profan.analyze(tmp_path)
    got = {(r["step"], r["part"]): r for r in rep.tables["moe_ep_cost"].iter_rows(named=True)}
    for step in (1, 2):
        assert (got[(step, "dispatch")]["hidden_us"], got[(step, "dispatch")]["exposed_us"]) == (1600.0, 400.0)
        assert (got[(step, "combine")]["hidden_us"], got[(step, "combine")]["exposed_us"]) == (500.0, 1000.0)
        assert got[(step, "ep_total")]["exposed_us"] == 1400.0 and got[(step, "ep_total")]["window_us"] == 7900.0
    parts = rep.tables["moe_parts"]
    assert set(zip(parts["part"], parts["rules"], strict=True)) == {
        ("dispatch", "GPU-EP-001"),
        ("combine", "GPU-EP-002"),
    }
    (cause,) = [c for c in rep.causes if c.check == "moe-ep-exposed"]
    assert cause.impact_us == 1400.0


def test_waiting_is_the_exposed_time_beyond_the_least_exposed_rank(overlap_report):
    table = overlap_report.tables["moe_ep_cost"]
    for _, rows in table.group_by("step", "part"):
        least = min(rows["exposed_us"])
        assert rows["waiting_us"].to_list() == pytest.approx([e - least for e in rows["exposed_us"]])
        assert min(rows["waiting_us"]) == 0.0
