"""The synthetic cluster generator writes the real current format, deterministically, with its ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import QWEN3, raw_rows

from profan.sources.ascend_text.meta import double_hash
from profan.synth import generate


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("synth8")
    return out, generate(out, ranks=8, hot_expert=5, hot_factor=3.0, seed=3)


def test_layout_and_header_match_the_real_format(cluster):
    root, truth = cluster
    dirs = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert len(dirs) == 8 and all(d.endswith("_ascend_pt") for d in dirs)
    d0 = root / truth["rank_dirs"]["0"]
    out = d0 / "ASCEND_PROFILER_OUTPUT"
    for f in (
        "kernel_details.csv",
        "step_trace_time.csv",
        "communication.json",
        "communication_matrix.json",
        "trace_view.json",
    ):
        assert (out / f).is_file(), f
    assert (d0 / "profiler_info_0.json").is_file() and (d0 / "profiler_metadata.json").is_file()
    real = (QWEN3 / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv").open("rb").readline()
    assert (out / "kernel_details.csv").open("rb").readline() == real
    second = (out / "kernel_details.csv").read_bytes().split(b"\n")[1]
    assert b"\t," in second  # TAB-suffixed timestamp
    assert b'"""4096,2048;2048"""' in second  # shapes quoted as torch_npu writes them
    header, rows = raw_rows(out / "step_trace_time.csv")
    assert header[0] == "Device_id" and len(rows) == 2


def test_op_hashes_resolve_through_parallel_group_info(cluster):
    root, truth = cluster
    for r in (0, 7):
        d = root / truth["rank_dirs"][str(r)]
        meta = json.loads((d / "profiler_metadata.json").read_text())["parallel_group_info"]
        by_hash = {str(double_hash(k)): v for k, v in meta.items()}
        comm = json.loads((d / "ASCEND_PROFILER_OUTPUT/communication.json").read_text())
        keys = [k for k in comm["step1"]["collective"] if k != "Total Op Info"]
        assert keys
        for k in keys:
            name, _, h = k.partition("@")
            assert h in by_hash, k
            assert r in by_hash[h]["global_ranks"]
            assert name.startswith("hcom_") and name.split("__")[1][:3] == h[-3:]
        ops = {k.split("@")[0].split("__")[0] for k in keys}
        assert ops == {"hcom_allGather", "hcom_alltoallv", "hcom_reduceScatter", "hcom_allReduce"}


def test_trace_view_has_overlap_and_hccl_lanes(cluster):
    root, truth = cluster
    ev = json.loads((root / truth["rank_dirs"]["3"] / "ASCEND_PROFILER_OUTPUT/trace_view.json").read_text())
    assert isinstance(ev, list)
    procs = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert {"Ascend Hardware", "HCCL", "Overlap Analysis"} <= procs
    threads = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert {"Computing", "Communication", "Communication(Not Overlapped)", "Free", "Plane 0"} <= threads
    assert any(t.startswith("Group ") and t.endswith(" Communication") for t in threads)
    # Overlap Analysis Computing lane sums to step_trace_time's Computing (the profiler derives one from the other)
    ov = next(e["pid"] for e in ev if e.get("name") == "process_name" and e["args"]["name"] == "Overlap Analysis")
    comp = sum(e["dur"] for e in ev if e.get("ph") == "X" and e["pid"] == ov and e["name"] == "Computing")
    _, rows = raw_rows(root / truth["rank_dirs"]["3"] / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv")
    assert comp == pytest.approx(sum(float(r["Computing"]) for r in rows.values()), rel=1e-6)


def test_expert_imbalance_is_visible_in_grouped_matmul_shapes(cluster):
    root, truth = cluster
    gt = truth["expert_imbalance"]
    assert gt["hot_expert"] == 5 and gt["hot_rank"] == 2 and 5 in gt["experts_of_hot_rank"]
    firsts = {}
    for r in range(8):
        _, rows = raw_rows(root / truth["rank_dirs"][str(r)] / "ASCEND_PROFILER_OUTPUT/kernel_details.csv")
        gmm = [row for row in rows.values() if row["Type"] == "GroupedMatmul" and row["Step Id"] == "1"]
        assert len(gmm) == 4 * 6  # 2 forward + 4 backward per layer
        firsts[r] = sum(int(row["Input Shapes"].strip('"').split(";")[0].split(",")[0]) for row in gmm[:2])
    assert max(firsts, key=firsts.get) == 2


def test_deterministic_for_a_seed(tmp_path):
    a = generate(tmp_path / "a", ranks=4, layers=2, steps=1, seed=11, trace=False)
    b = generate(tmp_path / "b", ranks=4, layers=2, steps=1, seed=11, trace=False)
    c = generate(tmp_path / "c", ranks=4, layers=2, steps=1, seed=12, trace=False)
    f = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"

    def data(name: str, truth: dict) -> bytes:
        return (tmp_path / name / truth["rank_dirs"]["1"] / f).read_bytes()

    assert data("a", a) == data("b", b)
    assert data("a", a) != data("c", c)
    assert json.loads((tmp_path / "a" / "ground_truth.json").read_text())["params"]["seed"] == 11
