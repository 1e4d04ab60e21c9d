"""The analysis contract (`profan.analyses.contract`), severities as rule-pack data and supersession as data.

An analysis declares what it reads and returns one Section; the pipeline is an ordered list of them. These tests
hold the runner to that: list order is merge order (a threaded analysis too), an analysis sees only what it
declared, and a check's severities and `supersedes` come from rules/checks.toml or a user file — never from code.
"""

from __future__ import annotations

import json
import threading

import polars as pl
import pytest
from conftest import QWEN3, analysed

import profan
from profan import pipeline
from profan.analyses.contract import Analysis, Job, Section, drop_superseded, run_analyses
from profan.model.errors import ProfanInputError
from profan.model.evidence import cite_lines
from profan.model.findings import Finding
from profan.rulepack.pack import load, require_known_checks


def _finding(check: str, rank: int = 0, step: int | None = 1, severity: str = "warning") -> Finding:
    return Finding(
        check=check,
        severity=severity,
        title=f"{check} {rank} {step}",
        message="m",
        evidence=(cite_lines("step_trace_time.csv", [2], 1, {}),),
        rank=rank,
        step=step,
    )


def _job() -> Job:
    return Job(ranks=[], pack=load())


# ------------------------------------------------------------------------------------------ the runner


def test_analyses_run_and_merge_in_the_listed_order():
    """Main-thread analyses run in list order; a threaded one starts first but is merged at its place, so tables,
    findings and notes come out in list order whichever finishes first."""
    ran: list[str] = []
    threaded_started = threading.Event()

    def make(name: str):
        def run(job: Job) -> Section:
            if name == "late":
                threaded_started.set()
            ran.append(name)
            return Section(tables={name: pl.DataFrame({"x": [1]})}, notes=[f"note {name}"])

        return run

    def first(job: Job) -> Section:
        assert threaded_started.wait(5)  # the threaded analysis was started before the list's first entry ran
        return make("a")(job)

    analyses = [
        Analysis("a", first),
        Analysis("b", make("b")),
        Analysis("late", make("late"), own_thread=True),
        Analysis("c", make("c")),
    ]
    merged = run_analyses(analyses, _job())
    assert [n for n in ran if n != "late"] == ["a", "b", "c"]
    assert list(merged.tables) == ["a", "b", "late", "c"]
    assert merged.notes == ["note a", "note b", "note late", "note c"]


def test_an_analysis_sees_only_what_it_declared():
    """Declared tables and (if asked) earlier findings are handed over; anything else is not there."""
    seen: dict[str, object] = {}

    def maker(job: Job) -> Section:
        return Section(
            tables={"made": pl.DataFrame({"x": [1]}), "other": pl.DataFrame({"y": [2]})},
            findings=[_finding("device-idle")],
        )

    def reader(job: Job) -> Section:
        seen["made"] = job.table("made")["x"].to_list()
        seen["findings"] = [f.check for f in job.findings]
        with pytest.raises(KeyError, match="other"):
            job.table("other")
        return Section()

    def blind(job: Job) -> Section:
        seen["blind"] = (dict(job.tables), job.findings)
        return Section()

    run_analyses(
        [
            Analysis("maker", maker),
            Analysis("reader", reader, reads=("made",), reads_findings=True),
            Analysis("blind", blind),
        ],
        _job(),
    )
    assert seen == {"made": [1], "findings": ["device-idle"], "blind": ({}, ())}


def test_reading_a_table_no_earlier_analysis_made_fails():
    with pytest.raises(KeyError, match="no earlier analysis made"):
        run_analyses([Analysis("reader", lambda job: Section(), reads=("missing",))], _job())
    with pytest.raises(ValueError, match="own thread"):
        Analysis("x", lambda job: Section(), reads=("steps",), own_thread=True)
    with pytest.raises(ValueError, match="makes table"):
        run_analyses(
            [
                Analysis("a", lambda job: Section(tables={"t": pl.DataFrame()})),
                Analysis("b", lambda job: Section(tables={"t": pl.DataFrame()})),
            ],
            _job(),
        )


def test_adding_an_analysis_is_one_entry_in_the_list(monkeypatch):
    """An analysis appended to `pipeline.ANALYSES` reads the findings of the ones before it and its own finding,
    table and note reach the report — the plug for analyses that explain findings across ranks."""

    def explain_all(job: Job) -> Section:
        worst = next(f for f in job.findings if f.severity == "critical")
        return Section(
            tables={"explained": pl.DataFrame({"check": [worst.check]})},
            findings=[
                Finding(
                    check=worst.check,
                    severity="info",
                    title="explained",
                    message="m",
                    evidence=worst.evidence,
                    rank=worst.rank,
                    step=worst.step,
                )
            ],
            notes=[f"explained {len(job.findings)} findings"],
        )

    plain = analysed(QWEN3)
    monkeypatch.setattr(
        pipeline, "ANALYSES", (*pipeline.ANALYSES, Analysis("explain", explain_all, reads_findings=True))
    )
    report = profan.analyze(QWEN3)
    assert report.notes[-1] == f"explained {len(plain.ungrouped())} findings"
    assert list(report.tables)[-1] == "explained"
    assert len(report.ungrouped()) == len(plain.ungrouped()) + 1


def test_the_pipeline_list_names_each_analysis_once():
    names = [a.name for a in pipeline.ANALYSES]
    assert len(names) == len(set(names))
    assert [a.name for a in pipeline.ANALYSES if a.own_thread] == ["cross-rank"]


# ------------------------------------------------------------------------------------------ checks and severities


def test_an_unknown_check_fails_loudly():
    pack = load()
    with pytest.raises(KeyError, match="no check 'no-such-check'"):
        pack.check("no-such-check")
    with pytest.raises(ValueError, match="unknown check 'no-such-check'"):
        require_known_checks([_finding("device-idle"), _finding("no-such-check")])
    with pytest.raises(ValueError, match="unknown check 'no-such-check'"):
        bad = Analysis("made-up", lambda job: Section(findings=[_finding("no-such-check")]))
        run_analyses([bad], _job())
    with pytest.raises(ValueError, match="unknown severity"):
        _finding("device-idle", severity="doom")
    with pytest.raises(ValueError, match="unknown severity"):
        _finding("device-idle", severity="Warning")


def test_a_report_file_with_an_unknown_check_is_refused_in_one_line(tmp_path):
    from profan.app.drill import load_report_or_analyze

    doc = {**analysed(QWEN3).to_dict(), "findings": [{**_finding("device-idle").to_dict(), "check": "made-up"}]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ProfanInputError, match=r"not a profan JSON report \(unknown check 'made-up'"):
        load_report_or_analyze(path)


def test_a_report_with_an_unknown_check_or_severity_is_not_read():
    doc = _finding("device-idle").to_dict()
    assert Finding.from_dict(doc).check == "device-idle"
    with pytest.raises(ValueError, match="unknown check 'made-up'"):
        require_known_checks([Finding.from_dict({**doc, "check": "made-up"})])
    with pytest.raises(ValueError, match="unknown severity"):
        Finding.from_dict({**doc, "severity": "fatal"})


@pytest.mark.parametrize("setting", ['severity = "doom"', 'no_straggler_severity = "urgent"'])
def test_a_user_severity_must_be_a_severity(tmp_path, setting):
    rules = tmp_path / "mine.toml"
    rules.write_text(f'[[check]]\nid = "straggler"\n{setting}\n', encoding="utf-8")
    with pytest.raises(ProfanInputError, match="must be one of critical, warning, info"):
        load([rules])


def test_a_table_of_severities_is_set_entry_by_entry(tmp_path):
    """Setting one pipe's severity keeps the others' built-in ones; a bad one is refused."""
    rules = tmp_path / "mine.toml"
    rules.write_text('[[check]]\nid = "kernel-boundness"\npipe_severity = { mte2 = "critical" }\n', encoding="utf-8")
    assert load([rules]).check("kernel-boundness")["pipe_severity"] == {
        "mac": "info",
        "vec": "info",
        "mte2": "critical",
    }
    rules.write_text('[[check]]\nid = "kernel-boundness"\npipe_severity = { mac = "high" }\n', encoding="utf-8")
    with pytest.raises(ProfanInputError, match="pipe_severity"):
        load([rules])


def test_every_fixed_severity_of_the_builtin_checks_is_a_severity():
    pack = load()
    for c in pack.checks.values():
        for key, value in c.params.items():
            if key == "severity" or key.endswith("_severity"):
                for v in value.values() if isinstance(value, dict) else [value]:
                    assert v in ("critical", "warning", "info"), (c.id, key)
    with pytest.raises(KeyError, match="no fixed severity"):
        _ = pack.check("device-idle").severity  # graded by its thresholds only


def test_severities_come_from_the_rule_pack(tmp_path):
    """A user file changes what a check's findings are without touching code: the step breakdowns and the
    'no straggler' statement of the Qwen3 sample become warnings."""
    rules = tmp_path / "mine.toml"
    rules.write_text(
        '[[check]]\nid = "step-breakdown"\nseverity = "warning"\n'
        '[[check]]\nid = "straggler"\nno_straggler_severity = "warning"\n',
        encoding="utf-8",
    )
    plain = analysed(QWEN3)
    changed = profan.analyze(QWEN3, rules=[rules])
    for check in ("step-breakdown", "straggler"):
        before = [f for f in plain.ungrouped() if f.check == check]
        after = [f for f in changed.ungrouped() if f.check == check]
        assert before and {f.severity for f in before} == {"info"}
        assert [f.title for f in after] == [f.title for f in before] and {f.severity for f in after} == {"warning"}


# ------------------------------------------------------------------------------------------ supersession


def test_supersession_is_data():
    """comm-exposed-split supersedes exposed-communication (rules/checks.toml) for the same rank and step only."""
    pack = load()
    assert pack.check("comm-exposed-split").supersedes == ("exposed-communication",)
    plain = [
        _finding("exposed-communication", rank=0),
        _finding("exposed-communication", rank=1),
        _finding("device-idle", rank=0),
    ]
    split = _finding("comm-exposed-split", rank=0)
    kept = drop_superseded([*plain, split], pack)
    assert [(f.check, f.rank) for f in kept] == [
        ("exposed-communication", 1),
        ("device-idle", 0),
        ("comm-exposed-split", 0),
    ]
    # wherever the superseding finding comes from in the list, and across analyses
    merged = run_analyses(
        [Analysis("a", lambda job: Section(findings=[split])), Analysis("b", lambda job: Section(findings=plain))],
        Job(ranks=[], pack=pack),
    )
    assert [(f.check, f.rank) for f in merged.findings] == [
        ("comm-exposed-split", 0),
        ("exposed-communication", 1),
        ("device-idle", 0),
    ]


def test_supersession_follows_the_rules_file(tmp_path):
    """With `supersedes = []` both findings of a rank and step stay; a check id that does not exist is refused."""
    rules = tmp_path / "mine.toml"
    rules.write_text('[[check]]\nid = "comm-exposed-split"\nsupersedes = []\n', encoding="utf-8")
    report = profan.analyze(QWEN3, rules=[rules])
    both = [
        (f.check, f.rank, f.step)
        for f in report.ungrouped()
        if f.check in ("exposed-communication", "comm-exposed-split")
    ]
    assert sorted(both) == sorted(
        [(c, r, 13) for c in ("comm-exposed-split", "exposed-communication") for r in range(4)]
    )
    rules.write_text('[[check]]\nid = "comm-exposed-split"\nsupersedes = ["exposed-comunication"]\n', encoding="utf-8")
    with pytest.raises(ProfanInputError, match="supersedes"):
        load([rules])
