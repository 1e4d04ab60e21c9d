"""kernel_details.csv / op_summary header variants (K1–K8 of the format reference) on the real files."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import ASCEND, QWEN3, fnum, raw_rows

from profan.sources.ascend_text import kernels as ascend_kernels

OUT = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
FILES = {
    "K1 gpt3 2023 (no OP State)": f"msinsight-gpt3-2rank-2023/test_rank_0/{OUT}",
    "K2 ArithmeticUtilization": "mstt-advisor-ut/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv",
    "K3 alexnet level1 CRLF": f"msinsight-alexnet-2rank-2025/level1/rank0_ascend_pt/{OUT}",
    "K3 quoted TAB timestamps": "mstt-advisor-ut/test/ut/advisor/compute_advice/data/kernel_details.csv",
    "K4 qwen3 Device_id": f"msinsight-qwen3-4rank-2025q4/rank_0_ascend_pt/{OUT}",
    "K5 level0 8 columns": f"msinsight-alexnet-2rank-2025/level0/rank0_ascend_pt/{OUT}",
    "K7 msprof op_summary": "vllm-ascend-msprof-gmm-1op/PROF_000001_20260823165413436_00626258NIRJNPIC/"
    "mindstudio_profiler_output/op_summary_20260823165421.csv",
}


# Upstream trimming left gpt3's line 17 one field short: its values shift and "NO" lands in Mix Block Dim.
MISALIGNED = {"K1 gpt3 2023 (no OP State)": {17}}


@pytest.mark.parametrize("variant", list(FILES))
def test_every_row_keeps_its_line_and_values(variant):
    path = ASCEND / FILES[variant]
    header, rows = raw_rows(path)
    kf = ascend_kernels.inspect(path)
    df = ascend_kernels.scan(kf).collect()
    assert df.height == len(rows)
    assert df["src_line"].to_list() == list(rows)
    name_col = "Name" if "Name" in header else "Op Name"
    dur_col = "Duration(us)" if "Duration(us)" in header else "Task Duration(us)"
    start_col = "Start Time(us)" if "Start Time(us)" in header else "Task Start Time(us)"
    misaligned = MISALIGNED.get(variant, set())
    assert set(df.filter(pl.col("bad"))["src_line"].to_list()) == misaligned
    for rec in df.filter(~pl.col("bad")).iter_rows(named=True):
        raw = rows[rec["src_line"]]
        assert rec["name"] == raw[name_col]
        assert rec["dur_us"] == pytest.approx(fnum(raw[dur_col]))
        assert rec["start_us"] == pytest.approx(float(raw[start_col].strip().strip('"').strip()))
    assert ascend_kernels.verify_lines(kf, df.height)


def test_level0_op_derived_from_name():
    kf = ascend_kernels.inspect(ASCEND / FILES["K5 level0 8 columns"])
    df = ascend_kernels.scan(kf).collect()
    assert set(df["type"]) == {"N/A"}
    ops = dict(zip(df["name"], df["op"], strict=True))
    assert ops["trans_TransData_0"] == "TransData"
    assert ops["hcom_allReduce__868_0_1"] == "hcom_allReduce_"
    assert any(n.startswith("aclnn") and o == n.split("_")[-1] for n, o in ops.items())


def test_pipe_ratios_matched_by_suffix():
    k4 = ascend_kernels.inspect(ASCEND / FILES["K4 qwen3 Device_id"])
    assert k4.pipe_columns["mac"] == ["aic_mac_ratio"]
    assert k4.pipe_columns["mte2"] == ["aic_mte2_ratio", "aiv_mte2_ratio"]
    assert not ascend_kernels.inspect(ASCEND / FILES["K2 ArithmeticUtilization"]).has_pipe_ratios
    assert ascend_kernels.inspect(ASCEND / FILES["K7 msprof op_summary"]).columns["block_dim"] == "Block Num"


def test_unprefixed_metric_columns(tmp_path):
    """K8 (chips without split Cube/Vector PMU): bare `mac_ratio`, `vec_ratio`, … columns."""
    path = tmp_path / "kernel_details.csv"
    path.write_text(
        "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,"
        "vec_ratio,mac_ratio,mte2_ratio\n"
        "1,MatMul1,MatMul,AI_CORE,100.5\t,40.0,0,8,0.1,0.9,0.3\n"
    )
    kf = ascend_kernels.inspect(path)
    assert set(kf.pipe_columns) == {"vec", "mac", "mte2"}
    row = ascend_kernels.scan(kf).collect().row(0, named=True)
    assert (row["mac"], row["vec"], row["mte2"], row["src_line"]) == (0.9, 0.1, 0.3, 2)


def test_multiline_quoted_field_keeps_physical_lines(tmp_path):
    """A quoted cell with a line break shifts every later row by one physical line; locators must follow."""
    path = tmp_path / "kernel_details.csv"
    path.write_text(
        "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Input Shapes\n"
        '1,A,Add,AI_VECTOR_CORE,1.0,2.0,"1,2\n3"\n'
        '1,B,Mul,AI_VECTOR_CORE,5.0,7.0,"4"\n'
    )
    kf = ascend_kernels.inspect(path)
    lf = ascend_kernels.scan(kf)
    df = ascend_kernels.with_exact_lines(kf, lf, 2).collect()
    assert dict(zip(df["name"], df["src_line"], strict=True)) == {"A": 2, "B": 4}
    assert path.read_text().splitlines()[3].startswith("1,B,")
    assert df.filter(pl.col("name") == "B")["dur_us"].item() == 7.0


def test_big_kernel_file_groups_are_cached_and_invalidated(tmp_path, monkeypatch):
    """A second analysis of a big kernel file reads its reduced groups from the cache — same report, cited lines
    included — and an edited file is read afresh."""
    import shutil

    import profan
    from profan.ranks import kernel_pass

    src = QWEN3 / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    f = tmp_path / "kernel_details.csv"
    shutil.copy(src, f)
    monkeypatch.setenv("PROFAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROFAN_NO_CACHE", raising=False)
    monkeypatch.setattr(kernel_pass, "CACHE_BYTES", 0)  # the real file is small; treat it as big
    reads = []
    real = kernel_pass._reduce_file
    monkeypatch.setattr(kernel_pass, "_reduce_file", lambda kf, *a, **k: reads.append(kf.path) or real(kf, *a, **k))

    def doc() -> dict:
        d = profan.analyze(f).to_dict()
        d["meta"].pop("timings_s")
        return d

    first, second = doc(), doc()
    assert len(reads) == 1 and second == first
    comm = sum(fnum(r["Duration(us)"]) for r in raw_rows(src)[1].values() if r["Accelerator Core"] == "COMMUNICATION")
    got = sum(b["time_us"] for b in second["breakdown"] if b["bucket"] == "communication")
    assert got == pytest.approx(comm, abs=1e-3)
    with f.open("a") as fh:  # one more row: size and mtime change, the entry no longer matches
        fh.write(src.read_text().splitlines()[1] + "\n")
    third = doc()
    assert len(reads) == 2
    assert (
        sum(r["rows_read"]["kernel_details"] for r in third["source"]["ranks"])
        == sum(r["rows_read"]["kernel_details"] for r in first["source"]["ranks"]) + 1
    )


@pytest.mark.parametrize("variant", ["K4 qwen3 Device_id", "K1 gpt3 2023 (no OP State)", "K7 msprof op_summary"])
def test_streaming_reduction_of_big_files_on_real_rows(variant, monkeypatch):
    """Files over IN_MEMORY_BYTES go through polars' streaming group-by, which cites per group its longest and its
    first row. On real files (forced down that path) every group's count, time, maximum and pipe sums equal the
    in-memory reduction's, the bad-row count is the same, and each cited line, read from the raw file, is the
    group's longest row or its first row."""
    from profan.ranks import kernel_pass
    from profan.rulepack.pack import load

    path = ASCEND / FILES[variant]
    pack = load([])
    (kp,) = kernel_pass.reduce_kernel_files([kernel_pass.KernelRequest(path)], pack)
    exact, c_exact = kp.groups, kp.counts
    monkeypatch.setattr(ascend_kernels, "IN_MEMORY_BYTES", -1)
    (kp,) = kernel_pass.reduce_kernel_files([kernel_pass.KernelRequest(path)], pack)
    stream, c_stream = kp.groups, kp.counts
    assert c_stream == c_exact
    keys = kernel_pass.KEYS
    both = exact.join(stream, on=keys, how="full", nulls_equal=True, suffix="_s")
    assert both.height == exact.height == stream.height
    for c in [c for c in exact.columns if c.endswith(("_wsum", "_wden"))] + ["time_us", "max_us"]:
        assert both[c].to_list() == pytest.approx(both[f"{c}_s"].to_list(), rel=1e-12, abs=1e-9), c
    assert both["count"].to_list() == both["count_s"].to_list()
    # a streamed file's rows are not held, so no matmul gets its place in the layer (`neighbors`): those the
    # in-memory pass placed by their neighbours stay the name's `gemm` (README: position rules need the rows)
    placed = both["decided_by"].fill_null("").str.starts_with("neighbors=")
    assert both.filter(~placed)["bucket"].to_list() == both.filter(~placed)["bucket_s"].to_list()
    by_name = both.filter(placed)
    assert set(by_name["bucket_s"]) <= {"gemm"} and by_name["decided_by_s"].null_count() == by_name.height

    header, rows = raw_rows(path)
    dur_col = "Duration(us)" if "Duration(us)" in header else "Task Duration(us)"
    for g in stream.iter_rows(named=True):
        # the group's rows, independently: the exact reduction's cited lines hold all of them for these files
        members = next(e for e in both.iter_rows(named=True) if all(e[k] == g[k] for k in keys))["lines"]
        assert len(members) == g["count"] or g["count"] > kernel_pass.TOP_LINES
        longest, *rest = g["lines"]
        assert fnum(rows[longest][dur_col]) == pytest.approx(g["max_us"])
        if g["count"] <= kernel_pass.TOP_LINES:
            assert set(g["lines"]) <= set(members)
            assert min(g["lines"]) == min(members)  # the first row of the group is cited
        assert len(rest) <= 1


def test_na_start_keeps_the_row_na_duration_is_skipped_and_counted(tmp_path):
    """A real row whose start time reads N/A still has a duration: it counts. A row whose duration reads N/A
    cannot be sized: it is skipped and counted, not silently dropped."""
    import profan

    src = QWEN3 / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    header, rows = raw_rows(src)
    lines = src.read_text().splitlines(keepends=True)
    cells = {n: lines[n - 1].split(",") for n in (5, 6)}
    i_start, i_dur = header.index("Start Time(us)"), header.index("Duration(us)")
    assert '"' not in "".join(lines[4].split(",")[: i_dur + 1]) + "".join(lines[5].split(",")[: i_dur + 1])
    cells[5][i_start] = "N/A"
    cells[6][i_dur] = "N/A"
    lines[4], lines[5] = ",".join(cells[5]), ",".join(cells[6])
    f = tmp_path / "kernel_details.csv"
    f.write_text("".join(lines))
    report = profan.analyze(f)
    (rank,) = report.source["ranks"]
    assert rank["rows_read"]["kernel_details"] == len(rows) and rank["rows_skipped"]["kernel_details"] == 1
    expected = sum(fnum(r["Duration(us)"]) for n, r in rows.items() if n != 6)
    assert report.breakdown["time_us"].sum() == pytest.approx(expected, rel=1e-12)
    assert any("skipped 1 of" in w for w in report.warnings)


def test_streamed_ranks_without_communication_json_keep_hccl_starts(tmp_path, monkeypatch):
    """A big kernel file of a cluster rank without communication.json: the streamed groups keep each group's
    first start, so the collectives take the HCCL rows (and their starts) from the groups — the same collectives
    as in memory, without a pass of their own over the file."""
    from profan.ranks import collectives, rankmap
    from profan.rulepack.pack import load
    from profan.sources.discovery.discover import discover
    from profan.synth import generate

    generate(tmp_path / "c", ranks=2, layers=2, seed=3, trace=False)
    for p in (tmp_path / "c").rglob("communication.json"):
        p.unlink()
    disc, pack = discover(tmp_path / "c"), load([])
    in_memory = rankmap.read_ranks(disc.ranks, disc.root, pack)
    monkeypatch.setattr(ascend_kernels, "IN_MEMORY_BYTES", -1)  # every file takes the streamed path
    streamed = rankmap.read_ranks(disc.ranks, disc.root, pack)
    for a, b in zip(in_memory, streamed, strict=True):
        assert collectives._hccl_rows_from_groups(b.groups) is not None  # no pass of their own
        assert b.collectives is not None and b.collectives.height == a.collectives.height > 0
        cols = ["name", "start_us", "kline"]
        assert b.collectives.select(cols).equals(a.collectives.select(cols))


@pytest.mark.parametrize("tail", ["", "\n", "\r\n"])
def test_line_count_is_the_same_read_whole_or_in_blocks(tmp_path, monkeypatch, tail):
    """Files up to csvtext.SMALL_COUNT_BYTES are counted in one read, bigger ones block by block; both count a
    last line without a newline. Checked against the csv module's count of the real file."""
    from profan.sources.common import csvtext

    src = ASCEND / FILES["K3 alexnet level1 CRLF"]
    _, rows = raw_rows(src)
    f = tmp_path / "k.csv"
    f.write_bytes(src.read_bytes().rstrip(b"\r\n") + tail.encode())
    whole = csvtext.count_lines(f)
    csvtext._count_lines.cache_clear()
    monkeypatch.setattr(csvtext, "SMALL_COUNT_BYTES", 0)
    assert csvtext.count_lines(f) == whole == len(rows) + 1
