"""Inputs that would cost memory without bound: a file of any kind far larger than any real one (made sparse with
``truncate``: it costs no disk), and a gzip bomb. Each is refused in one line naming the bound of
``rules/limits.toml`` and how to raise it, from its size before a byte is read, or (the bomb) while it inflates,
with the peak RSS of the process measured and bounded."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, assert_one_line_error, one_rank, run_cli

from profan.rulepack import limits

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
DLRM4 = ROOT / "fixtures" / "torch" / "dlrm_v100_8rank" / "worker4_step_12.1694128201547.pt.trace.json"
RAISE = "raise the bound under [limits] in a rules file (--rules FILE)"
MAX_RSS_MB = 400

# Runs `python -m profan ARGS` as its only child and prints that child's exit code and peak RSS (kB): this
# wrapper is a fresh, small process, so the figure is the command's own, not pytest's address space copied.
MEASURE = r"""
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "profan", *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _measured(*args: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in MB) of ``profan ARGS`` run as a process of its own."""
    done = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    rc, kb = done.stdout.split()
    return int(rc), done.stderr, int(kb) // 1024


def _sparse(path, head: bytes, size: int) -> None:
    path.write_bytes(head)
    os.truncate(path, size)
    assert path.stat().st_size == size and path.stat().st_blocks * 512 < 1 << 20  # no disk behind it


def _one_line(stderr: str, *needles: str) -> None:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("profan: error: "), stderr
    assert all(n in lines[0] for n in needles), lines[0]


def test_a_sparse_20_gb_trace_is_refused_from_its_size_with_little_memory(tmp_path):
    trace = tmp_path / "big.pt.trace.json"
    head = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},'
    _sparse(trace, head, 20 << 30)
    rc, err, rss = _measured("analyze", str(tmp_path), "-q")
    bound = limits.defaults().max_trace_bytes
    assert rc == 2 and rss < MAX_RSS_MB, (rc, rss)
    _one_line(err, str(trace), f"is {20 << 30:,} bytes", f"(max_trace_bytes = {bound:,})", RAISE)


def test_a_gzip_bomb_is_refused_while_it_inflates_with_bounded_memory(tmp_path):
    """15 MB of gzip members of blanks (inflating to 15 GB): refused once past 64 MiB of output, its ratio to
    the compressed bytes read so far beyond max_inflate_ratio. The ratio to the whole file let it inflate to
    1.5 GB first (1.6 GB of RSS)."""
    blank = gzip.compress(b" " * (1 << 20), 9)
    members = (15 << 20) // len(blank)
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [') + blank * members + gzip.compress(b"]}"))
    assert bomb.stat().st_size > 15_000_000
    rc, err, rss = _measured("analyze", str(tmp_path), "-q")
    assert rc == 2 and rss < MAX_RSS_MB, (rc, rss, err)
    _one_line(err, str(bomb), "decompresses to more than 100 times the", "compressed bytes read so far")
    _one_line(err, "(max_inflate_ratio)", "raise it under [limits] in a rules file")


def test_a_real_trace_over_a_lowered_bound_is_refused_and_passes_once_raised(tmp_path):
    """The bound is the rule pack's, overridable: the DLRM worker 4 trace (1.2 MB) under a bound below its size is
    refused naming it; with the bound at its size it is analysed."""
    shutil.copy(DLRM4, tmp_path / DLRM4.name)
    size = DLRM4.stat().st_size
    rules = tmp_path / "limits.toml"
    rules.write_text(f"[limits]\nmax_trace_bytes = {size - 1}\n")
    res = run_cli("analyze", str(tmp_path / DLRM4.name), "-q", "--rules", str(rules))
    assert_one_line_error(res, DLRM4.name, f"is {size:,} bytes", f"(max_trace_bytes = {size - 1:,})")
    rules.write_text(f"[limits]\nmax_trace_bytes = {size}\n")
    res = run_cli("analyze", str(tmp_path / DLRM4.name), "-q", "-f", "json", "--rules", str(rules))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["source"]["ranks"][0]["rank"] == 4


@pytest.mark.parametrize(
    ("name", "bound", "what"),
    [
        (KD, "max_csv_bytes", "a CSV file"),
        ("ASCEND_PROFILER_OUTPUT/step_trace_time.csv", "max_side_file_bytes", "a CSV file read whole"),
        ("ASCEND_PROFILER_OUTPUT/communication.json", "max_side_file_bytes", "a JSON side file"),
    ],
)
def test_a_sparse_ascend_file_past_its_bound_is_refused_from_its_size(tmp_path, name, bound, what):
    rank = one_rank(tmp_path)
    target = rank / name
    most = getattr(limits.defaults(), bound)
    _sparse(target, target.read_bytes()[:4096], most + 1)
    rc, err, rss = _measured("analyze", str(rank), "-q")
    assert rc == 2 and rss < MAX_RSS_MB, (rc, rss, err)
    _one_line(err, str(target), f"is {most + 1:,} bytes, more than {what} may be ({bound} = {most:,})", RAISE)


def test_a_sparse_rules_file_and_report_are_refused_from_their_size(tmp_path):
    rank = one_rank(tmp_path)
    rules = tmp_path / "big.toml"
    most = limits.defaults().max_rules_bytes
    _sparse(rules, b"# rules\n", most + 1)
    res = run_cli("analyze", str(rank), "-q", "--rules", str(rules))
    assert_one_line_error(res, str(rules), f"more than a rules file may be (max_rules_bytes = {most:,})")
    report = tmp_path / "report.json"
    most = limits.defaults().max_report_bytes
    _sparse(report, b'{"schema": "profan.report/1"', most + 1)
    rc, err, rss = _measured("evidence", str(report), "F1")
    assert rc == 2 and rss < MAX_RSS_MB, (rc, rss)
    _one_line(err, str(report), f"more than a report may be (max_report_bytes = {most:,})")
