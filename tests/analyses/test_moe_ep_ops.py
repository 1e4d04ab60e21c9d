"""Each EP all-to-all of a real CPU/gloo MoE run split into waiting for the last rank and transfer, with its bytes,
checked against a computation written here from the raw trace events: the k-th gloo:all_to_all of a step on each
rank, its start against the latest start of that op over the ranks; bytes from the k-th c10d::alltoall_base_'s
input tensor (``Input Dims``, float32)."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from conftest import TORCH

import profan
from profan.model.textfmt import ms

OVERLAP = TORCH / "gloo_moe_ep_overlap"


@pytest.fixture(scope="module")
def report():
    return profan.analyze(OVERLAP)


def _raw(rank: int, step: int) -> tuple[list[dict], list[dict]]:
    """The step's gloo:all_to_all and c10d::alltoall_base_ events of one rank, each in start order."""
    events = json.loads(gzip.decompress((OVERLAP / f"rank{rank}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    (window,) = [e for e in events if e.get("name") == f"ProfilerStep#{step}"]
    inside = [e for e in events if e.get("ph") == "X" and window["ts"] <= e["ts"] < window["ts"] + window["dur"]]
    runs = sorted((e for e in inside if e["name"] == "gloo:all_to_all"), key=lambda e: e["ts"])
    ops = sorted((e for e in inside if e["name"] == "c10d::alltoall_base_"), key=lambda e: e["ts"])
    return runs, ops


def _expected(step: int) -> dict[tuple[int, int], tuple[float, float, int | None]]:
    """(rank, seq) -> (waiting, transfer, bytes sent) from the raw events."""
    raw = {rank: _raw(rank, step) for rank in range(4)}
    out = {}
    for seq in range(len(raw[0][0])):
        last = max(raw[rank][0][seq]["ts"] for rank in raw)
        for rank, (runs, ops) in raw.items():
            run, dims = runs[seq], ops[seq]["args"]["Input Dims"][1]
            waiting = min(max(last - run["ts"], 0.0), run["dur"])
            sent = dims[0] * dims[1] * 4 if len(dims) == 2 else None
            out[(rank, seq)] = (waiting, run["dur"] - waiting, sent)
    return out


@pytest.mark.parametrize("step", [2, 3])
def test_waiting_and_transfer_of_each_op_are_the_raw_events(report, step):
    table = report.tables["moe_ep_ops"].filter(pl.col("step") == step)
    expected = _expected(step)
    assert table.height == len(expected) == 40  # 10 all-to-alls per step on each of 4 ranks
    for row in table.iter_rows(named=True):
        waiting, transfer, sent = expected[(row["rank"], row["seq"])]
        assert row["name"] == "gloo:all_to_all" and row["present"] == 4
        assert row["waiting_us"] == pytest.approx(waiting, abs=1e-3)
        assert row["transfer_us"] == pytest.approx(transfer, abs=1e-3)
        assert row["bytes"] == sent
        if sent and transfer > 0:
            assert row["gbps"] == pytest.approx(sent / transfer / 1e3, rel=1e-4)
    # the last-arriving rank of each op never waits, and every other rank waits until it came
    last = table.filter(pl.col("rank") == pl.col("last_rank"))
    assert last["waiting_us"].max() == 0.0 and last.height == 10


def test_cpu_capture_has_no_link_prior_and_says_so(report):
    table = report.tables["moe_ep_ops"]
    assert table["prior_gbps"].null_count() == table.height
    assert table["link"].str.starts_with("link unknown").all()


def test_exposed_ep_cause_says_how_much_is_waiting(report):
    """The cause's least exposed rank (rank 1: 43.0 ms) and its waiting / transfer per step, from the raw events."""
    (cause,) = [c for c in report.causes if c.check == "moe-ep-exposed"]
    per_step = [_expected(step) for step in (2, 3)]
    waiting = sum(v[0] for s in per_step for (rank, _), v in s.items() if rank == 1) / 2
    transfer = sum(v[1] for s in per_step for (rank, _), v in s.items() if rank == 1) / 2
    assert f"{ms(waiting)} is waiting for the last rank" in cause.assumption
    assert f"{ms(transfer)} the exchange itself" in cause.assumption
    assert 0.3 < waiting / (waiting + transfer) < 0.5
