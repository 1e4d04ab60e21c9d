"""kernel_details.csv is cross-checked against op_statistic.csv of the same rank."""

from __future__ import annotations

import shutil

from conftest import QWEN3, fnum, raw_rows

import profan


def test_real_files_agree(qwen3_report):
    tab = qwen3_report.tables["op_statistic_check"]
    assert tab["match"].all()
    assert sorted(set(tab["rank"])) == [0, 2]
    assert any(
        "agrees with rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv on all 35 op types" in n
        for n in qwen3_report.notes
    )


def test_trimmed_kernel_rows_are_flagged(tmp_path):
    rank = tmp_path / "rank_0_ascend_pt"
    shutil.copytree(QWEN3 / "rank_0_ascend_pt", rank)
    kd = rank / "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    lines = kd.read_bytes().splitlines(keepends=True)
    _, rows = raw_rows(kd)
    drop = {n for n, r in rows.items() if r["Type"] == "SwiGlu"}
    assert len(drop) == 28
    kd.write_bytes(b"".join(line for i, line in enumerate(lines, start=1) if i not in drop))
    report = profan.analyze(tmp_path)
    (f,) = [f for f in report.findings if f.check == "kernels-vs-op-statistic"]
    assert f.metrics["op_types"] == 1 and f.metrics["kernel_us"] == 0
    expected = sum(fnum(rows[n]["Duration(us)"]) for n in drop)
    assert abs(f.metrics["op_statistic_us"] - expected) < 0.01
    (ev,) = f.evidence
    _, stat_rows = raw_rows(rank / "ASCEND_PROFILER_OUTPUT/op_statistic.csv")
    (line,) = ev.lines
    assert stat_rows[line]["OP Type"] == "SwiGlu" and int(stat_rows[line]["Count"]) == 28
