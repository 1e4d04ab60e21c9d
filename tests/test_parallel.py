"""Reading ranks in worker processes gives exactly the sequential result; input errors still surface as one line."""

from __future__ import annotations

import msgspec
import polars as pl
import pytest
from conftest import FIXTURES

import profan
from profan.errors import ProfanInputError
from profan.parallel import resolve_jobs
from profan.synth import generate


def _canon(f) -> dict:
    d = f.to_dict()
    for ev in d["evidence"]:
        for kind in ("lines", "events", "pointers"):
            if kind in ev:
                ev[kind] = sorted(ev[kind])
    return d


def test_process_pool_matches_sequential(tmp_path):
    generate(tmp_path / "c", ranks=8, layers=2, steps=1, seed=9, straggler_rank=6, straggler_extra_us=3000.0,
             trace=False)
    seq = profan.analyze(tmp_path / "c", jobs=1)
    par = profan.analyze(tmp_path / "c", jobs=2)
    # rows of equal duration may be listed in another order (polars' group order depends on its thread count),
    # so cited locators are compared as sets; everything else must be identical
    assert [_canon(f) for f in par.findings] == [_canon(f) for f in seq.findings]
    assert set(par.tables) == set(seq.tables)
    for name, t in seq.tables.items():  # same rows; sums may differ in the last bit (summation order)
        p = par.tables[name]
        assert p.height == t.height and p.columns == t.columns, name
        for c, dt in t.schema.items():
            if dt.is_numeric():
                assert p[c].sum() == pytest.approx(t[c].sum(), rel=1e-9, abs=1e-9), (name, c)
            elif dt == pl.String and name != "top_kernels":  # top-N lists may pick another of equal-time ties
                assert sorted(p[c].drop_nulls()) == sorted(t[c].drop_nulls()), (name, c)
    assert [f.rank for f in par.findings if f.check == "straggler" and f.severity != "info"] == [6]


def test_worker_input_error_is_one_profan_error(tmp_path):
    generate(tmp_path / "c", ranks=4, layers=1, steps=1, seed=2, trace=False)
    bad = next((tmp_path / "c").glob("*41002*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    bad.write_text(bad.read_text().splitlines()[0] + "\n")  # header only
    with pytest.raises(ProfanInputError, match="no data rows"):
        profan.analyze(tmp_path / "c", jobs=2)


def test_jobs_resolution(monkeypatch):
    monkeypatch.delenv("PROFAN_JOBS", raising=False)
    assert resolve_jobs(None, 64) == 1  # a library call never starts processes unasked
    assert resolve_jobs(3, 2) == 2  # never more workers than ranks
    assert resolve_jobs(0, 4) == 1  # automatic: small jobs stay sequential
    monkeypatch.setenv("PROFAN_JOBS", "2")
    assert resolve_jobs(None, 64) == 2


def test_real_cluster_report_is_identical_sequential_and_parallel():
    """On real traces the whole report — every cited row, every example name, every table — is the same whether
    ranks are read in this process or in workers: ties in time are broken by name or row, never by the order
    a hash grouping happened to produce."""
    def doc(jobs: int) -> dict:
        d = profan.analyze(FIXTURES / "torch" / "dlrm_v100_8rank", jobs=jobs).to_dict()
        d["meta"].pop("timings_s")
        return d

    seq, par, again = doc(1), doc(2), doc(1)
    assert [f["check"] for f in seq["findings"]].count("straggler") >= 1
    # as text, so the order of keys and rows counts too
    assert msgspec.json.encode(par) == msgspec.json.encode(seq) == msgspec.json.encode(again)
