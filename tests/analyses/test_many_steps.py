"""A capture of many steps gets one breakdown finding per rank (per-step numbers stay in the table), and its
evidence still covers every row it sums."""

from __future__ import annotations

import shutil

import msgspec
import polars as pl
import pytest
from conftest import QWEN3, fnum, raw_rows

import profan
from profan.ranks import kernel_pass
from profan.ranks.kernel_rows import select_kernel_rows
from profan.render import render

pytestmark = pytest.mark.slow  # large generated inputs or many examples: left out of the fast loop

STEPS = 6


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """Rank 0 of the real Qwen3 set with its step 13 repeated as steps 1–6 (line numbers shift, values repeat)."""
    root = tmp_path_factory.mktemp("steps")
    rank = root / "rank_0_ascend_pt"
    shutil.copytree(QWEN3 / "rank_0_ascend_pt", rank)
    kd = rank / "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    header, *rows = kd.read_text().splitlines(keepends=True)
    out = [header]
    for k in range(1, STEPS + 1):
        for row in rows:
            assert row.startswith("13,")
            out.append(f"{k}," + row[3:])
    kd.write_text("".join(out))
    return root


def test_one_breakdown_finding_over_all_steps(six_steps):
    report = profan.analyze(six_steps)
    (f,) = [f for f in report.findings if f.check == "step-breakdown"]
    assert f.step is None and f"{STEPS} steps (1–{STEPS})" in f.message
    assert report.breakdown["step"].n_unique() == STEPS  # per-step numbers are in the table
    _, rows = raw_rows(six_steps / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    comm = [n for n, r in rows.items() if r["Accelerator Core"] == "COMMUNICATION"]
    ev = next(e for e in f.evidence if e.select.get("bucket") == "communication")
    assert "step" not in ev.select and ev.row_count == len(comm) == 15 * STEPS
    assert ev.values["time_us"] == pytest.approx(sum(fnum(rows[n]["Duration(us)"]) for n in comm), rel=1e-9)
    sel = select_kernel_rows(six_steps, ev.file, ev.select)
    assert sorted(sel["src_line"].to_list()) == comm
    # the largest rows are cited, and they are rows of that bucket
    assert set(ev.lines) <= set(comm)
    assert f.metrics["communication_share"] == pytest.approx(
        report.breakdown.filter(pl.col("bucket") == "communication")["time_us"].sum()
        / report.breakdown["time_us"].sum(),
        abs=1e-4,
    )


def test_all_steps_table_and_markdown_for_a_long_capture(six_steps, tmp_path):
    """A long capture's report carries each bucket over all steps, with the lowest and highest share it takes of
    one step; the Markdown shows that table instead of thousands of per-step rows. Step 6 here loses its
    communication rows, so communication's lowest share of a step is 0. The top kernels are listed over all
    steps too."""
    root = tmp_path / "job"
    shutil.copytree(six_steps, root)
    kd = root / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    header, *rows = kd.read_text().splitlines(keepends=True)
    kd.write_text(header + "".join(r for r in rows if not (r.startswith(f"{STEPS},") and ",COMMUNICATION," in r)))
    _, raw = raw_rows(kd)
    total = sum(fnum(r["Duration(us)"]) for r in raw.values())
    comm = {n: fnum(r["Duration(us)"]) for n, r in raw.items() if r["Accelerator Core"] == "COMMUNICATION"}
    step1 = [r for r in raw.values() if r["Step Id"] == "1"]
    share1 = sum(fnum(r["Duration(us)"]) for r in step1 if r["Accelerator Core"] == "COMMUNICATION") / sum(
        fnum(r["Duration(us)"]) for r in step1
    )

    assert "breakdown_all_steps" not in profan.analyze(root).tables  # 6 steps: listed per step by default
    rules = tmp_path / "long.toml"  # the threshold is the rule pack's, and a user file can lower it
    rules.write_text('[[check]]\nid = "step-breakdown"\ntable_steps_max = 4\n')
    report = profan.analyze(root, rules=[rules])
    over = report.tables["breakdown_all_steps"]
    c = over.filter(pl.col("bucket") == "communication").row(0, named=True)
    assert c["rank"] == 0 and c["steps"] == STEPS and c["kernels"] == len(comm) == 15 * (STEPS - 1)
    assert c["time_us"] == pytest.approx(sum(comm.values()), rel=1e-9)
    assert c["share"] == pytest.approx(sum(comm.values()) / total, rel=1e-9)
    assert c["step_share_min"] == 0.0 and c["step_share_max"] == pytest.approx(share1, rel=1e-9)
    assert over["share"].sum() == pytest.approx(1.0)

    tk = report.tables["top_kernels"]
    assert tk["step"].null_count() == tk.height and set(tk["steps"].to_list()) == {STEPS}
    md = render(report, "md")
    assert "| 0 | 6 | communication |" in md and "share of a step (min–max)" in md
    assert "| 0 | 1 | communication |" not in md  # no per-step rows for this rank


def test_report_does_not_depend_on_the_order_groups_are_reduced_in(six_steps, monkeypatch):
    """Steps 1–6 hold the same kernels with the same times, so ties are everywhere. polars' hash grouping hands
    the kernel groups over in an order that varies from run to run; the report must not follow it."""
    reduce_file = kernel_pass._group_rows
    docs = []
    for seed in range(4):

        def shuffled(*args, seed=seed, **kw):
            groups, *rest = reduce_file(*args, **kw)
            return groups.sample(fraction=1.0, shuffle=True, seed=seed), *rest

        monkeypatch.setattr(kernel_pass, "_group_rows", shuffled)
        d = profan.analyze(six_steps).to_dict()
        d["meta"].pop("timings_s")
        docs.append(msgspec.json.encode(d))
    assert len(set(docs)) == 1
    assert sum(t["step"] is not None for t in msgspec.json.decode(docs[0])["tables"]["top_kernels"]) > 5 * STEPS
