"""Kineto traces end to end on the real sets in fixtures/torch: ranks, steps, buckets, the step split, and every
finding's events read back from the raw JSON. Ground truth is computed here straight from the JSON."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import analysed, run_cli, union_us

import profan
from profan.ranks.rankmap import read_ranks
from profan.rulepack.pack import load as load_pack
from profan.sources.common.readback import read_back
from profan.sources.discovery.discover import discover

ROOT = Path(__file__).resolve().parents[2]
TORCH = ROOT / "fixtures" / "torch"
SETS = ["dlrm_v100_8rank", "moe_b200_rank0", "nccl_a100_1rank", "qwen1.5-0.5b_h100_1rank"]
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFAN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def reports():
    return {s: analysed(TORCH / s) for s in SETS}


@functools.lru_cache(maxsize=16)
def raw(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def device_events(path: Path) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(raw(path)["traceEvents"]) if e.get("cat") in DEVICE and e.get("ph") == "X"]


def rank_data(set_name: str, rank: int = 0):
    disc = discover(TORCH / set_name)
    rs = next(r for r in disc.ranks if r.rank == rank)
    (rd,) = read_ranks([rs], disc.root, load_pack())
    return rd


def assert_select_matches(ev, cited: list[dict], fid: str) -> None:
    """Every cited event is a row of the set the evidence's ``select`` names: its category is one of ``cat``
    and its name is ``name`` where the select gives them."""
    cats = ev.select.get("cat")
    if cats is not None:
        cats = [cats] if isinstance(cats, str) else cats
        assert all(e["cat"] in cats for e in cited), (fid, ev.select, [e["cat"] for e in cited])
    if isinstance(ev.select.get("name"), str):
        assert all(e["name"] == ev.select["name"] for e in cited), (fid, ev.select)


@pytest.mark.parametrize("name", SETS)
def test_cli_analyses_every_set(name, tmp_path, monkeypatch):
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "c"))
    res = run_cli("analyze", str(TORCH / name), "-q", "-f", "json", "-o", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["breakdown"] and doc["findings"]
    # the unclassified share is reported for every set
    assert any(n.startswith("share of device time matching no bucket rule") for n in doc["notes"])


def test_dlrm_all_eight_ranks_and_their_step(reports):
    rep = reports["dlrm_v100_8rank"]
    ranks = rep.source["ranks"]
    assert [r["rank"] for r in ranks] == list(range(8))
    for r in ranks:
        assert r["rank_origin"] == f"distributedInfo.rank in {Path(r['path']).name}"
        assert Path(r["path"]).name.startswith(f"worker{r['rank']}_")
        doc = raw(TORCH / "dlrm_v100_8rank" / r["path"])
        steps = [e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
        assert steps == ["ProfilerStep#10"]
        assert r["info"]["steps"] == [10] and r["info"]["world_size"] == 8
    assert sorted(rep.breakdown.filter(pl.col("step") == 10)["rank"].unique().to_list()) == list(range(8))


def test_dlrm_step_split_matches_interval_union_and_hta(reports):
    tab = reports["dlrm_v100_8rank"].tables["trace_steps"]
    for rank in (0, 7):
        path = next(
            TORCH / "dlrm_v100_8rank" / r["path"]
            for r in reports["dlrm_v100_8rank"].source["ranks"]
            if r["rank"] == rank
        )
        iv = [(e["ts"], e["ts"] + e["dur"]) for _, e in device_events(path)]
        span = max(e for _, e in iv) - min(s for s, _ in iv)
        row = tab.filter((pl.col("rank") == rank) & (pl.col("scope") == "step")).row(0, named=True)
        assert row["step_us"] == pytest.approx(span)
        assert row["free_us"] == pytest.approx(span - union_us(iv))
    r0 = tab.filter((pl.col("rank") == 0) & (pl.col("scope") == "step")).row(0, named=True)
    assert r0["free_us"] == pytest.approx(6419.0)  # HTA 0.5.0 temporal breakdown, rank 0 idle (µs)
    r7 = tab.filter((pl.col("rank") == 7) & (pl.col("scope") == "step")).row(0, named=True)
    assert r7["free_us"] / r7["step_us"] == pytest.approx(0.7575, abs=5e-5)  # HTA: rank 7 idle 75.75 %


def test_step_idle_counts_every_device_event_in_its_window(reports):
    """DLRM rank 1 runs device events of no ProfilerStep inside step 10's span: they occupy the GPU there, so the
    step's Free is its span minus the union of every device event overlapping it (clipped to it), not of its own
    events only. Computed here from the raw JSON: the step's own events are those launched (runtime event with the
    same correlation) inside the ProfilerStep's CPU span."""
    path = next(
        TORCH / "dlrm_v100_8rank" / r["path"] for r in reports["dlrm_v100_8rank"].source["ranks"] if r["rank"] == 1
    )
    ev = raw(path)["traceEvents"]
    step = next(e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == "ProfilerStep#10")
    launch = {
        e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]
    }
    dev = [e for _, e in device_events(path)]
    own = [e for e in dev if step["ts"] <= launch.get(e["args"].get("correlation"), -1) < step["ts"] + step["dur"]]
    w0, w1 = min(e["ts"] for e in own), max(e["ts"] + e["dur"] for e in own)
    inside = [(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in dev if e["ts"] < w1 and e["ts"] + e["dur"] > w0]
    foreign = len(inside) - len(own)
    free_all = (w1 - w0) - union_us(inside)
    free_own = (w1 - w0) - union_us([(e["ts"], e["ts"] + e["dur"]) for e in own])
    row = reports["dlrm_v100_8rank"].tables["trace_steps"].filter((pl.col("rank") == 1) & (pl.col("scope") == "step"))
    row = row.row(0, named=True)
    assert row["step_us"] == pytest.approx(w1 - w0)
    assert row["free_us"] == pytest.approx(free_all, abs=1e-6)
    assert row["other_events"] == foreign > 0 and row["events"] == len(own)
    assert free_own - free_all > 5  # counting the step's own events only called busy time idle
    assert row["computing_us"] + row["comm_not_overlapped_us"] + row["free_us"] == pytest.approx(row["step_us"])


def _bucket_of(rd, names: list[str]) -> dict[str, set[str]]:
    g = rd.groups
    return {n: set(g.filter(pl.col("name") == n)["bucket"].to_list()) for n in names}


def test_qwen_flash_is_attention_and_xmma_gemm_is_dense(reports):
    rd = rank_data("qwen1.5-0.5b_h100_1rank")
    names = rd.groups["name"].unique().to_list()
    flash = [n for n in names if "flash_fwd_kernel" in n]
    gemm = [n for n in names if n.startswith("sm90_xmma_gemm")]
    assert flash and gemm
    assert all(b == {"attention"} for b in _bucket_of(rd, flash).values())
    # a GEMM is an MLP or attention projection where its module says so, else of no known layer: never other
    assert all(b <= {"ffn", "attention_proj", "gemm"} for b in _bucket_of(rd, gemm).values())
    # shares of all GPU event time, computed straight from the JSON (anchor: GEMM 28.0 %, attention 8.4 %)
    ev = device_events(TORCH / "qwen1.5-0.5b_h100_1rank" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    total = sum(e["dur"] for _, e in ev)
    flash_us = sum(e["dur"] for _, e in ev if "flash_fwd_kernel" in e["name"])
    gemm_us = sum(e["dur"] for _, e in ev if "gemm" in e["name"])
    by_bucket = rd.groups.group_by("bucket").agg(pl.col("time_us").sum())
    got = dict(by_bucket.iter_rows())
    g = rd.groups
    assert g.filter(pl.col("name").is_in(flash))["time_us"].sum() == pytest.approx(flash_us)
    assert round(100 * flash_us / total, 1) == 8.4 and got["attention"] > flash_us  # + rotary, in the module
    assert g.filter(pl.col("name").str.contains("gemm"))["time_us"].sum() == pytest.approx(gemm_us)
    assert round(100 * gemm_us / total, 1) == 28.0
    assert sum(got.values()) == pytest.approx(total)
    assert "no rank id in the data: treated as rank 0" in reports["qwen1.5-0.5b_h100_1rank"].notes


def test_qwen_idle_without_rounding_loss(reports):
    ev = device_events(TORCH / "qwen1.5-0.5b_h100_1rank" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    iv = [(e["ts"], e["ts"] + e["dur"]) for _, e in ev]
    span = max(e for _, e in iv) - min(s for s, _ in iv)
    idle = span - union_us(iv)
    row = reports["qwen1.5-0.5b_h100_1rank"].tables["trace_steps"].filter(pl.col("scope") == "trace").row(0, named=True)
    assert row["free_us"] == pytest.approx(idle, abs=0.01)
    assert round(idle) == 4006 and round(100 * idle / span, 1) == 8.1  # HTA's rounding reports 5,688 µs


def test_moe_routing_experts_attention_and_custom_allreduce(reports):
    rd = rank_data("moe_b200_rank0")
    g = rd.groups
    names = g["name"].unique().to_list()

    def buckets(expr: pl.Expr) -> set[str]:
        return set(g.filter(expr)["bucket"].to_list())

    name = pl.col("name")
    assert buckets(name.str.contains("moe::dev::", literal=True)) == {"moe"}
    assert buckets(name.str.starts_with("bmm_")) == {"moe"}
    assert set(g.filter(name.str.starts_with("bmm_"))["rule_id"].to_list()) == {"GPU-MOE-010"}
    assert buckets(name.str.starts_with("fmha")) == {"attention"}
    assert buckets(name.str.contains("multimem_all_reduce_kernel", literal=True)) == {"communication"}
    assert buckets(name.str.starts_with("ncclDevKernel_AllGather")) == {"communication"}
    assert any("moe::dev::routing" in n for n in names) and any("moe::dev::finalize" in n for n in names)
    ev = device_events(TORCH / "moe_b200_rank0" / "eager_trace.json.gz")
    total = sum(e["dur"] for _, e in ev)
    comm = sum(
        e["dur"] for _, e in ev if "multimem_all_reduce_kernel" in e["name"] or e["name"].startswith("ncclDevKernel_")
    )
    got = dict(g.group_by("bucket").agg(pl.col("time_us").sum()).iter_rows())
    assert got["communication"] == pytest.approx(comm) and round(100 * comm / total, 1) == 18.4
    # MoE: routing + finalize + expert GEMMs (anchor 50.7 %) + the activation quantisation launched inside
    # vllm::moe_forward (1.4 %), which the context rule also counts as expert-layer work, and the output buffer
    # fill launched inside the FusedMoE module (1.0 %, rule GPU-MOE-004)
    assert 0.50 <= got["moe"] / total <= 0.54
    assert reports["moe_b200_rank0"].breakdown["step"].null_count() == reports["moe_b200_rank0"].breakdown.height
    assert any("1 of 8 ranks" in n for n in reports["moe_b200_rank0"].notes)


def test_nccl_kernel_time_equals_json_sum_per_step(reports):
    path = TORCH / "nccl_a100_1rank" / "nccl_data.json.gz"
    doc = raw(path)
    ev = doc["traceEvents"]
    nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    assert len(nccl) == 21
    bd = reports["nccl_a100_1rank"].breakdown.filter(pl.col("bucket") == "communication")
    assert bd["time_us"].sum() == pytest.approx(sum(e["dur"] for e in nccl))
    assert bd["kernels"].sum() == 21
    # per step: the kernel belongs to the step whose CPU span holds its launch (runtime event, same correlation)
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in ev
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    want: dict[int | None, float] = {}
    for e in nccl:
        t = launch[e["args"]["correlation"]]
        s = next((n for n, (a, b) in steps.items() if a <= t < b), None)
        want[s] = want.get(s, 0.0) + e["dur"]
    got = {row["step"]: row["time_us"] for row in bd.iter_rows(named=True)}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v)


def test_cpu_only_trace_uses_main_thread_top_level_ops(tmp_path):
    """dlrm rank 0 without its GPU events: the main thread's top-level cpu_ops are the activity."""
    src = TORCH / "dlrm_v100_8rank" / "worker0_step_12.1694128201545.pt.trace.json"
    doc = dict(raw(src))  # a copy: raw() is cached
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in (*DEVICE, "cuda_runtime", "ac2g")]
    out = tmp_path / "cpu" / "rank0_cpu.json"
    out.parent.mkdir()
    out.write_text(json.dumps(doc))
    rep = profan.analyze(out.parent)
    ev = doc["traceEvents"]
    step = next(e for e in ev if e.get("name") == "ProfilerStep#10")
    ops = sorted(
        (e for e in ev if e.get("cat") == "cpu_op" and e["tid"] == step["tid"]), key=lambda e: (e["ts"], -e["dur"])
    )
    top, end = [], None
    for e in ops:
        if end is None or e["ts"] >= end:
            top.append(e)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    assert rep.breakdown["time_us"].sum() == pytest.approx(sum(e["dur"] for e in top))
    comm = sum(e["dur"] for e in top if e["name"].startswith("c10d::") or e["name"] == "record_param_comms")
    got = rep.breakdown.filter(pl.col("bucket") == "communication")["time_us"].sum()
    assert got == pytest.approx(comm) and comm > 0
    assert any("top-level cpu_ops" in n for n in rep.notes)


@pytest.mark.parametrize("name", SETS)
def test_every_finding_cites_the_events_it_describes(reports, name):
    rep = reports[name]
    root = TORCH / name
    paths = {r["rank"]: r["path"] for r in rep.source["ranks"]}
    rd = {rank: rank_data(name, rank) for rank in paths} if name != "dlrm_v100_8rank" else {}
    checked = 0
    for f in rep.findings:
        for ev in f.evidence:
            if not ev.events:
                continue
            assert ev.file in paths.values()  # cross-rank findings may cite other ranks' traces too
            events = raw(root / ev.file)["traceEvents"]
            cited = [events[i] for i in ev.events]
            if ev is f.evidence[0]:  # read_back returns exactly those raw events, in the cited order
                assert [json.loads(t) for _, t in read_back(root, ev)] == cited
            assert_select_matches(ev, cited, f.id)
            if ev.select.get("role") == "span":  # the step's first and last device event bound its span
                assert cited[1]["ts"] + cited[1]["dur"] - cited[0]["ts"] == pytest.approx(ev.values["step_us"])
                assert f.metrics["step_us"] == pytest.approx(ev.values["step_us"])
                assert all(e["cat"] in DEVICE for e in cited)
            elif ev.select.get("role") == "longest idle":  # the idle stretch between two device events
                assert cited[1]["ts"] - (cited[0]["ts"] + cited[0]["dur"]) == pytest.approx(ev.values["gap_us"])
                assert 0 < ev.values["gap_us"] <= f.metrics["free_us"] + 1e-6
            elif ev.select.get("role") == "idle before the step":  # from the step's start or the last device end
                before, first = cited
                start = before["ts"] if before["cat"] == "user_annotation" else before["ts"] + before["dur"]
                assert first["cat"] in DEVICE and first["ts"] - start == pytest.approx(ev.values["idle_before_us"])
            elif ev.select.get("role") in ("host while idle", "data loader"):  # a host span over an idle stretch
                (e,) = cited
                assert e["cat"] not in DEVICE and e["ph"] == "X"
                inside = next(iter(ev.values.values()))
                assert 0 < inside <= e["dur"] + 1e-6
                if ev.select["role"] == "host while idle":
                    assert e["name"] == ev.select["name"] and e["dur"] >= 500
            elif str(ev.select.get("name", "")).startswith("ProfilerStep#"):  # the step's own annotation(s)
                assert {e["name"] for e in cited} == {f"ProfilerStep#{ev.select['step']}"} and ev.row_count == len(
                    cited
                )
            elif ev.select.get("scope") == "trace":
                dev = [e for _, e in device_events(root / ev.file)]
                assert cited[0]["ts"] == min(e["ts"] for e in dev)
                assert cited[1]["ts"] + cited[1]["dur"] == max(e["ts"] + e["dur"] for e in dev)
            elif ev.select.get("source") == "kineto_trace":  # kernel groups (other analyses cite their own sets)
                assert all(e["cat"] in DEVICE for e in cited), (f.id, ev.select)
                durs = [e["dur"] for e in cited]
                assert durs == sorted(durs, reverse=True)
                if "bucket" in ev.select and f.rank in rd:
                    g = rd[f.rank].groups.filter(pl.col("bucket") == ev.select["bucket"])
                    if "step" in ev.select:
                        g = g.filter(pl.col("step").eq_missing(ev.select["step"]))
                    assert {e["name"] for e in cited} <= set(g["name"].to_list())
                    assert ev.row_count == int(g["count"].sum())
                    assert ev.values["time_us"] == pytest.approx(float(g["time_us"].sum()), abs=1e-3)
            checked += 1
    assert checked


def test_evidence_command_prints_the_raw_events(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "c"))
    out = tmp_path / "r.json"
    root = TORCH / "moe_b200_rank0"
    assert run_cli("analyze", str(root), "-q", "-f", "json", "-o", str(out)).returncode == 0
    doc = json.loads(out.read_text())
    events = raw(root / "eager_trace.json.gz")["traceEvents"]
    for f in doc["findings"]:
        res = run_cli("evidence", str(out), f["id"], "-f", "json")
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        for item, ev in zip(got["evidence"], f["evidence"], strict=True):
            assert [json.loads(r["text"]) for r in item["rows"]] == [events[i] for i in ev["events"]]
            assert [r["locator"] for r in item["rows"]] == [f"event {i}" for i in ev["events"]]


def test_each_ranks_trace_is_parsed_and_classified_once(monkeypatch):
    """The collectives pass and the rank's tables are made from one parse and one classification of its trace
    (the per-rank map hands both on), with the cache off: a GB trace is not read twice."""
    from profan.ranks import rankmap
    from profan.sources.trace import kineto_rank

    parsed, classified = [], []
    parse, classify = kineto_rank.parse_trace, kineto_rank.classify_events
    monkeypatch.setattr(kineto_rank, "parse_trace", lambda p, roles: parsed.append(p.name) or parse(p, roles))
    monkeypatch.setattr(kineto_rank, "classify_events", lambda *a: classified.append(1) or classify(*a))
    monkeypatch.setenv("PROFAN_NO_CACHE", "1")
    root = TORCH / "dlrm_v100_8rank"
    sources = discover(root).ranks[:2]
    got = rankmap.read_ranks(sources, root, load_pack(), peers=True)
    assert all(r.collectives is not None and r.groups is not None for r in got)
    assert sorted(parsed) == sorted(Path(s.files["kineto_trace"]).name for s in sources) and len(classified) == 2
