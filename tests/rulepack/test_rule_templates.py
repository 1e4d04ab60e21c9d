"""A --rules file whose cause or compare texts fill a name the check does not give is refused when the rule pack is
loaded, in one line naming the file, the check, the text and the name — not a KeyError from deep inside the report
(`profan.rulepack.pack._check_placeholders`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TORCH, analysed, assert_one_line_error, run_cli

import profan
from profan.model.errors import ProfanInputError
from profan.model.textfmt import fmt_ranks
from profan.rulepack import pack

PAIRS = TORCH / "gloo_gain_pairs"
DLRM = TORCH / "dlrm_v100_8rank"
NCCL = TORCH / "nccl_a100_1rank" / "nccl_data.json.gz"


def _rules(tmp_path: Path, check: str, table: str, body: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(f'[[check]]\nid = "{check}"\n[check.{table}]\n{body}\n', encoding="utf-8")
    return path


def test_compare_with_an_unknown_placeholder_is_one_line_naming_file_check_and_name(tmp_path):
    rules = _rules(tmp_path, "compare-causes", "compare", 'appeared = "B: {what} (new cause, {b_gain_typo})"')
    res = run_cli(
        "compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), "--rules", str(rules), "-o", str(tmp_path / "c.md")
    )
    assert res.returncode == 2 and "internal error" not in res.stderr
    assert_one_line_error(res, str(rules), "compare-causes", "appeared", "{b_gain_typo}")
    # the names the verdict's sentences do fill are listed, and only those
    assert "{a_ranks}, {a_worth}, {b_ranks}, {b_worth}, {what}" in res.stderr


def test_analyze_with_an_unknown_cause_placeholder_is_one_line(tmp_path):
    rules = _rules(tmp_path, "straggler", "cause", 'title = "Rank {rank} is late by {lateness_typo}"')
    res = run_cli("analyze", str(PAIRS / "sleep"), "--rules", str(rules), "-o", str(tmp_path / "r.md"))
    assert res.returncode == 2 and "internal error" not in res.stderr
    assert_one_line_error(res, str(rules), "straggler", "title", "{lateness_typo}")
    assert not (tmp_path / "r.md").exists()


def test_a_name_another_sentence_fills_is_taken_and_filled(tmp_path):
    """Every verdict sentence is filled with the same names: a user's `appeared` may say where the cause was in A."""
    rules = _rules(tmp_path, "compare-causes", "compare", 'appeared = "B: {what} (new cause; in A: {a_ranks})"')
    out = tmp_path / "cmp.md"
    res = run_cli("compare", str(PAIRS / "clean"), str(PAIRS / "sleep"), "--rules", str(rules), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert "B: rank 2 is a straggler (new cause; in A: the job)" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("table", "body", "needle"),
    [
        ("compare.phrases", 'straggler = "{rank_word} {rnks} is late"', "{rnks}"),  # a phrase: the phrases' names
        ("compare", 'gain = "gain {what} per step"', "{what}"),  # gain fills {value} only
        ("cause", 'action = "Fix rank {rank"', "no template"),  # a lone brace
    ],
)
def test_load_refuses_each_text_that_fills_what_its_check_does_not(tmp_path, table, body, needle):
    check = "compare-causes" if table.startswith("compare") else "straggler"
    rules = _rules(tmp_path, check, table, body)
    with pytest.raises(ProfanInputError) as err:
        pack.load([rules])
    assert err.value.path == str(rules) and needle in err.value.problem and check in err.value.problem


def test_the_built_in_texts_and_a_right_override_load(tmp_path):
    rules = _rules(tmp_path, "straggler", "cause", 'title = "Rank {rank} holds the others {lag_ms:,.1f} ms"')
    loaded = pack.load([rules])
    assert loaded.check("straggler").cause["title"].startswith("Rank {rank} holds")


def _texts(report) -> list[str]:
    return [
        text
        for c in report.causes
        for text in (c.title, c.assumption, c.action, c.verify, *c.alternatives, *map(str, c.metrics.values()))
    ]


def test_ranks_read_in_their_number_on_real_jobs():
    """{ranks:rank} and {n_ranks:rank}: the DLRM job's loader cause names three ranks and the ranks below its share
    in the plural, the single NCCL trace's idle cause its one rank in the singular — no text says 'rank(s)'."""
    dlrm, single = analysed(DLRM), analysed(NCCL)
    loading = next(c for c in dlrm.causes if c.check == "idle-between-steps")
    assert loading.ranks == (2, 6, 7)
    assert f"first kernel on ranks {fmt_ranks(loading.ranks)}: 1.4–1.6 ms per step" in loading.title
    assert "The loader takes 1.0–1.1 ms per step before the steps of ranks 0, 3–5 too" in loading.action
    idle = next(c for c in dlrm.causes if c.check == "device-idle")
    assert len(idle.ranks) == 7 and "of the step on 7 ranks:" in idle.title
    lone = next(c for c in single.causes if c.check == "device-idle")
    assert len(lone.ranks) == 1 and lone.title.startswith("The GPU is idle 73.3%–77.1% of the step on 1 rank: ")
    assert not [text for text in _texts(dlrm) + _texts(single) if "(s)" in text]


def test_a_users_text_counts_with_the_noun_spec(tmp_path):
    """A --rules text may use the same spec: a count and a list of the real cause, the noun's case kept."""
    rules = _rules(tmp_path, "idle-between-steps", "cause", 'loading_title = "{ranks:Rank} wait {idle} per step"')
    rules.write_text(rules.read_text() + 'loading_others = " Also {others:rank}."\n', encoding="utf-8")
    report = profan.analyze(DLRM, rules=[rules])
    loading = next(c for c in report.causes if c.check == "idle-between-steps")
    assert loading.title == "Ranks 2, 6, 7 wait 1.4–1.6 ms per step"
    assert " Also ranks 0, 3–5." in loading.action
