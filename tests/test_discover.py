"""Discovery on the real layouts: renamed rank folders, bare output folders, msprof, derived outputs, mixed sets."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ASCEND, QWEN3

import profan
from profan.model.errors import ProfanInputError
from profan.sources.discover import discover


def test_gpt3_renamed_rank_folders_and_derived_output_skipped():
    d = discover(ASCEND / "msinsight-gpt3-2rank-2023")
    assert [(r.rank, r.path.name) for r in d.ranks] == [(0, "test_rank_0"), (1, "test_rank_1")]
    assert any("cluster_analysis_output" in n and "derived output" in n for n in d.notes)


def test_rank_id_as_string_inside_profiler_info(tmp_path):
    """torch_npu writes "rank_id": "2" (a string) when the rank came from env RANK; the file name may be absent."""
    src = QWEN3 / "rank_2_ascend_pt"
    dst = tmp_path / "worker_a"
    shutil.copytree(src, dst)
    info = json.loads((dst / "profiler_info_2.json").read_text())
    assert info["rank_id"] == "2"
    (dst / "profiler_info_2.json").rename(dst / "profiler_info.json")
    (r,) = discover(tmp_path).ranks
    assert r.rank == 2 and r.rank_origin == "rank_id in profiler_info.json"


def test_device_id_is_not_the_rank():
    d = discover(QWEN3)
    assert [r.rank for r in d.ranks] == [0, 1, 2, 3]  # Device_id in the CSVs is 0, 1, 4, 5


def test_bare_ascend_profiler_output_and_single_rank_dir():
    out = QWEN3 / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (r,) = discover(out).ranks
    assert r.rank == 2 and "kernel_details" in r.files  # profiler_info_2.json found in the parent
    (r,) = discover(QWEN3 / "rank_2_ascend_pt").ranks
    assert r.rank == 2 and set(r.files) >= {"kernel_details", "step_trace_time", "communication"}


def test_folder_with_only_kernel_details_and_single_file():
    folder = ASCEND / "mstt-advisor-ut/test/ut/advisor/compute_advice/data"
    d = discover(folder)
    (r,) = d.ranks
    assert r.rank == 0 and d.notes == ["no rank id in the data: treated as rank 0"]
    (r,) = discover(folder / "kernel_details.csv").ranks
    assert r.files["kernel_details"].name == "kernel_details.csv"


def test_msprof_layout():
    (r,) = discover(ASCEND / "vllm-ascend-msprof-gmm-1op").ranks
    assert r.kind == "msprof" and r.files["kernel_details"].name.startswith("op_summary_")


def test_msprof_output_folder_passed_directly():
    """``PROF_*/mindstudio_profiler_output`` itself is the same rank, read the same way, as its PROF_* folder —
    except the PROF_* folder's device info, which lies outside the folder given: not read, and said."""
    (prof,) = [p for p in (ASCEND / "vllm-ascend-msprof-gmm-1op").iterdir() if p.name.startswith("PROF_")]
    disc = discover(prof / "mindstudio_profiler_output")
    (r,) = disc.ranks
    (ref,) = discover(prof).ranks
    assert r.kind == "msprof" and r.path == ref.path
    assert r.files == {k: v for k, v in ref.files.items() if k != "device_info"} and "device_info" in ref.files
    assert any("device_0/info.json.0 of the PROF_* folder not read" in n for n in disc.notes)
    a, b = profan.analyze(prof / "mindstudio_profiler_output"), profan.analyze(prof)
    assert a.breakdown.equals(b.breakdown) and a.breakdown["time_us"].sum() > 0


def test_missing_files_are_warnings():
    d = discover(QWEN3)
    assert sorted(w.split(" (")[0] for w in d.warnings) == ["rank 1", "rank 3"]


@pytest.mark.parametrize("folder", ["msinsight-alexnet-2rank-2025", "mstt-advisor-ut"])
def test_separate_collections_are_refused(folder):
    with pytest.raises(ProfanInputError, match="separate profiler collections"):
        discover(ASCEND / folder)


def test_duplicate_rank_side_by_side_keeps_the_newest(tmp_path):
    for name in ("w_20250101000000000_ascend_pt", "w_20250102000000000_ascend_pt"):
        shutil.copytree(QWEN3 / "rank_0_ascend_pt", tmp_path / name)
    d = discover(tmp_path)
    (r,) = d.ranks
    assert r.path.name == "w_20250102000000000_ascend_pt"
    assert "skipped 1" in d.warnings[0]
