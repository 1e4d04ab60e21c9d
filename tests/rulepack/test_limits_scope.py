"""An analysis's bounds hold for its call only: a rules file's `[limits]` must not reach a later analysis, render or
read-back in the same library process (`profan.rulepack.limits.scoped`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import profan
from profan.app.drill import load_report_or_analyze
from profan.model.errors import ProfanInputError
from profan.render import render
from profan.rulepack import limits

NCCL_GZ = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"


def _rules(tmp_path: Path, name: str, **bounds: int) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text("[limits]\n" + "".join(f"{key} = {value}\n" for key, value in bounds.items()))
    return str(path)


def test_one_analysis_bounds_do_not_reach_a_later_read_back_or_analysis(tmp_path):
    # the first analysis lowers the report bound far below its own JSON report (no reader meets it while analysing)
    first = profan.analyze(NCCL_GZ, rules=[_rules(tmp_path, "low_report", max_report_bytes=1000)])
    out = tmp_path / "report.json"
    out.write_text(render(first, "json"), encoding="utf-8")
    assert out.stat().st_size > 100_000
    assert limits.active() == limits.defaults()
    loaded, _root = load_report_or_analyze(out)  # refused as "more than a report may be" while the bound leaked
    assert [finding.id for finding in loaded.findings] == [finding.id for finding in first.findings]

    # a second analysis whose inflate bound refuses the gzip trace, then a third with the defaults reads it
    fresh = tmp_path / "fresh" / NCCL_GZ.name  # a copy no parse cache holds, so the trace is read again
    fresh.parent.mkdir()
    fresh.write_bytes(NCCL_GZ.read_bytes())
    with pytest.raises(ProfanInputError, match="more than 100,000 bytes, the bound max_inflated_bytes"):
        profan.analyze(fresh, rules=[_rules(tmp_path, "low_inflate", max_inflated_bytes=100_000)])
    assert limits.active() == limits.defaults()
    third = profan.analyze(fresh)  # read afresh under the defaults
    assert [(finding.id, finding.check, finding.metrics) for finding in third.findings] == [
        (finding.id, finding.check, finding.metrics) for finding in first.findings
    ]


def test_scoped_restores_the_bounds_before_it_even_when_the_call_fails():
    outer = limits.defaults().override({"max_ranks": 7}, "outer.toml")
    inner = limits.defaults().override({"max_ranks": 3}, "inner.toml")
    with limits.scoped(outer):
        with pytest.raises(RuntimeError), limits.scoped(inner):
            assert limits.active().max_ranks == 3
            raise RuntimeError("a reader failed")
        assert limits.active().max_ranks == 7
    assert limits.active() == limits.defaults()
