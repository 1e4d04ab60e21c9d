"""The code stays readable the same way for everyone: `ruff check` and `ruff format` are clean, and no function in
profan/ is longer than a reader can hold (60 lines)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

MAX_LINES = 60


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


if __name__ == "__main__":  # print the functions over the limit, longest first
    for name, n in sorted(long_functions().items(), key=lambda kv: -kv[1]):
        print(n, name, file=sys.stdout)
