"""A --rules file whose cause or compare texts fill a name the check does not give is refused when the rule pack is
loaded, in one line naming the file, the check, the text and the name — not a KeyError from deep inside the report
(`profan.rulepack.pack._check_placeholders`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TORCH, assert_one_line_error, run_cli

from profan.model.errors import ProfanInputError
from profan.rulepack import pack

PAIRS = TORCH / "gloo_gain_pairs"


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
