"""NCCL collective bandwidth on the real A100 trace: bytes, algbw and busbw per kernel, from values read straight out
of the trace with the standard library."""

from __future__ import annotations

import gzip
import json
import statistics

import polars as pl
import pytest
from conftest import FIXTURES

from profan.analyses.communication import nccl
from profan.analyses.communication import section as comm_section
from profan.analyses.contract import Job
from profan.rulepack.hardware import load as load_hardware
from profan.rulepack.pack import load

NCCL = FIXTURES / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"


@pytest.fixture(scope="module")
def trace() -> dict:
    with gzip.open(NCCL, "rb") as fh:
        return json.loads(fh.read())


@pytest.fixture(scope="module")
def kernels(trace) -> pl.DataFrame:
    """The NCCL kernels as a reader would hand them over: one row per event, its index in traceEvents."""
    rows = []
    for i, e in enumerate(trace["traceEvents"]):
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and "Collective name" in a:
            rows.append(
                {
                    "event_idx": i,
                    "name": e["name"],
                    "coll_name": a["Collective name"],
                    "in_nelems": a["In msg nelems"],
                    "out_nelems": a["Out msg nelems"],
                    "dtype": a["dtype"],
                    "group_size": a["Group size"],
                    "pg_ranks": a["Process Group Ranks"],
                    "dur_us": e["dur"],
                }
            )
    return pl.DataFrame(rows)


def test_every_nccl_kernel_gets_bytes_algbw_busbw(trace, kernels):
    t = nccl.nccl_bandwidth(kernels)
    assert t.height == 21 and t["busbw_gbps"].null_count() == 0
    sizes = {"Float": 4, "Long": 8, "Int": 4, "Half": 2, "BFloat16": 2}
    for row in t.iter_rows(named=True):
        a = trace["traceEvents"][row["event_idx"]]["args"]
        n = a["Group size"]
        nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * sizes[a["dtype"]]
        algbw = nbytes / (trace["traceEvents"][row["event_idx"]]["dur"] * 1e-6) / 1e9
        factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}[a["Collective name"]]
        assert row["bytes"] == nbytes
        assert row["algbw_gbps"] == pytest.approx(algbw)
        assert row["busbw_gbps"] == pytest.approx(algbw * factor)


def test_the_issue_all_reduce(kernels):
    t = nccl.nccl_bandwidth(kernels)
    row = t.filter((pl.col("in_nelems") == 6_637_568) & (pl.col("dur_us") == 2636.669)).row(0, named=True)
    assert row["collective"] == "allreduce" and row["ranks_in_group"] == 2 and row["bus_factor"] == 1.0
    assert row["bytes"] == 6_637_568 * 4
    assert round(row["algbw_gbps"], 2) == 10.07 and round(row["busbw_gbps"], 2) == 10.07


def test_all_reduce_spread_matches_the_trace(trace, kernels):
    t = nccl.nccl_bandwidth(kernels).filter(pl.col("collective") == "allreduce")
    ev = trace["traceEvents"]
    rates = sorted(ev[i]["args"]["In msg nelems"] * 4 / ev[i]["dur"] / 1e3 for i in t["event_idx"].to_list())
    assert t.height == 15
    assert t["busbw_gbps"].min() == pytest.approx(rates[0])
    assert t["busbw_gbps"].median() == pytest.approx(statistics.median(rates))
    assert t["busbw_gbps"].max() == pytest.approx(rates[-1])
    assert (round(rates[0], 2), round(statistics.median(rates), 2), round(rates[-1], 2)) == (1.37, 5.76, 12.99)


def test_bus_factors_follow_nccl_tests():
    df = pl.DataFrame(
        {
            "event_idx": [0, 1, 2, 3, 4],
            "name": ["k"] * 5,
            "coll_name": ["_allgather_base", "reduce_scatter_tensor", "all_to_all", "allreduce", "recv"],
            "in_nelems": [1000, 8000, 8000, 1000, 1000],
            "out_nelems": [8000, 1000, 8000, 1000, 1000],
            "dtype": ["BFloat16"] * 5,
            "group_size": [8] * 5,
            "dur_us": [100.0] * 5,
        }
    )
    t = nccl.nccl_bandwidth(df)
    assert t["collective"].to_list() == ["allgather", "reducescatter", "alltoall", "allreduce", "recv"]
    assert t["bytes"].to_list() == [16000, 16000, 16000, 2000, 2000]  # totals for the gather/scatter family
    assert t["bus_factor"].to_list() == pytest.approx([7 / 8, 7 / 8, 7 / 8, 2 * 7 / 8, 1.0])


def test_findings_name_the_prior_and_the_assumption(trace, kernels):
    t = nccl.nccl_bandwidth(kernels)
    device = trace["deviceProperties"][0]["name"]
    fs = nccl.nccl_findings(t, load_hardware(), load(), device_name=device, file="nccl_data.json.gz", rank=0)
    ar = next(f for f in fs if "allreduce" in f.title)
    assert ar.metrics["link"] == "NVLink3" and ar.metrics["prior_gbps"] == 240.0
    assert "assuming the ranks share one node connected by NVLink" in ar.message
    assert ar.severity == "info"  # 13 GB/s is not called slow from this file alone
    ev = trace["traceEvents"]
    cited = ar.evidence[0].events
    assert ar.evidence[0].row_count == 15 == len(cited)
    assert all(ev[i]["args"]["Collective name"] == "allreduce" for i in cited)
    assert ar.evidence[0].values["bytes"] == sum(ev[i]["args"]["In msg nelems"] * 4 for i in cited)
    unknown = nccl.nccl_findings(t, load_hardware(), load(), device_name=None, file="x", rank=0)
    assert all(f.metrics["prior_gbps"] is None and "link unknown" in f.message for f in unknown)


def test_kineto_rank_gets_the_nccl_table_and_findings(trace, kernels):
    """Through the report section, as the pipeline calls it for a Kineto rank (kernel rows of its comm events)."""
    from profan.model.rank import RankData

    rd = RankData(
        rank=0,
        path=".",
        kind="kineto",
        rank_origin="distributedInfo.rank",
        files={"kineto_trace": "nccl_data.json.gz"},
        info={"device": trace["deviceProperties"][0]["name"]},
    )
    cpu_side = kernels.head(3).with_columns(pl.lit("cpu_op").alias("source"))  # record_param_comms twins: skipped
    rd.trace_comm = pl.concat([kernels.with_columns(pl.lit("kernel").alias("source")), cpu_side])
    sec = comm_section.section(Job([rd], load(), load_hardware(), tables={"communication": pl.DataFrame()}))
    tables, findings = sec.tables, sec.findings
    t = tables["comm_nccl"]
    assert t.height == 21 and set(t["rank"].to_list()) == {0}
    row = t.filter(pl.col("event_idx") == 16818).row(0, named=True)
    ev = trace["traceEvents"][16818]
    assert ev["args"]["In msg nelems"] == 6_637_568 and ev["dur"] == 2636.669
    assert round(row["algbw_gbps"], 2) == round(row["busbw_gbps"], 2) == 10.07
    assert row["link"] == "NVLink3" and row["prior_share"] == pytest.approx(row["busbw_gbps"] / 240.0)
    assert {f.check for f in findings} == {"nccl-bandwidth"} and len(findings) == 2


def test_two_ranks_use_the_last_arrivals_duration(trace, kernels):
    """With several ranks, a collective's transfer time is the last-arriving rank's (shortest) duration: the other
    ranks' kernels include waiting. Rank 1 here is rank 0's real trace with 1 ms of waiting added to every kernel."""
    from profan.model.rank import RankData
    from profan.ranks.collectives import _finish

    ev = trace["traceEvents"]
    ranks = []
    for rank, extra in ((0, 0.0), (1, 1000.0)):
        k = kernels.with_columns(
            pl.lit("kernel").alias("source"),
            (pl.col("dur_us") + extra).alias("dur_us"),
            pl.Series("ts_us", [float(ev[i]["ts"]) for i in kernels["event_idx"]]),
            pl.lit(None, pl.Int64).alias("step"),
        )
        colls = _finish(
            k.select(
                "step",
                pl.lit("collective").alias("kind"),
                pl.lit("0").alias("group"),
                "name",
                pl.col("ts_us").alias("start_us"),
                "dur_us",
                pl.lit(None, pl.Float64).alias("wait_us"),
                pl.lit("t.json").alias("file"),
                pl.lit("events").alias("loc_kind"),
                pl.col("event_idx").alias("loc"),
                pl.lit(None, pl.Utf8).alias("pointer"),
                pl.lit("t.json").alias("kfile"),
                pl.col("event_idx").alias("kline"),
            )
        )
        rd = RankData(
            rank=rank,
            path=f"r{rank}",
            kind="kineto",
            rank_origin="test",
            files={"kineto_trace": f"r{rank}/t.json"},
            info={"device": trace["deviceProperties"][0]["name"]},
        )
        rd.trace_comm, rd.collectives = k, colls
        ranks.append(rd)
    sec = comm_section.section(Job(ranks, load(), load_hardware(), tables={"communication": pl.DataFrame()}))
    tables, findings = sec.tables, sec.findings
    t = tables["comm_nccl"].filter(pl.col("event_idx") == 16818)
    r0, r1 = t.sort("rank").iter_rows(named=True)
    assert r0["ranks_aligned"] == r1["ranks_aligned"] == 2
    assert r0["transfer_us"] == r1["transfer_us"] == ev[16818]["dur"]  # the later rank waited for nobody
    assert r1["dur_us"] == pytest.approx(ev[16818]["dur"] + 1000.0)
    assert round(r1["busbw_transfer_gbps"], 2) == 10.07 and r1["busbw_gbps"] < 10.07
    ar = next(f for f in findings if f.rank == 1 and "allreduce" in f.title)
    assert "last-arriving rank" in ar.message
    assert ar.metrics["busbw_max_gbps"] == pytest.approx(
        tables["comm_nccl"].filter((pl.col("rank") == 0) & (pl.col("collective") == "allreduce"))["busbw_gbps"].max()
    )


def test_group_size_falls_back_to_the_process_group_then_world_size(kernels):
    full = nccl.nccl_bandwidth(kernels)
    no_size = nccl.nccl_bandwidth(kernels.drop("group_size"))  # "Process Group Ranks": "[0, 1]"
    assert no_size["ranks_in_group"].to_list() == full["ranks_in_group"].to_list() == [2.0] * 21
    bare = kernels.drop("group_size", "pg_ranks")
    unknown = nccl.nccl_bandwidth(bare)  # n unknown: no all-reduce bus factor (broadcast's is 1 for any n)
    assert unknown["busbw_gbps"].null_count() == int((kernels["coll_name"] == "allreduce").sum()) == 15
    world = nccl.nccl_bandwidth(bare, world_size=2)  # distributedInfo.world_size of this trace
    assert world["busbw_gbps"].to_list() == pytest.approx(full["busbw_gbps"].to_list())
