"""The one-rank analyses run as one set of queries over all ranks (keyed by rank). Their result must be exactly
what each rank gives alone, stacked in rank order — on real multi-rank captures of both kinds."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import ASCEND, FIXTURES, QWEN3, fnum, raw_rows
from polars.testing import assert_frame_equal

from profan.analyses.per_rank.breakdown import sort_breakdown
from profan.analyses.per_rank.section import rank_sections
from profan.ranks.rankmap import load_ranks
from profan.rulepack.pack import load
from profan.sources.discovery.discover import discover

ALEXNET2 = ASCEND / "msinsight-alexnet-2rank-2025" / "level2"
DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"


def _ranks(path):
    disc = discover(path)
    pack = load()
    return load_ranks(disc.ranks, disc.root, pack, jobs=1), pack, disc.root


@pytest.mark.parametrize("path", [ALEXNET2, QWEN3, DLRM], ids=["alexnet-level2", "qwen3", "dlrm"])
def test_all_ranks_at_once_equal_each_rank_alone(path):
    ranks, pack, _ = _ranks(path)
    assert len(ranks) >= 2
    together = rank_sections(ranks, pack)
    tables, findings = together.tables, _by_check(together.findings)
    alone = [rank_sections([r], pack) for r in ranks]
    for name in tables:
        parts = [a.tables[name] for a in alone if not a.tables[name].is_empty()]
        if not parts:
            assert tables[name].is_empty(), name
            continue
        stacked = pl.concat(parts, how="diagonal_relaxed")
        if name == "breakdown":
            stacked = sort_breakdown(stacked)
        # floats to the last few ulps: a share's denominator sums the same values, in another order
        assert_frame_equal(tables[name], stacked, rel_tol=1e-12, abs_tol=1e-9)
    for check in findings:
        assert [f.to_dict() for f in findings[check]] == [
            f.to_dict() for a in alone for f in _by_check(a.findings).get(check, [])
        ], check
    # not vacuous: every capture yields per-rank breakdowns and findings for more than one rank
    assert tables["breakdown"]["rank"].n_unique() >= 2
    assert len({f.rank for f in findings["step-breakdown"]}) >= 2


def _by_check(findings):
    out = {}
    for f in findings:
        out.setdefault(f.check, []).append(f)
    return out


def test_all_ranks_at_once_on_real_values():
    """alexnet level2, rank 1 among two: its communication bucket is the sum of its own HCCL rows, and the top
    kernels of that bucket cite rows of rank 1's file, not rank 0's."""
    ranks, pack, root = _ranks(ALEXNET2)
    tables = rank_sections(ranks, pack).tables
    r1 = next(r for r in ranks if r.rank == 1)
    _, rows = raw_rows(root / r1.files["kernel_details"])
    hccl = {
        line: row
        for line, row in rows.items()
        if row.get("Accelerator Core") == "HCCL" or row["Name"].startswith("hcom_")
    }
    assert hccl
    bd = tables["breakdown"].filter((pl.col("rank") == 1) & (pl.col("bucket") == "communication"))
    assert bd["time_us"].sum() == pytest.approx(sum(fnum(r["Duration(us)"]) for r in hccl.values()), abs=1e-6)
    tk = tables["top_kernels"].filter((pl.col("rank") == 1) & (pl.col("bucket") == "communication"))
    cited = [line for lines in tk["lines"].to_list() for line in lines]
    assert cited and set(cited) <= set(hccl)


def test_a_zero_unclassified_threshold_reports_only_ranks_with_such_rows(tmp_path):
    """A user rules file may set the unclassified-time threshold to 0. A rank with unclassified rows (alexnet
    level0: both) then gets the finding whatever its share; a rank with none (Qwen3) gets none — there is no
    row to cite — rather than an error."""
    rules = tmp_path / "zero.toml"
    rules.write_text('[[check]]\nid = "unclassified-time"\nwarning_share = 0.0\n', encoding="utf-8")
    pack = load([rules])
    for path, expect in ((ASCEND / "msinsight-alexnet-2rank-2025" / "level0", [0, 1]), (QWEN3, [])):
        disc = discover(path)
        ranks = load_ranks(disc.ranks, disc.root, pack, jobs=1)
        unc = [f for f in rank_sections(ranks, pack).findings if f.check == "unclassified-time"]
        assert [f.rank for f in unc] == expect
        for f in unc:
            g = next(r for r in ranks if r.rank == f.rank).groups.filter(pl.col("bucket") == "unclassified")
            assert f.evidence[0].row_count == g["count"].sum() > 0
            assert f.metrics["unclassified_us"] == round(g["time_us"].sum(), 3)


@pytest.mark.parametrize("path", [QWEN3, DLRM], ids=["qwen3", "dlrm"])
def test_top_kernels_in_batches_equal_all_ranks_at_once(path, monkeypatch):
    """`top_kernels` ranks a batch of ranks at a time to bound its working memory; the batches must not change
    the table: a bound of one group (every rank a batch of its own) and of two ranks' groups give the table of all
    ranks at once, in rank order, ranks given out of order."""
    from profan.analyses.per_rank import breakdown

    ranks, pack, _ = _ranks(path)
    steps_max = pack.check("step-breakdown")["table_steps_max"]
    whole = breakdown.top_kernels(ranks, steps_max)
    with_groups = [rank for rank in ranks if rank.groups is not None]
    assert whole["rank"].n_unique() == len(with_groups) >= 2
    assert whole["rank"].to_list() == sorted(whole["rank"].to_list())
    two_ranks = with_groups[0].groups.height + with_groups[1].groups.height
    for most in (1, two_ranks):
        batches = breakdown._rank_batches(list(reversed(ranks)), most)
        assert len(batches) >= (len(with_groups) if most == 1 else len(with_groups) // 2)
        assert [rank.rank for batch in batches for rank in batch] == sorted(rank.rank for rank in ranks)
        monkeypatch.setattr(breakdown, "TOP_BATCH_ROWS", most)
        assert_frame_equal(breakdown.top_kernels(list(reversed(ranks)), steps_max), whole)
