"""Expert load from tokens on real CPU/gloo MoE runs (fixtures/torch/gloo_moe_seeds, bench/gloo_moe.py): the
counts equal the generator's own token truth and the rows summed here from the raw events; every hot seed names
its rank and expert, no balanced seed gets an imbalance finding at warning or above."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import tomllib

import profan

SEEDS = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "gloo_moe_seeds"
RUNS = sorted(p.name for p in SEEDS.iterdir() if p.is_dir())


def truth(run: str) -> dict:
    return tomllib.loads((SEEDS / run / "ground_truth.toml").read_text())


def raw_expert_rows(run: str) -> dict[int, int]:
    """Per expert: rows of the first aten::linear inside each expert_<id> range, from the raw JSON (profiled
    steps only: inside a ProfilerStep annotation)."""
    out: dict[int, int] = {}
    for trace in sorted((SEEDS / run).glob("rank*.pt.trace.json.gz")):
        ev = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
        ranges = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("expert_")]
        linears = sorted((e for e in ev if e["name"] == "aten::linear"), key=lambda e: e["ts"])
        for r in ranges:
            if not any(a <= r["ts"] < b for a, b in steps):
                continue
            first = next(x for x in linears if x["tid"] == r["tid"] and r["ts"] <= x["ts"] < r["ts"] + r["dur"])
            expert = int(r["name"].split("_")[1])
            out[expert] = out.get(expert, 0) + first["args"]["Input Dims"][0][0]
    return out


@pytest.mark.parametrize("run", RUNS)
def test_tokens_match_truth_and_raw_events(run):
    rep = profan.analyze(SEEDS / run)
    t = truth(run)
    want_rank = [sum(t["tokens"][s]["rank"][r] for s in t["tokens"]) for r in range(t["ranks"])]
    want_expert = {e: sum(sum(layer[e] for layer in t["tokens"][s]["expert"]) for s in t["tokens"]) for e in range(8)}
    tab = rep.tables["moe_balance"]
    assert tab.sort("rank")["tokens"].to_list() == want_rank
    assert raw_expert_rows(run) == want_expert
    moe = [f for f in rep.ungrouped() if f.check == "moe-expert-imbalance"]
    if t["fault"] == "none":
        assert not [f for f in moe if f.severity in ("warning", "critical")]
    else:
        (f,) = moe
        assert f.metrics["metric"] == "tokens"
        assert (f.rank, f.metrics["hot_expert"]) == (t["fault_rank"], t["hot_expert"])
        assert {int(k): v for k, v in f.metrics["expert_tokens"].items()} == want_expert
