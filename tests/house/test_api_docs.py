"""docs/api.md is the library's reference: every ```python example in it runs, from the repository root, in a fresh
namespace, and prints exactly the ```text block under it. A doc that drifts from the code fails here."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import ROOT

import profan

DOC = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    """(code, expected output) of each example: a python block and the text block right after it."""
    text = DOC.read_text(encoding="utf-8")
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in BLOCK.finditer(text)]
    out = []
    for (kind, code, _, end), nxt in zip(blocks, [*blocks[1:], None], strict=True):
        if kind != "python":
            continue
        assert nxt is not None and nxt[0] == "text" and not text[end : nxt[2]].strip(), (
            f"the example ending at offset {end} of docs/api.md has no text block of its output right under it"
        )
        out.append((code, nxt[1]))
    return out


EXAMPLES = examples()


def test_the_reference_covers_the_api():
    """Each public name has an example, and the doc names every field of the Report the brief lists."""
    code = "\n".join(c for c, _ in EXAMPLES)
    for call in ("profan.analyze(", "profan.evidence(", "profan.compare(", "profan.figures.timeline(", "render("):
        assert call in code, call
    for name in ("causes", "headline", "findings", "tables", "ungrouped()", "members", "explained_by"):
        assert name in code or f"`{name}`" in DOC.read_text(encoding="utf-8"), name
    assert set(profan.__all__) >= {"analyze", "compare", "evidence", "figures", "Report"}
    assert len(EXAMPLES) >= 7


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs_and_prints_what_the_doc_says(index, monkeypatch):
    code, expected = EXAMPLES[index]
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/api.md example {index + 1}", "exec"), {"__name__": "__docs__"})
    assert out.getvalue() == expected
