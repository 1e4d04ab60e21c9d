"""Discovery on the real layouts: renamed rank folders, bare output folders, msprof, derived outputs, mixed sets."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ASCEND, QWEN3, assert_one_line_error, run_cli

import profan
from profan.model.errors import ProfanInputError
from profan.sources.discovery.discover import discover


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


# ------------------------------------------------------------------ torch_npu DB export and what is refused

DB_SET = ASCEND / "msinsight-alexnet-2rank-2025-db" / "level1"
TEXT_SET = ASCEND / "msinsight-alexnet-2rank-2025" / "level1"
MSPROF = ASCEND / "vllm-ascend-msprof-gmm-1op" / "PROF_000001_20260823165413436_00626258NIRJNPIC"


def _writable_copy(src, dst):
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_db_export_ranks_are_found_with_their_analysis_db():
    d = discover(DB_SET)
    assert [r.rank for r in d.ranks] == [0, 1]
    for r in d.ranks:
        assert r.files["ascend_db"].name == f"ascend_pytorch_profiler_{r.rank}.db"
        assert r.files["analysis_db"].name == "analysis.db"
        assert "kernel_details" not in r.files


def test_rank_with_text_and_db_reads_the_text_and_says_so(tmp_path):
    root = _writable_copy(TEXT_SET, tmp_path / "job")
    for r in (0, 1):
        src = DB_SET / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{r}.db"
        shutil.copy(src, root / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT")
    d = discover(root)
    assert all("kernel_details" in r.files and "ascend_db" not in r.files for r in d.ranks)
    said = [n for n in d.notes if "both the text export" in n]
    assert len(said) == 2 and all("DB not read" in n for n in said)
    rep = profan.analyze(root)
    assert any("both the text export" in n for n in rep.notes)


def test_rank_with_db_and_no_kernel_details_reads_the_db_only(tmp_path):
    root = _writable_copy(DB_SET, tmp_path / "job")
    out = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    shutil.copy(TEXT_SET / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv", out)
    d = discover(root)
    r0 = next(r for r in d.ranks if r.rank == 0)
    assert "ascend_db" in r0.files and "step_trace_time" not in r0.files
    assert any("step_trace_time.csv" in n and "not read" in n for n in d.notes)


def test_single_db_file_is_a_rank():
    path = DB_SET / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db"
    (r,) = discover(path).ranks
    assert r.rank == 1 and r.rank_origin == "file name ascend_pytorch_profiler_1.db"
    assert set(r.files) == {"ascend_db"}


def test_export_with_neither_text_nor_db_is_one_line(tmp_path):
    """The DB export without its ascend_pytorch_profiler_*.db (analysis.db alone): no empty report, exit 2."""
    root = _writable_copy(DB_SET, tmp_path / "job")
    for r in (0, 1):
        (root / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{r}.db").unlink()
    with pytest.raises(ProfanInputError, match=r"nothing profan can read: rank0_ascend_pt holds analysis\.db"):
        discover(root)
    assert_one_line_error(run_cli("analyze", str(root)), "analysis.db", "ascend_pytorch_profiler_*.db")


def test_one_rank_without_data_is_skipped_and_named(tmp_path):
    root = _writable_copy(DB_SET, tmp_path / "job")
    (root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db").unlink()
    d = discover(root)
    assert [r.rank for r in d.ranks] == [0]
    assert any("skipped 1 rank(s)" in w and "rank1_ascend_pt" in w for w in d.warnings)


def test_msprof_db_export_without_op_summary_is_refused(tmp_path):
    prof = _writable_copy(MSPROF, tmp_path / MSPROF.name)
    out = prof / "mindstudio_profiler_output"
    for p in out.glob("op_summary_*.csv"):
        p.unlink()
    shutil.copy(
        DB_SET / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db", prof / "msprof_20260823.db"
    )
    with pytest.raises(ProfanInputError, match=r"msprof_20260823\.db \(msprof's DB export\).*op_summary"):
        discover(tmp_path)
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "msprof_20260823.db", "op_summary")


def test_msprof_db_only_prof_folder_is_refused(tmp_path):
    prof = tmp_path / MSPROF.name
    prof.mkdir()
    shutil.copy(DB_SET / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db", prof / "msprof_1.db")
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "msprof_1.db", "op_summary")


def test_msprof_sample_based_collection_is_refused(tmp_path):
    prof = _writable_copy(MSPROF, tmp_path / MSPROF.name)
    for p in (prof / "mindstudio_profiler_output").glob("op_summary_*.csv"):
        p.unlink()
    with pytest.raises(ProfanInputError, match=r"task_time_20260823165421\.csv \(a sample-based collection"):
        discover(tmp_path)
