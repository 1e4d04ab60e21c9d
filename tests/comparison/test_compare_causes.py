"""`profan compare` as the diagnosis of two runs: each side's causes (as `profan analyze` finds them) matched by
check and ranks, the verdict leading every format, on the gloo pairs whose fault each ground_truth.toml names."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import jsonschema
import pytest
import tomllib
from conftest import TORCH, run_cli

import profan
from profan.comparison.cause_changes import match_causes, sentence
from profan.comparison.compare import compare
from profan.model.textfmt import fmt_ranks, ms
from profan.render.compare_markdown import render_compare_markdown
from profan.rulepack.pack import load

PAIRS = TORCH / "gloo_gain_pairs"


def truth(name: str) -> dict:
    return tomllib.loads((PAIRS / name / "ground_truth.toml").read_text())


@pytest.fixture(scope="module")
def analysed() -> dict:
    """`profan analyze` of each side the tests compare: the causes the verdict must carry."""
    return {name: profan.analyze(PAIRS / name) for name in ("sleep", "compute", "loader")}


@pytest.fixture(scope="module")
def clean_sleep():
    return compare(PAIRS / "clean", PAIRS / "sleep")


def rows(report) -> list[dict]:
    table = report.tables.get("compare_causes")
    return [] if table is None else table.to_dicts()


def test_a_planted_sleep_is_a_new_straggler_cause_with_the_gain_analyze_gives(clean_sleep, analysed):
    fault = truth("sleep")
    assert fault["fault"] == "sleep" and truth("clean")["fault"] == "none"
    (cause,) = [c for c in analysed["sleep"].causes if c.check == "straggler"]
    assert cause.ranks == (fault["fault_rank"],)
    (row,) = rows(clean_sleep)
    assert (row["status"], row["check"], row["b_ranks"], row["a_ranks"]) == ("appeared", "straggler", [2], None)
    assert row["b_impact_us"] == pytest.approx(cause.impact_us, abs=1e-3)
    assert row["b_severity"] == cause.severity == "critical" and row["b_steps"] == list(cause.steps)
    lead = f"B: rank {fault['fault_rank']} is a straggler (new cause, gain {ms(cause.impact_us)} per step)"
    assert row["sentence"] == lead == "B: rank 2 is a straggler (new cause, gain 60.6 ms per step)"
    # the Markdown leads with it, before the symptom findings (which stay)
    text = render_compare_markdown(clean_sleep)
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Verdict" and "## Findings (3)" in sections
    first = text.split("## Verdict\n\n", 1)[1].splitlines()[0]
    assert first == f"- **critical** · {lead}"
    assert any(f.title.startswith("Regression: communication") for f in clean_sleep.findings)


def test_the_sleep_gone_is_a_vanished_cause(analysed):
    report = compare(PAIRS / "sleep", PAIRS / "clean")
    (cause,) = analysed["sleep"].causes
    (row,) = rows(report)
    assert (row["status"], row["a_ranks"], row["b_ranks"], row["b_impact_us"]) == ("vanished", [2], None, None)
    assert row["a_impact_us"] == pytest.approx(cause.impact_us, abs=1e-3)
    assert row["sentence"] == f"A: rank 2 is a straggler (gone in B; gain {ms(cause.impact_us)} per step in A)"


def test_two_clean_runs_have_no_cause_that_appeared_or_vanished():
    report = compare(PAIRS / "clean", PAIRS / "clean_again")
    assert truth("clean_again")["fault"] == "none"
    assert not [row for row in rows(report) if row["status"] in ("appeared", "vanished") and row["severity"] != "info"]
    verdict = render_compare_markdown(report).split("## Verdict\n\n", 1)[1].splitlines()[0]
    assert verdict.startswith("No cause on either side")


def test_a_compute_straggler_and_a_data_loader_appear_where_the_truth_planted_them(analysed):
    fault = truth("compute")
    (row,) = rows(compare(PAIRS / "clean", PAIRS / "compute"))
    (cause,) = analysed["compute"].causes
    assert (row["status"], row["check"], row["b_ranks"]) == ("appeared", "straggler", [fault["fault_rank"]])
    assert (
        row["sentence"]
        == f"B: rank {fault['fault_rank']} is a straggler (new cause, gain {ms(cause.impact_us)} per step)"
    )
    loader = truth("loader")
    # the clean side's info causes (rank 2's small compute lead) vanish beside it; the one that appeared is the loader's
    (row,) = [r for r in rows(compare(PAIRS / "loader_clean", PAIRS / "loader")) if r["status"] == "appeared"]
    (cause,) = analysed["loader"].causes
    assert (row["status"], row["check"], row["b_ranks"]) == ("appeared", "idle-between-steps", loader["loader_ranks"])
    assert row["b_impact_us"] == pytest.approx(cause.impact_us, abs=1e-3)
    assert row["sentence"] == (
        f"B: the device waits for the host before each step on ranks {fmt_ranks(loader['loader_ranks'])} "
        f"(new cause, gain {ms(cause.impact_us)} per step)"
    )


def test_the_same_straggler_in_both_runs_is_one_changed_cause(analysed):
    """Sleep and compute both plant rank 2: one straggler cause, matched, its gain A → B side by side."""
    (row,) = rows(compare(PAIRS / "sleep", PAIRS / "compute"))
    gain_a, gain_b = analysed["sleep"].causes[0].impact_us, analysed["compute"].causes[0].impact_us
    assert (row["status"], row["a_ranks"], row["b_ranks"], row["ranks_changed"]) == ("changed", [2], [2], False)
    assert (row["a_impact_us"], row["b_impact_us"]) == (
        pytest.approx(gain_a, abs=1e-3),
        pytest.approx(gain_b, abs=1e-3),
    )
    assert row["sentence"] == (
        f"B: rank 2 is a straggler (changed, gain {ms(gain_a)} per step in A → gain {ms(gain_b)} per step in B)"
    )


def test_the_match_rule_same_check_on_other_ranks(analysed):
    """The real straggler of sleep, placed on other ranks (a fault the captures lack): disjoint ranks are two
    faults (vanished + appeared), overlapping ranks one cause that changed ranks; an equal gain is unchanged."""
    pack = load([])
    cause = analysed["sleep"].causes[0]
    moved = dataclasses.replace(cause, ranks=(3,))
    changes = match_causes([cause], [moved], pack)
    assert [(c.status, c.cause_a is not None, c.cause_b is not None) for c in changes] == [
        ("appeared", False, True),
        ("vanished", True, False),
    ]
    assert sentence(changes[0], pack) == f"B: rank 3 is a straggler (new cause, gain {ms(cause.impact_us)} per step)"
    wider = dataclasses.replace(cause, ranks=(2, 3))
    (change,) = match_causes([cause], [wider], pack)
    assert (change.status, change.ranks_changed) == ("changed", True)
    assert sentence(change, pack) == (
        f"B: ranks 2, 3 are a straggler (changed ranks: rank 2 in A → ranks 2, 3 in B; gain {ms(cause.impact_us)} "
        f"per step in A → gain {ms(cause.impact_us)} per step in B)"
    )
    (same,) = match_causes([cause], [dataclasses.replace(cause, impact_us=cause.impact_us + 900.0)], pack)
    assert same.status == "unchanged"
    bound = dataclasses.replace(cause, impact_us=None, bound_us=12_000.0)
    (change,) = match_causes([], [bound], pack)
    assert sentence(change, pack) == "B: rank 2 is a straggler (new cause, bound 12.0 ms per step)"


def test_json_html_xlsx_and_brief_carry_the_verdict(tmp_path):
    out = tmp_path / "c.json"
    res = run_cli("compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), "-f", "json", "-o", str(out), "--brief")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    (row,) = doc["tables"]["compare_causes"]
    assert set(row) == {
        "status", "ranks_changed", "check", "severity", "sentence",
        *(f"{side}_{name}" for side in "ab" for name in (
            "ranks", "steps", "impact_us", "bound_us", "impact_share", "step_us", "severity", "title")),
    }  # fmt: skip
    assert row["b_title"] == "Rank 2 arrives last at the collectives (host gap): the other ranks wait for it"
    brief = json.loads(res.stdout)
    assert brief["verdict"] == [{"severity": "critical", "sentence": row["sentence"]}]
    schema = json.loads(run_cli("schema", "brief").stdout)
    jsonschema.validate(brief, schema, cls=jsonschema.Draft202012Validator)
    assert set(schema["properties"]["verdict"]["items"]["properties"]) == set(brief["verdict"][0])
    html = tmp_path / "c.html"
    assert run_cli("compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), "-o", str(html), "-q").returncode == 0
    page = html.read_text()
    assert page.index('id="verdict"') < page.index(row["sentence"]) < page.index('id="findings"')
    xlsx = tmp_path / "c.xlsx"
    assert run_cli("compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), "-o", str(xlsx), "-q").returncode == 0
    import openpyxl

    summary = [[cell.value for cell in line] for line in openpyxl.load_workbook(xlsx)["Summary"].iter_rows()]
    assert summary[2][0] == "Verdict" and summary[3][:2] == ["critical", row["sentence"]]


def test_fail_on_regression_causes_fails_on_the_appeared_straggler_only():
    args = ("-q", "-f", "json", "--fail-on-regression", "causes")
    res = run_cli("compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), *args)
    assert res.returncode == 1
    assert "regression: B: rank 2 is a straggler (new cause, gain 60.6 ms per step)" in res.stderr
    assert run_cli("compare", str(PAIRS / "sleep"), str(PAIRS / "clean"), *args).returncode == 0


def test_a_step_profiled_in_one_run_only_is_said(tmp_path, analysed):
    """A copy of the sleep run without its ProfilerStep#5 markers: step 5 is in A only. The comparison names it
    (a warning with its work, a note on what each side's causes are measured over); B is still diagnosed."""
    side = tmp_path / "sleep_3steps"
    side.mkdir()
    for trace in sorted((PAIRS / "sleep").glob("rank*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        kept = [event for event in doc["traceEvents"] if event.get("name") != "ProfilerStep#5"]
        assert len(doc["traceEvents"]) - len(kept) == 1
        (side / trace.name).write_bytes(gzip.compress(json.dumps({**doc, "traceEvents": kept}).encode()))
    shutil.copy(PAIRS / "sleep" / "ground_truth.toml", side)
    report = compare(PAIRS / "clean", side)
    (alone,) = [w for w in report.warnings if "no counterpart" in w]
    assert alone.startswith("compare: step 5 of A has no counterpart in B (1 step; ")
    assert (
        "compare: each side is diagnosed over its own profiled steps: A over 2–5, B over 2–4 (step 5 in A only); "
        "gains are per step of each side." in report.notes
    )
    (row,) = rows(report)
    assert (row["status"], row["b_ranks"], row["b_steps"]) == ("appeared", [2], [2, 3, 4])
    assert row["b_impact_us"] == pytest.approx(profan.analyze(side).causes[0].impact_us, abs=1e-3)


def test_untrusted_text_in_a_verdict_line_forms_nothing(clean_sleep, tmp_path):
    """A verdict line holds cause titles, which hold names from the traces: escaped in Markdown and HTML, text
    (never a formula) in Excel."""
    import openpyxl
    import polars as pl

    from profan.render.html import build_html
    from profan.render.xlsx import render_xlsx

    evil = "=HYPERLINK(1) <img src=x onerror=alert(1)> [x](http://h/p.png)"
    table = clean_sleep.tables["compare_causes"].with_columns(pl.lit(evil).alias("sentence"))
    report = dataclasses.replace(clean_sleep, tables={**clean_sleep.tables, "compare_causes": table})
    text = render_compare_markdown(report)
    assert "<img" not in text
    assert "- **critical** · =HYPERLINK(1) &lt;img src=x onerror=alert(1)&gt; \\[x\\](http\\://h/p.png)" in text
    page = build_html(report)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    render_xlsx(report, tmp_path / "c.xlsx")
    cell = openpyxl.load_workbook(tmp_path / "c.xlsx")["Summary"]["B4"]
    assert (cell.value, cell.data_type) == (evil, "s")


def _spread_from_breakdown(rep, bucket: str) -> float:
    """The bucket's standard deviation over the run's steps of its time per step (mean over ranks), read from
    `profan analyze`'s breakdown table: an independent path to the compare's noise floor."""
    import polars as pl

    rows = rep.tables["breakdown"].filter((pl.col("bucket") == bucket) & pl.col("step").is_not_null())
    per_step = rows.group_by("step").agg(pl.col("time_us").sum() / rows["rank"].n_unique())
    return float(per_step["time_us"].std())


def test_the_same_run_profiled_twice_is_no_regression():
    """clean and clean_again are one run's program run twice (PROVENANCE.md: 5.5 ms apart in step time): the
    buckets that grew stay within their own step-to-step spread, so no regression is louder than info, and the
    floor each states is that spread, recomputed here from both sides' analyze breakdowns."""
    rep = compare(PAIRS / "clean", PAIRS / "clean_again")
    moved = [f for f in rep.findings if f.check == "compare-regression" and "bucket" in f.metrics]
    assert moved and all(f.severity == "info" for f in rep.findings if f.check == "compare-regression")
    sides = [profan.analyze(PAIRS / name) for name in ("clean", "clean_again")]
    for f in moved:
        want = max(_spread_from_breakdown(side, f.metrics["bucket"]) for side in sides)
        assert f.metrics["noise_us"] == pytest.approx(want, rel=1e-3)
        if f.metrics["direction"] == "regression":
            assert 0 < f.metrics["delta_us"] <= f.metrics["noise_us"]
            assert "noise, not a regression" in f.message


def test_a_planted_fault_is_a_regression_past_the_spread(clean_sleep):
    (comm,) = [f for f in clean_sleep.findings if f.metrics.get("bucket") == "communication"]
    assert comm.severity == "critical" and comm.metrics["delta_us"] > 3 * comm.metrics["noise_us"]
