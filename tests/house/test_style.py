"""The code stays readable the same way for everyone: `ruff check` and `ruff format` are clean, and no function in
profan/ is longer than a reader can hold (60 lines).

The readability ratchet beside it: a complexity ceiling (ruff's C901, McCabe), a parameter ceiling (CLI commands
excused: typer maps each option to one), and a share of one- and two-letter bound names that may only fall. The
figures below are today's; a change may lower them (then lower the figure here), never raise them."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

MAX_LINES = 60
MAX_COMPLEXITY = 15  # ruff C901 `max-complexity`: no block above it
COMPLEX_BLOCKS = (
    8  # blocks of complexity 11 or more (ruff C901 at 10): may only shrink (8: severity._parse came with its rules)
)
MAX_PARAMETERS = 6  # of a function, `self` / `cls` not counted
# the functions over MAX_PARAMETERS today, with their count: the list may only shrink, and a count only fall
PARAMETER_RATCHET: dict[str, int] = {}
# the front doors, one parameter per option a user passes: the CLI's commands, the MCP server's tools (their
# parameters are the tools' JSON schema) and the library's entry point beside `profan.analyze`
PARAMETERS_EXCUSED = (
    "profan/app/commands/",
    "profan/app/mcp_server.py:evidence",
    "profan/comparison/compare.py:compare",
)
SHORT_NAME_SHARE = 0.1250  # bound names of one or two letters (`_` aside), of all bound names: may only fall


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff") or str(ROOT / ".ci-venv" / "bin" / "ruff")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    "args", [("check", "profan", "tests", "bench"), ("format", "--check", "profan", "tests", "bench")]
)
def test_ruff_is_clean(args):
    res = _ruff(*args)
    assert res.returncode == 0, res.stdout + res.stderr


def long_functions() -> dict[str, int]:
    out = {}
    for path in sorted((ROOT / "profan").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    out[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = n
    return out


def test_no_long_function():
    """No function in profan/ is over 60 lines, counted after `ruff format` (which spreads calls over lines)."""
    long = long_functions()
    assert not long, f"functions over {MAX_LINES} lines: {long}"


def _complexities() -> list[tuple[int, str]]:
    """Each block over complexity 10 (ruff C901), with its complexity, highest first."""
    res = _ruff(
        "check",
        "profan",
        "--select",
        "C901",
        "--config",
        "lint.mccabe.max-complexity=10",
        "--output-format",
        "json",
        "--exit-zero",
        "-q",
    )
    found = [(int(re.search(r"\((\d+) > 10\)", d["message"])[1]), d["message"]) for d in json.loads(res.stdout)]
    return sorted(found, reverse=True)


def test_complexity_ceiling():
    """No block over MAX_COMPLEXITY, and no more blocks of 11 or more than COMPLEX_BLOCKS."""
    found = _complexities()
    over = [msg for value, msg in found if value > MAX_COMPLEXITY]
    assert not over, f"blocks over complexity {MAX_COMPLEXITY}: {over}"
    assert len(found) <= COMPLEX_BLOCKS, f"{len(found)} blocks of complexity 11+ (ceiling {COMPLEX_BLOCKS}): {found}"


def _parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a]
    return len([name for name in names if name not in ("self", "cls")])


def many_parameters() -> dict[str, int]:
    out = {}
    for path in sorted((ROOT / "profan").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameter_count(node) > MAX_PARAMETERS:
                out[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = _parameter_count(node)
    return out


def test_parameter_ceiling():
    """No function over MAX_PARAMETERS but the front doors (PARAMETERS_EXCUSED) and the ratchet's list, each at
    most its count; an entry that no longer offends (or offends less) must leave the list (or lower its count)."""
    found = {name: n for name, n in many_parameters().items() if not name.startswith(PARAMETERS_EXCUSED)}
    worse = {name: n for name, n in found.items() if n > PARAMETER_RATCHET.get(name, MAX_PARAMETERS)}
    assert not worse, f"functions over {MAX_PARAMETERS} parameters (pass a small value instead): {worse}"
    better = {name: found.get(name, 0) for name, n in PARAMETER_RATCHET.items() if found.get(name, 0) < n}
    assert not better, f"lower PARAMETER_RATCHET for these (0: remove the entry): {better}"


def bound_names() -> list[str]:
    """Every name profan/ binds: definitions, parameters, assignment, loop, `with` and `except` targets."""
    names: list[str] = []
    for path in sorted((ROOT / "profan").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                every = (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                names += [a.arg for a in every if a and a.arg not in ("self", "cls")]
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.append(node.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.append(node.name)
    return names


def short_name_share() -> float:
    names = bound_names()
    return sum(1 for name in names if name != "_" and len(name.lstrip("_")) <= 2) / len(names)


def test_short_names_only_fall():
    share = short_name_share()
    assert share <= SHORT_NAME_SHARE, (
        f"{share:.2%} of bound names have one or two letters (ceiling {SHORT_NAME_SHARE:.2%}): name what it holds"
    )


if __name__ == "__main__":  # print the functions over the limit, longest first
    for name, n in sorted(long_functions().items(), key=lambda kv: -kv[1]):
        print(n, name, file=sys.stdout)
