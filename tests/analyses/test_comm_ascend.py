"""Communication on the real Ascend samples: per-op bandwidth and wait/transit split for every rank, both matrix
shapes with group-local ranks resolved, exposed communication, small packets — each figure checked against values
read straight from the JSON with the standard library."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import ASCEND, QWEN3, analysed, run_cli

import profan
from profan.model.errors import ProfanInputError
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.ascend_text import matrix as ascend_matrix
from profan.sources.ascend_text import meta as ascend_meta
from profan.sources.common.readback import resolve_pointer

ALEXNET2 = ASCEND / "msinsight-alexnet-2rank-2025/level2"
GPT3 = ASCEND / "msinsight-gpt3-2rank-2023"
OUT = "ASCEND_PROFILER_OUTPUT"


def _json(path: Path):
    return json.loads(path.read_bytes())


def _ops(doc: dict):
    """(step key, kind, op key, op body) for every real op (Total Op Info excluded)."""
    for step, sections in doc.items():
        for kind, entries in sections.items():
            for op, body in entries.items():
                if op != "Total Op Info":
                    yield step, kind, op, body


@pytest.fixture(scope="module")
def alexnet2_report():
    return analysed(ALEXNET2)


# ------------------------------------------------------------------------------------------- qwen3: per op


def test_every_qwen3_rank_has_per_op_bandwidth_for_each_transport(qwen3_report):
    tt = qwen3_report.tables["comm_bandwidth"]
    assert sorted(tt["rank"].unique().to_list()) == [0, 1, 2, 3]
    for rank in range(4):
        d = next(QWEN3.glob(f"rank_{rank}_ascend_pt"))
        doc = _json(d / OUT / "communication.json")
        expect = {
            (op, tr): (b["Transit Size(MB)"], b["Transit Time(ms)"])
            for _, _, op, body in _ops(doc)
            for tr, b in body["Communication Bandwidth Info"].items()
            if b["Transit Size(MB)"] > 0 and b["Transit Time(ms)"] > 0
        }
        got = tt.filter(pl.col("rank") == rank)
        assert got.height == len(expect)
        for row in got.iter_rows(named=True):
            size, t = expect[(row["op"], row["transport"])]
            assert row["size_mb"] == size and row["time_ms"] == t
            assert row["bandwidth_gbps"] == pytest.approx(size / t)
            raw = resolve_pointer(doc, row["pointer"])
            assert raw["Transit Size(MB)"] == size and row["pointer"].endswith("/" + row["transport"])
            assert row["is_link"] == (row["transport"] != "SDMA")
        assert set(got["transport"].to_list()) == {"HCCS", "SDMA"}


def test_qwen3_reduce_scatter_rate_from_the_json(qwen3_report):
    doc = _json(QWEN3 / "rank_2_ascend_pt" / OUT / "communication.json")
    b = doc["step13"]["collective"]["hcom_reduceScatter__691_4_1@5862276123280252691"]["Communication Bandwidth Info"]
    row = qwen3_report.tables["comm_bandwidth"].filter(
        (pl.col("rank") == 2) & (pl.col("op_name") == "hcom_reduceScatter__691_4_1") & (pl.col("transport") == "HCCS")
    )
    assert row["bandwidth_gbps"][0] == pytest.approx(b["HCCS"]["Transit Size(MB)"] / b["HCCS"]["Transit Time(ms)"])
    assert row["bandwidth_gbps"][0] == pytest.approx(18.670, abs=1e-3)
    assert row["group_name"][0] == "dp_cp"  # group hash resolved through parallel_group_info


def test_qwen3_wait_transit_split_every_rank_without_double_counting(qwen3_report):
    comm = qwen3_report.tables["communication"]
    assert sorted(comm["rank"].unique().to_list()) == [0, 1, 2, 3]
    for rank in range(4):
        doc = _json(QWEN3 / f"rank_{rank}_ascend_pt" / OUT / "communication.json")
        got = {r["op"]: r for r in comm.filter(pl.col("rank") == rank).iter_rows(named=True)}
        total_hccs = 0.0
        for _, _, op, body in _ops(doc):
            t, bw = body["Communication Time Info"], body["Communication Bandwidth Info"]
            row = got[op]
            assert row["elapse_ms"] == t["Elapse Time(ms)"] and row["wait_ms"] == t["Wait Time(ms)"]
            hccs = bw["HCCS"]["Transit Size(MB)"]
            total_hccs += hccs
            # SDMA repeats the HCCS transfer: the op moved the HCCS bytes once, not twice
            assert bw["SDMA"]["Transit Size(MB)"] == hccs
            assert row["size_mb"] == pytest.approx(hccs)
            if t["Transit Time(ms)"] == 0 and bw["HCCS"]["Transit Time(ms)"] > 0:  # the source quirk
                assert row["transfer_source"] == "bandwidth info"
                assert row["transfer_ms"] == pytest.approx(min(bw["HCCS"]["Transit Time(ms)"], t["Elapse Time(ms)"]))
            else:
                assert row["transfer_ms"] == t["Transit Time(ms)"]
        assert total_hccs == pytest.approx(1766.55, abs=0.01)  # anchor: every rank moves 1 766.6 MB


def test_qwen3_group_hashes_resolve_to_global_ranks(qwen3_report):
    meta = _json(QWEN3 / "rank_0_ascend_pt" / "profiler_metadata.json")["parallel_group_info"]
    assert ascend_meta.double_hash("group_name_19") == 3985310405473756128  # format reference §1.2, verified
    comm = qwen3_report.tables["communication"].filter(pl.col("rank") == 0)
    pp = comm.filter(pl.col("op_name").str.starts_with("hcom_batchSendRecv"))
    assert set(pp["group_name"].to_list()) == {meta["group_name_19"]["group_name"]} == {"pp"}
    assert set(pp["group_ranks"].to_list()) == {"0,2"}


# ---------------------------------------------------------------------------------------------- matrices


def _raw_links(doc: dict) -> dict[str, dict]:
    out = {}
    for step, sections in doc.items():
        for kind, entries in sections.items():
            for key, links in entries.items():
                if key == "Total Op Info":
                    continue
                for link, v in links.items():
                    out[f"/{step}/{kind}/{key}/{link}"] = v
    return out


def test_aggregated_matrix_maps_group_local_ranks(tmp_path):
    d = QWEN3 / "rank_1_ascend_pt"
    links, skipped = ascend_matrix.read(d / OUT / "communication_matrix.json")
    meta = ascend_meta.read_metadata(d / "profiler_metadata.json")
    m = ascend_matrix.map_ranks(links, meta)
    raw = _raw_links(_json(d / OUT / "communication_matrix.json"))
    assert skipped == 0 and m.height == len(raw)
    assert set(m["shape"].to_list()) == {"aggregated"}
    groups = {
        str(ascend_meta.double_hash(k)): sorted(g["global_ranks"])
        for k, g in _json(d / "profiler_metadata.json")["parallel_group_info"].items()
    }
    for row in m.iter_rows(named=True):
        v = raw[row["pointer"]]
        assert (row["transport"], row["size_mb"], row["time_ms"]) == (
            v["Transport Type"],
            v["Transit Size(MB)"],
            v["Transit Time(ms)"],
        )
        src, dst = (int(x) for x in row["pointer"].rsplit("/", 1)[1].split("-"))
        assert row["src_rank"] == groups[row["group_hash"]][src] and row["dst_rank"] == groups[row["group_hash"]][dst]
    # rank 1 is local 1 of dp_cp [0, 1] (reduce-scatter shows as torch_npu's "reduce") and local 0 of embd [1, 3]
    rs = m.filter((pl.col("op_type") == "reduce") & (pl.col("rank_class") == "total") & (pl.col("transport") == "HCCS"))
    assert rs.select("group_name", "src_rank", "dst_rank").row(0) == ("dp_cp", 1, 0)
    emb = m.filter(
        (pl.col("group_name") == "embd") & (pl.col("rank_class") == "total") & (pl.col("transport") == "HCCS")
    )
    assert emb.select("src_rank", "dst_rank").row(0) == (1, 3)


def test_per_op_matrix_without_metadata_keeps_local_ranks():
    path = GPT3 / "test_rank_0" / OUT / "communication_matrix.json"
    links, skipped = ascend_matrix.read(path)
    raw = _raw_links(_json(path))
    assert skipped == 0 and links.height == len(raw)
    assert set(links["shape"].to_list()) == {"per-op"}
    m = ascend_matrix.map_ranks(links, None)
    assert m["src_rank"].null_count() == m.height  # no parallel_group_info: global ranks unknown, not guessed
    rs = m.filter(pl.col("op_name") == "hcom_reduceScatter__483_4")
    assert set(rs["op_type"].to_list()) == {"reduce"}
    rdma = m.filter(pl.col("transport") == "RDMA").sort("size_mb", descending=True).row(0, named=True)
    assert rdma["size_mb"] == raw[rdma["pointer"]]["Transit Size(MB)"] == 131.072


@pytest.mark.parametrize(
    "folder",
    ["msinsight-alexnet-2rank-2025/level1", "msinsight-alexnet-2rank-2025/level2", "msinsight-gpt3-2rank-2023"],
)
def test_slow_link_analysis_runs_on_both_shapes(folder):
    rep = analysed(ASCEND / folder)
    links = rep.tables["comm_links"]
    assert sorted(links["rank"].unique().to_list()) == [0, 1]
    assert "LOCAL" not in links["transport"].to_list()
    assert not [f for f in rep.ungrouped() if f.check == "comm-slow-link"]  # real links are even: none is slow
    judged = links.filter(pl.col("in_class") & (pl.col("peers") >= 3))
    assert judged.height > 0 and judged["peer_ratio"].min() > 0.75


def _copy(src: Path, tmp: Path) -> Path:
    dst = tmp / src.name
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def _slow_and_peers(root: Path, f):
    slow = [
        (ev, resolve_pointer(_json(root / ev.file), p))
        for ev in f.evidence
        if ev.note == "the slow link"
        for p in ev.pointers
    ]
    peers = [
        resolve_pointer(_json(root / ev.file), p)
        for ev in f.evidence
        if ev.note != "the slow link"
        for p in ev.pointers
    ]
    return slow, peers


def _rate(entries) -> float:
    return sum(e["Transit Size(MB)"] for e in entries) / sum(e["Transit Time(ms)"] for e in entries)


def test_injected_slow_link_is_named_aggregated(tmp_path):
    root = _copy(ALEXNET2, tmp_path)
    path = root / "rank0_ascend_pt" / OUT / "communication_matrix.json"
    doc = _json(path)
    key = "allreduce-total@11022204950826225271"
    doc["step50"]["collective"][key]["0-5"]["Transit Time(ms)"] *= 2.5
    path.write_text(json.dumps(doc))
    rep = profan.analyze(root)
    (f,) = [f for f in rep.ungrouped() if f.check == "comm-slow-link"]
    assert f.rank == 0 and "0 ↔ 5" in f.title and "HCCS" in f.title
    slow, peers = _slow_and_peers(root, f)
    assert [ev.pointers for ev, _ in slow] == [(f"/step50/collective/{key}/0-5",)]
    assert f.metrics["bandwidth_gbps"] == pytest.approx(_rate([v for _, v in slow]), rel=1e-4)
    rates = sorted(_rate([p]) for p in peers)
    assert len(rates) == f.metrics["peers"] == 14
    assert f.metrics["peer_median_gbps"] == pytest.approx((rates[6] + rates[7]) / 2, rel=1e-4)


def test_injected_slow_link_is_named_per_op(tmp_path):
    root = _copy(GPT3, tmp_path)
    path = root / "test_rank_0" / OUT / "communication_matrix.json"
    doc = _json(path)
    ops = [k for k in doc["step2"]["collective"] if k.startswith("hcom_allGather__483_")]
    for k in ops:  # a degraded 0 → 3 link: every all-gather over it takes 3x as long
        if "0-3" in doc["step2"]["collective"][k]:
            doc["step2"]["collective"][k]["0-3"]["Transit Time(ms)"] *= 3
    path.write_text(json.dumps(doc))
    rep = profan.analyze(root)
    (f,) = [f for f in rep.ungrouped() if f.check == "comm-slow-link"]
    assert "0 ↔ 3" in f.title and f.rank == 0
    slow, _ = _slow_and_peers(root, f)
    assert len(slow) >= 8  # the per-op entries summed into this link
    assert all(p.endswith("/0-3") for ev, _ in slow for p in ev.pointers)
    assert f.metrics["bandwidth_gbps"] == pytest.approx(_rate([v for _, v in slow]), rel=1e-4)


def test_slow_link_in_a_two_rank_group_is_judged_across_groups(tmp_path):
    """qwen3's groups have one link per rank pair: too few peers inside the group, so the link is compared with the
    same transport, op type and size class in the job's other groups (here the other embedding group's links)."""
    root = _copy(QWEN3, tmp_path)
    path = root / "rank_0_ascend_pt" / OUT / "communication_matrix.json"
    doc = _json(path)
    key = "allreduce-total@3985310491373102170"  # embd group [0, 2]: local 0 -> 1 is rank 0 -> rank 2
    doc["step13"]["collective"][key]["0-1"]["Transit Time(ms)"] *= 3
    path.write_text(json.dumps(doc))
    rep = profan.analyze(root)
    (f,) = [f for f in rep.ungrouped() if f.check == "comm-slow-link"]
    assert "rank 0 ↔ rank 2" in f.title and "its own has too few links" in f.message
    slow, peers = _slow_and_peers(root, f)
    assert [p for ev, _ in slow for p in ev.pointers] == [f"/step13/collective/{key}/0-1"]
    rates = sorted(_rate([p]) for p in peers)
    assert len(rates) == f.metrics["peers"] == 4  # both embd groups, both directions, itself included
    assert f.metrics["peer_median_gbps"] == pytest.approx((rates[1] + rates[2]) / 2, rel=1e-4)
    assert f.metrics["bandwidth_gbps"] == pytest.approx(_rate([v for _, v in slow]), rel=1e-4)


def test_synthetic_cluster_slow_link_is_named(tmp_path):
    from profan.synth import generate

    truth = generate(tmp_path / "syn", ranks=8, slow_link=(2, 5))
    rep = profan.analyze(tmp_path / "syn")
    fs = [f for f in rep.ungrouped() if f.check == "comm-slow-link"]
    assert len(fs) == 1  # one link, one finding (both directions, every op type and step it slows)
    (f,) = fs
    assert "rank 2 ↔ rank 5" in f.title
    a, b = truth["slow_link"]["ranks"]
    slow, peers = _slow_and_peers(tmp_path / "syn", f)
    assert {ev.file.split("/")[0] for ev, _ in slow} == {r["path"] for r in rep.source["ranks"] if r["rank"] in (a, b)}
    # the injected factor is what the cited rows show: slow rate / median peer rate = 1 / factor
    rates = sorted(_rate([p]) for p in peers)
    med = (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2 if len(rates) % 2 == 0 else rates[len(rates) // 2]
    assert _rate([v for _, v in slow]) / med == pytest.approx(1 / truth["slow_link"]["factor"], rel=0.02)


# ------------------------------------------------------------------------------ alexnet: exposed = waiting


def test_alexnet_exposed_communication_is_waiting_not_transfer(alexnet2_report):
    f = next(f for f in alexnet2_report.ungrouped() if f.check == "comm-exposed-split" and f.rank == 0)
    doc = _json(ALEXNET2 / "rank0_ascend_pt" / OUT / "communication.json")
    times = [b["Communication Time Info"] for _, _, _, b in _ops(doc)]
    assert f.metrics["transfer_ms"] == pytest.approx(sum(t["Transit Time(ms)"] for t in times))
    assert f.metrics["idle_ms"] == pytest.approx(sum(t["Idle Time(ms)"] for t in times))
    assert f.metrics["transfer_ms"] == pytest.approx(4.04, abs=0.01)  # anchor: transit ≈ 4 ms …
    assert f.metrics["idle_ms"] == pytest.approx(93.2, abs=0.1)  # … vs idle ≈ 93 ms
    step_line = (ALEXNET2 / f.evidence[0].file).read_text().splitlines()[f.evidence[0].lines[0] - 1]
    header = (ALEXNET2 / f.evidence[0].file).read_text().splitlines()[0].split(",")
    exposed = float(step_line.split(",")[header.index("Communication(Not Overlapped)")].strip())
    assert f.metrics["comm_not_overlapped_us"] == pytest.approx(exposed)
    assert "waiting for peers, not transfer" in f.message and f.severity == "critical"  # 73.9% ≥ 40%
    assert "73.9%" in f.message
    assert "95.4 ms waiting for peer 5" in f.message and f.evidence[-1].select["dst_rank"] == 5


def test_alexnet_wait_dominated_allreduce(alexnet2_report):
    f = next(f for f in alexnet2_report.ungrouped() if f.check == "comm-wait-dominated" and f.rank == 0)
    assert f.evidence[0].pointers[0] == "/step50/collective/hcom_allReduce__271_0_1@11022204950826225271"
    doc = _json(ALEXNET2 / "rank0_ascend_pt" / OUT / "communication.json")
    waiting = 0.0
    for p in f.evidence[0].pointers:
        t = resolve_pointer(doc, p)["Communication Time Info"]
        waiting += t["Elapse Time(ms)"] - t["Transit Time(ms)"]
    assert f.metrics["waiting_ms"] == pytest.approx(waiting)
    assert "straggler" in f.message


def test_alexnet_small_packets_from_size_distribution(alexnet2_report):
    pt = alexnet2_report.tables["comm_packets"].filter(pl.col("rank") == 0).row(0, named=True)
    doc = _json(ALEXNET2 / "rank0_ascend_pt" / OUT / "communication.json")
    small = large = 0
    small_mb = small_t = 0.0
    for _, _, _, body in _ops(doc):
        for size, (cnt, t) in body["Communication Bandwidth Info"]["HCCS"]["Size Distribution"].items():
            if float(size) < 16:
                small += cnt
                small_mb += float(size) * cnt
                small_t += t
            else:
                large += cnt
    assert (pt["transport"], pt["transfers"], pt["small_transfers"]) == ("HCCS", small + large, small)
    assert pt["small_mb"] == pytest.approx(small_mb) and pt["small_time_ms"] == pytest.approx(small_t)
    f = next(f for f in alexnet2_report.ungrouped() if f.check == "comm-small-packets" and f.rank == 0)
    cited = [resolve_pointer(doc, p)["Size Distribution"] for p in f.evidence[0].pointers]
    assert f.evidence[0].row_count == len(cited) == len(f.evidence[0].pointers)
    assert sum(t for c in cited for size, (_, t) in c.items() if float(size) < 16) == pytest.approx(small_t)
    assert f.evidence[0].values["small_time_ms"] == pytest.approx(small_t)


# ----------------------------------------------------------------------------------------------- priors


def test_no_prior_without_a_known_device(qwen3_report):
    assert (
        qwen3_report.tables["comm_bandwidth"]["prior_gbps"].null_count() == qwen3_report.tables["comm_bandwidth"].height
    )
    assert any("no absolute link-bandwidth prior" in n for n in qwen3_report.notes)
    assert not [f for f in qwen3_report.ungrouped() if f.check == "comm-below-prior"]


def test_assumed_device_applies_the_prior_and_cites_the_transfers(tmp_path):
    hw = tmp_path / "hw.toml"
    hw.write_text('[assume]\ndevice = "ascend_910b"\n')
    rep = profan.analyze(QWEN3, hardware=hw)
    tt = rep.tables["comm_bandwidth"].filter(pl.col("transport") == "HCCS")
    assert set(tt["prior_gbps"].to_list()) == {28.0}  # 910B HCCS, msprof's standard
    assert tt["prior_share"].to_list() == pytest.approx((tt["bandwidth_gbps"] / 28.0).to_list())
    assert rep.tables["comm_bandwidth"].filter(pl.col("transport") == "SDMA")["prior_gbps"].null_count() > 0
    links = rep.tables["comm_links"]
    assert set(links["prior_gbps"].to_list()) == {28.0}  # matrix links (HCCS only here) get the same prior
    assert links["prior_share"].to_list() == pytest.approx((links["bandwidth_gbps"] / 28.0).to_list())
    fs = [f for f in rep.ungrouped() if f.check == "comm-below-prior"]
    assert sorted(f.rank for f in fs) == [0, 1, 2, 3]
    f = next(f for f in fs if f.rank == 2)
    doc = _json(QWEN3 / f.evidence[0].file)
    cited = [resolve_pointer(doc, p) for p in f.evidence[0].pointers]
    assert len(cited) == f.evidence[0].row_count == 5 and all(c["Transit Size(MB)"] >= 16 for c in cited)
    bw = sum(c["Transit Size(MB)"] for c in cited) / sum(c["Transit Time(ms)"] for c in cited)
    assert f.metrics["bandwidth_gbps"] == pytest.approx(bw, rel=1e-4)
    assert "ascend_910b HCCS 28 GB/s" in f.message
    assert any("assumed by" in n for n in rep.notes)


def test_user_figure_overrides_builtin_prior(tmp_path):
    hw = tmp_path / "hw.toml"
    hw.write_text(
        '[assume]\ndevice = "ascend_910b"\n\n[[link]]\ndevice = "ascend_910b"\nlink = "HCCS"\n'
        'usable_gbps = 20.0\nsource = "site measurement"\n'
    )
    rep = profan.analyze(QWEN3, hardware=hw)
    assert set(rep.tables["comm_bandwidth"].filter(pl.col("transport") == "HCCS")["prior_gbps"].to_list()) == {20.0}
    assert not [f for f in rep.ungrouped() if f.check == "comm-below-prior"]  # ~19 GB/s is 95% of 20


def test_cli_hardware_option_and_bad_file(tmp_path):
    hw = tmp_path / "hw.toml"
    hw.write_text('[assume]\ndevice = "ascend_910b"\n')
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(QWEN3), "--hardware", str(hw), "-f", "json", "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert any(f["check"] == "comm-below-prior" for f in doc["findings"])
    bad = tmp_path / "bad.toml"
    bad.write_text('[assume]\ndevice = "ascend_999"\n')
    res = run_cli("analyze", str(QWEN3), "--hardware", str(bad), "-q")
    assert res.returncode == 2 and "ascend_999" in res.stderr and "Traceback" not in res.stderr


# ------------------------------------------------------------------------------------- evidence walk


@pytest.mark.parametrize(
    "folder",
    [
        "msinsight-qwen3-4rank-2025q4",
        "msinsight-alexnet-2rank-2025/level1",
        "msinsight-alexnet-2rank-2025/level2",
        "msinsight-gpt3-2rank-2023",
    ],
)
def test_every_communication_number_is_reproducible_from_cited_rows(folder):
    root = ASCEND / folder
    rep = profan.analyze(root)
    comm = [f for f in rep.ungrouped() if f.check.startswith("comm")]
    assert comm
    for f in comm:
        for ev in f.evidence:
            if ev.lines:
                continue  # step_trace rows: checked by the generic evidence walk
            doc = _json(root / ev.file)
            if ev.events:  # trace_view HCCL plane tasks: every waited task is cited, and they sum to the claim
                cited = [doc[i] for i in ev.events]
                assert len(cited) == ev.row_count
                assert all(
                    c["name"] == ev.select["task"] and c["args"]["dst rank"] == ev.select["dst_rank"] for c in cited
                )
                assert sum(float(c["dur"]) for c in cited) == pytest.approx(ev.values["wait_us"], abs=1e-3)
                continue
            nodes = [resolve_pointer(doc, p) for p in ev.pointers]
            if ev.select.get("step") is not None:
                assert all(p.startswith(f"/step{ev.select['step']}/") for p in ev.pointers)
            if ev.row_count > len(ev.pointers):  # truncated: the select re-finds every row of the step
                assert ev.select.get("source") == "communication" and "step" in ev.select
                nodes = [b for s, _, _, b in _ops(doc) if s == f"step{ev.select['step']}"]
                assert len(nodes) == ev.row_count
            if "elapse_ms" in ev.values:
                assert sum(n["Communication Time Info"]["Elapse Time(ms)"] for n in nodes) == pytest.approx(
                    ev.values["elapse_ms"], abs=1e-5
                )
            if "wait_ms" in ev.values:
                assert sum(n["Communication Time Info"]["Wait Time(ms)"] for n in nodes) == pytest.approx(
                    ev.values["wait_ms"], abs=1e-5
                )
            if "size_mb" in ev.values:
                assert sum(n["Transit Size(MB)"] for n in nodes) == pytest.approx(ev.values["size_mb"], abs=1e-5)
                assert sum(n["Transit Time(ms)"] for n in nodes) == pytest.approx(ev.values["time_ms"], abs=1e-5)


# ------------------------------------------------------------------------- trace_view HCCL plane tasks


def _hccl_plane_events(path: Path) -> list[tuple[int, dict, str]]:
    ev = _json(path)
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    return [
        (i, e, threads.get((e["pid"], e["tid"]), ""))
        for i, e in enumerate(ev)
        if e.get("ph") == "X"
        and procs.get(e["pid"]) in ("HCCL", "Communication")
        and threads.get((e["pid"], e["tid"]), "").startswith("Plane ")
    ]


@pytest.mark.parametrize("rank", [0, 1])
def test_alexnet_hccl_planes_per_link_type(alexnet2_report, rank):
    tv = ALEXNET2 / f"rank{rank}_ascend_pt" / OUT / "trace_view.json"
    data = [
        e
        for _, e, _ in _hccl_plane_events(tv)
        if e["args"]["link type"] not in ("ON_CHIP", "INVALID_TYPE") and e["args"]["size(Byte)"] > 0
    ]
    row = alexnet2_report.tables["comm_hccl_links"].filter(pl.col("rank") == rank).row(0, named=True)
    assert (row["link_type"], row["transport_type"]) == ("HCCS", "SDMA")
    assert row["tasks"] == len(data) and row["bytes"] == sum(e["args"]["size(Byte)"] for e in data)
    assert row["time_us"] == pytest.approx(sum(float(e["dur"]) for e in data))
    # the same transfers as communication.json's HCCS totals (Total Op Info): 427.6 MB at ~15 GB/s
    total = _json(ALEXNET2 / f"rank{rank}_ascend_pt" / OUT / "communication.json")["step50"]["collective"][
        "Total Op Info"
    ]["Communication Bandwidth Info"]["HCCS"]
    assert row["bytes"] / 1e6 == pytest.approx(total["Transit Size(MB)"])
    assert row["bandwidth_gbps"] == pytest.approx(total["Transit Size(MB)"] / total["Transit Time(ms)"], rel=1e-6)


@pytest.mark.parametrize(("rank", "wait_ms"), [(0, 95.4), (1, 92.9)])
def test_alexnet_waited_peer_is_rank_5(alexnet2_report, rank, wait_ms):
    """Both captured ranks wait ~93-95 ms in Notify_Wait for peer 5, which is not in the capture (anchor §2)."""
    f = next(f for f in alexnet2_report.ungrouped() if f.check == "comm-waited-peer" and f.rank == rank)
    tv = ALEXNET2 / f"rank{rank}_ascend_pt" / OUT / "trace_view.json"
    waits = {i: e for i, e, _ in _hccl_plane_events(tv) if e["name"] == "Notify_Wait"}
    to5 = {i: e for i, e in waits.items() if e["args"]["dst rank"] == 5}
    assert f.metrics["peer"] == 5 and "not in this capture" in f.message
    assert set(f.evidence[0].events) == set(to5) and f.evidence[0].row_count == len(to5)
    total = sum(float(e["dur"]) for e in to5.values())
    assert f.metrics["wait_us"] == pytest.approx(total, abs=1e-3)
    assert total / 1000 == pytest.approx(wait_ms, abs=0.05)
    assert f.metrics["share"] == pytest.approx(total / sum(float(e["dur"]) for e in waits.values()), abs=1e-4)


def test_npu_model_detected_from_msprof_info_json():
    root = ASCEND / "vllm-ascend-msprof-gmm-1op"
    (info,) = root.glob("PROF_*/device_*/info.json.*")
    assert _json(info)["platform_version"] == "5"  # msprof's chip id 5 = Ascend910B
    rep = profan.analyze(root)
    row = rep.tables["comm_devices"].row(0, named=True)
    assert row["device"] == "ascend_910b" and "platform_version 5" in row["detected_by"]


def test_hardware_files_carry_a_source_for_every_figure():
    from profan.rulepack.hardware import load as load_hardware

    hw = load_hardware()
    assert {"ascend_910b", "nvidia_a100", "nvidia_h100"} <= set(hw.devices)
    for p in hw.links.values():
        assert p.source and (p.usable_gbps or p.peak_gbps), p
    assert hw.prior("ascend_910b", "HCCS").usable_gbps == 28.0 and hw.prior("nvidia_a100", "NVLink3").usable_gbps == 240
    assert hw.prior("nvidia_a100", "PCIe4").usable_gbps == 24.0  # device-independent entries apply to any device


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[links]]\ndevice = "ascend_910b"\nlink = "HCCS"\nusable_gbps = 25.0\n', "unknown top-level key(s) links"),
        (
            '[[link]]\ndevice = "ascend_910b"\nlink = "HCCS"\nusable_gpbs = 25.0\n',
            "unknown [[link]] key(s) usable_gpbs",
        ),
        ('[[link]]\ndevice = "ascend_910b"\nlink = "HCCS"\nusable_gbps = "fast"\n', "must be a positive number"),
        ("[assume\n", "invalid TOML"),
    ],
)
def test_bad_hardware_file_is_one_line_error(tmp_path, text, says):
    hw = tmp_path / "hw.toml"
    hw.write_text(text)
    res = run_cli("analyze", str(ALEXNET2), "--hardware", str(hw), "-q")
    assert res.returncode == 2 and says in res.stderr and str(hw) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_matrix_read_for_totals_counts_what_a_full_read_counts(tmp_path):
    """`read_for_totals` builds rows only for the entries the link totals read, but counts every entry as a full
    read does — on the real matrices (aggregated and per-op) and on a copy with bad link keys and a bad link
    object in a top1 entry and in a total entry."""
    import json

    from profan.sources.ascend_text.matrix import link_totals, map_ranks, read, read_for_totals

    files = [QWEN3 / f"rank_{r}_ascend_pt" / OUT / "communication_matrix.json" for r in range(4)]
    files.append(GPT3 / "test_rank_0" / OUT / "communication_matrix.json")
    doc = json.loads(files[0].read_text())
    spoiled = 0
    for sec in doc.values():
        for items in sec.values():
            for key, links in items.items():
                if "-top1@" in key or "-total@" in key:
                    first = next(iter(links))
                    links["x-1"] = links[first]  # not a link key
                    links["1,2-3"] = links[first]  # a comma inside the key
                    links[first] = [1, 2]  # not a link object
                    spoiled += 3
    bad = tmp_path / "communication_matrix.json"
    bad.write_text(json.dumps(doc))
    assert spoiled >= 6
    for f in [*files, bad]:
        full, skipped = read(f)
        part, n_read, skipped_part = read_for_totals(f)
        assert (n_read, skipped_part) == (full.height, skipped)
        assert part.height <= full.height
        assert link_totals(map_ranks(part, None)).equals(link_totals(map_ranks(full, None)))
    _, skipped_bad = read(bad)
    _, skipped_src = read(files[0])
    assert skipped_bad - skipped_src == spoiled


def test_matrix_typed_reader_equals_the_untyped_one(tmp_path):
    """The matrix is decoded typed, each op's links only as far as they are used; whatever that way cannot take
    is read untyped. Both give the same rows and counts — on the real matrices (aggregated and per-op) and on
    copies with a key that is no step, a "Total Op Info" entry, text where numbers go, a section that is no
    object, a link that is no object, and a NaN literal (which msgspec refuses)."""
    from polars.testing import assert_frame_equal

    from profan.sources.ascend_text.comm import entries

    src = QWEN3 / "rank_0_ascend_pt" / OUT / "communication_matrix.json"
    text = src.read_text()
    doc = json.loads(text)
    step = next(iter(doc))
    total_key = next(k for k in doc[step]["collective"] if "-total@" in k)
    first_link = next(iter(doc[step]["collective"][total_key]))

    def variant(name: str, change) -> Path:
        d = json.loads(text)
        change(d)
        out = tmp_path / name / "communication_matrix.json"
        out.parent.mkdir()
        out.write_text(json.dumps(d))
        return out

    def texts(d):
        link = d[step]["collective"][total_key][first_link]
        link["Transit Size(MB)"], link["Transport Type"] = "1.5", None

    typed = [
        *(QWEN3 / f"rank_{r}_ascend_pt" / OUT / "communication_matrix.json" for r in range(4)),
        GPT3 / "test_rank_0" / OUT / "communication_matrix.json",
        variant("not_a_step", lambda d: d.update({"summary": {"collective": {}}})),
        variant("total_op_info", lambda d: d[step]["collective"].update({"Total Op Info": {"0-1": {}}})),
        variant("texts", texts),
    ]
    untyped = [
        variant("section", lambda d: d.update({"step99": {"collective": 7}})),
        variant("link", lambda d: d[step]["collective"][total_key].update({first_link: [1, 2]})),
    ]
    bad_utf8 = tmp_path / "utf8" / "communication_matrix.json"  # a byte no UTF-8 text holds, in a counted entry
    bad_utf8.parent.mkdir()
    top1 = next(k for k in doc[step]["collective"] if "-top1@" in k)
    cut = text.index('"Transport Type"', text.index(f'"{top1}"'))
    bad_utf8.write_bytes(text[:cut].encode() + b'"Note": "\xff", ' + text[cut:].encode())
    assert ascend_matrix._typed_entries(bad_utf8) is None
    with pytest.raises(ProfanInputError, match="not valid JSON"):
        ascend_matrix._read(bad_utf8, True)
    nan = tmp_path / "nan" / "communication_matrix.json"
    nan.parent.mkdir()
    nan.write_text(text.replace('"Transit Time(ms)": ', '"Transit Time(ms)": NaN, "x": ', 1))
    untyped.append(nan)
    for f in typed + untyped:
        assert (ascend_matrix._typed_entries(f) is not None) == (f in typed or f.parent.name == "link"), f
        for totals_only in (True, False):
            got, n_read, skipped = ascend_matrix._read(f, totals_only)
            want, w_read, w_skipped = ascend_matrix._rows(*entries(f), totals_only, lazy=False)
            assert (n_read, skipped) == (w_read, w_skipped), f
            assert_frame_equal(got, want)
    spoiled, _, skipped = ascend_matrix._read(typed[-1], False)
    assert skipped == 0 and spoiled.filter(pl.col("transport") == "None").height == 1
    assert ascend_matrix._read(untyped[1], False)[2] == 1  # the link that is no object, skipped and counted


def test_ops_with_a_negative_number_are_skipped_and_the_others_kept(tmp_path):
    """communication.json of Qwen3 rank 0 with one op's times negated, one's idle time a rounding's -1e-9 ms, one
    bandwidth row's size negative: the two with a negative number are skipped and counted (with their bandwidth
    rows), every other op keeps the JSON's own numbers."""
    src = QWEN3 / f"rank_0_ascend_pt/{OUT}/communication.json"
    doc = _json(src)
    ops = list(_ops(doc))
    negated, rounded, bad_bw = ops[0], ops[1], ops[2]
    t = negated[3]["Communication Time Info"]
    t.update({k: -abs(t[k]) - 1.0 for k in ("Elapse Time(ms)", "Wait Time(ms)", "Idle Time(ms)")})
    rounded[3]["Communication Time Info"]["Idle Time(ms)"] = -1e-9
    next(iter(bad_bw[3]["Communication Bandwidth Info"].values()))["Transit Size(MB)"] = -1.0
    path = tmp_path / "communication.json"
    path.write_text(json.dumps(doc))
    op_rows, bw_rows, skipped = ascend_comm.read(path)
    assert skipped == 2 and op_rows.height == len(ops) - 2
    assert {negated[2], bad_bw[2]}.isdisjoint(op_rows["op"].to_list())
    assert {negated[2], bad_bw[2]}.isdisjoint(bw_rows["op"].to_list())
    by_op = {r["op"]: r for r in op_rows.to_dicts()}
    for _, _, op, body in ops[1:2] + ops[3:]:
        raw = body["Communication Time Info"]
        assert by_op[op]["elapse_ms"] == raw["Elapse Time(ms)"] and by_op[op]["idle_ms"] == raw["Idle Time(ms)"]
    assert "a negative number" in ascend_comm.SKIPPED_WHAT


DB_SET = ASCEND / "msinsight-alexnet-2rank-2025-db" / "level1"


def _sqlite(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        got = con.execute(sql).fetchall()
        con.commit()
        return got
    finally:
        con.close()


def test_db_ops_with_a_negative_time_are_skipped_and_said(tmp_path):
    """The DB export's communication (analysis.db's CommAnalyzerTime, else COMMUNICATION_OP) as communication.json:
    an op with a negative time is skipped and said in a warning naming the table, the others keep their numbers."""
    data = shutil.copytree(DB_SET, tmp_path / "db")
    out = data / f"rank0_ascend_pt/{OUT}"
    adb = out / "analysis.db"
    rows = _sqlite(adb, "SELECT hccl_op_name, elapse_time FROM CommAnalyzerTime ORDER BY start_timestamp")
    _sqlite(adb, f"UPDATE CommAnalyzerTime SET wait_time = -1.5 WHERE hccl_op_name = '{rows[0][0]}'")
    report = profan.analyze(data)
    said = [w for w in report.warnings if "analysis.db: CommAnalyzerTime: skipped 1 of" in w]
    assert len(said) == 1 and f"skipped 1 of {len(rows)} communication ops" in said[0]
    kept = report.tables["communication"].filter(pl.col("rank") == 0).sort("start_us")
    assert kept["op_name"].to_list() == [r[0] for r in rows[1:]]
    assert kept["elapse_ms"].to_list() == [r[1] for r in rows[1:]]

    adb.unlink()  # COMMUNICATION_OP: elapse = end − start
    db = out / "ascend_pytorch_profiler_0.db"
    ((n,),) = _sqlite(db, "SELECT count(*) FROM COMMUNICATION_OP")
    _sqlite(
        db, "UPDATE COMMUNICATION_OP SET endNs = startNs - 1000 WHERE rowid = (SELECT min(rowid) FROM COMMUNICATION_OP)"
    )
    report = profan.analyze(data)
    assert any(f"COMMUNICATION_OP: skipped 1 of {n} communication ops" in w for w in report.warnings)
    kept = report.tables["communication"].filter(pl.col("rank") == 0)
    assert kept.height == n - 1 and kept["elapse_ms"].min() >= 0
