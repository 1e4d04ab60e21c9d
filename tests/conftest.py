"""Shared test helpers: fixture paths, running the real CLI, and an independent CSV reader for ground truth.

The tests mirror profan/'s tree (tests/sources, tests/analyses, …; tests/hostile for hostile input across the
readers, tests/house for the code's own rules). The helpers every folder shares live here and in the modules
beside it (hostile_corpus.py, prefork.py); the folders are on the import path so that a test may import another
folder's module by name (test_mcp's wire, test_hostile_outputs' inertness checks)."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(folder) for folder in sorted(Path(__file__).resolve().parent.iterdir()) if folder.is_dir()]
FIXTURES = ROOT / "fixtures"
ASCEND = FIXTURES / "ascend"
TORCH = FIXTURES / "torch"
QWEN3 = ASCEND / "msinsight-qwen3-4rank-2025q4"


@pytest.fixture(autouse=True)
def _default_limits():
    """Each test starts from the built-in limits: `profan.analyze` with a rules file that lowers one (the hostile
    and trust tests do) makes it the process's, and a later test reading evidence back from a shared report would
    meet the lowered size bounds."""
    from profan.rulepack import limits

    with limits.scoped(limits.defaults()):
        yield


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Parsed-trace caches and the report-sealing key go to temporary folders, never the user's ~/.cache/profan or
    ~/.config/profan (subprocesses inherit them).
    A ``PROFAN_NO_CACHE``/``PROFAN_JOBS`` in the caller's shell is set aside too: the suite tests the cache and the
    sequential default, whatever the environment it is started from."""
    saved = {k: os.environ.get(k) for k in ("PROFAN_CACHE_DIR", "PROFAN_NO_CACHE", "PROFAN_JOBS", "PROFAN_CONFIG_DIR")}
    os.environ.pop("PROFAN_NO_CACHE", None)
    os.environ.pop("PROFAN_JOBS", None)
    os.environ["PROFAN_CACHE_DIR"] = str(tmp_path_factory.mktemp("profan-cache"))
    os.environ["PROFAN_CONFIG_DIR"] = str(tmp_path_factory.mktemp("profan-config"))  # the report-sealing key
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `profan ...` through the console script's own entry point (`profan.app.cli.main`: argument parsing, error
    lines, exit codes), in this process with stdout and stderr captured — a subprocess would add an interpreter
    start and imports to each of the suite's ~130 commands. Tests of what only a process shows (closed stdin, a
    terminal, time and memory bounds) start one themselves (`run_process`)."""
    from profan.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd or ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["profan", *args], code, out.getvalue(), err.getvalue())


def run_process(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    """Run `profan ...` exactly as a user would: a subprocess, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "profan", *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=300, **kw
    )


def one_rank(tmp_path: Path) -> Path:
    """A writable copy of rank 0 of the real Qwen3 set, for tests that corrupt one of its files."""
    dst = tmp_path / "rank_0_ascend_pt"
    shutil.copytree(QWEN3 / "rank_0_ascend_pt", dst)
    return dst


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 with exactly one line on stderr, no traceback, naming every needle."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def raw_rows(path: Path) -> tuple[list[str], dict[int, dict[str, str]]]:
    """Ground truth straight from the file with the csv module: header, and {physical line: row dict}."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows: dict[int, dict[str, str]] = {}
        prev = reader.line_num
        for row in reader:
            rows[prev + 1] = dict(zip(header, row, strict=False))
            prev = reader.line_num
    return header, rows


def fnum(cell: str) -> float:
    return float(cell.strip().strip("\t"))


_ANALYSED: dict[tuple, tuple[Any, str]] = {}  # (root, options) -> (report, its fingerprint when made)


def analysed(root: Path, **options: Any):
    """``profan.analyze(root, **options)``, made once per session and shared by every test that asks for the same
    sample with the same options: a sample's analysis is the same whichever test reads it, and many tests hold
    one sample's report against its raw files. A shared report is read, never changed — `_shared_reports_unchanged`
    fails the session if a test changed one. Tests that change the input, the rules or the environment first call
    `profan.analyze` themselves."""
    key = (str(root), tuple(sorted((k, repr(v)) for k, v in options.items())))
    if key not in _ANALYSED:
        import profan

        report = profan.analyze(root, **options)
        _ANALYSED[key] = (report, _fingerprint(report))
    return _ANALYSED[key][0]


def _fingerprint(report) -> str:
    """A digest of everything a report holds: its document (findings, causes, metrics, notes, …) and each table's
    bytes (Arrow IPC, which keeps every type)."""
    digest = hashlib.sha256()

    def table_bytes(df) -> None:
        buf = io.BytesIO()
        df.write_ipc(buf)
        digest.update(buf.getvalue())

    doc = report.to_dict(rows=table_bytes)
    digest.update(json.dumps(doc, sort_keys=True, default=repr).encode())
    return digest.hexdigest()


@pytest.fixture(scope="session", autouse=True)
def _shared_reports_unchanged():
    """After the last test: every shared report (`analysed`) is as it was made, so no test's result depended on
    what an earlier test did to it."""
    yield
    changed = [root for (root, _), (report, made) in _ANALYSED.items() if _fingerprint(report) != made]
    assert not changed, f"a test changed the shared report of {changed}"


@pytest.fixture(scope="session")
def qwen3_report():
    return analysed(QWEN3)


def measured(doc: dict) -> list[dict]:
    """The findings of a JSON report as measured, one per rank and step: singles and the members of groups."""
    return [m for f in doc["findings"] for m in (f.get("members") or [f])]


def merged_runs(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) spans merged into disjoint sorted runs (touching ones joined): a test's own interval union,
    ground truth for the readers' busy, idle and hidden time."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(start, end) for start, end in out]


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of (start, end) intervals (`merged_runs`)."""
    return sum(end - start for start, end in merged_runs(intervals))
