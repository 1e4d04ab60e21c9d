"""Hostile inputs that used to make profan wait forever or without bound: a FIFO (or device) named as a rules,
hardware or report file, a FIFO inside the MCP server's root, and a flood of pipelined requests to the server.
Each test runs profan as a process of its own with a timeout, and asserts the one-line refusal or the answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import QWEN3, ROOT, assert_one_line_error, one_rank, run_process

from profan.model.files import NOT_REGULAR

HANG_S = 60  # far above what any of these takes; reaching it is the hang the test is for


@pytest.mark.parametrize("option", ["--rules", "--hardware"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_as_rules_or_hardware_is_one_line_not_a_wait(tmp_path, option, kind):
    one_rank(tmp_path / "data")
    named = tmp_path / "my.toml"
    if kind == "fifo":
        os.mkfifo(named)
    else:
        named = "/dev/zero"  # endless: read whole, it would never end
    t0 = time.monotonic()
    res = run_process("analyze", str(tmp_path / "data"), "-q", option, str(named))
    assert_one_line_error(res, str(named), NOT_REGULAR)
    assert time.monotonic() - t0 < HANG_S / 2


def test_a_fifo_as_the_report_given_to_evidence_is_one_line(tmp_path):
    report = tmp_path / "report.json"
    os.mkfifo(report)
    res = run_process("evidence", str(report), "F1")
    assert_one_line_error(res, str(report), "(a FIFO, socket or device); refused")


# ------------------------------------------------------------------------------------------ the MCP server


def _init() -> list[dict]:
    return [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]


def _call(rid: int, tool: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def _serve(messages: list[dict | bytes], root, timeout: float = HANG_S) -> tuple[list[dict], float]:
    """Write every message to a fresh `profan mcp --root ROOT` at once, close its stdin, and return the responses
    it wrote (in the order written) and the seconds until it exited."""
    lines = b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n" for m in messages)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "profan", "mcp", "--root", str(root)],
        input=lines,
        capture_output=True,
        cwd=ROOT,
        timeout=timeout,
    )
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()], seconds


def _by_id(responses: list[dict]) -> dict:
    return {r["id"]: r for r in responses if "id" in r}


def test_mcp_given_fifos_in_its_root_answers_each_with_an_error_and_goes_on(tmp_path):
    """A FIFO as the data, the rules file, the hardware file and the report given to evidence: four tool errors
    naming the FIFO, and the tool list asked after them answered."""
    one_rank(tmp_path / "data")
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    calls = [
        _call(1, "analyze", {"path": str(fifo)}),
        _call(2, "analyze", {"path": str(tmp_path / "data"), "rules": [str(fifo)]}),
        _call(3, "analyze", {"path": str(tmp_path / "data"), "hardware": str(fifo)}),
        _call(4, "evidence", {"source": str(fifo), "finding_id": "F1"}),
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
    ]
    responses, seconds = _serve([*_init(), *calls], tmp_path)
    got = _by_id(responses)
    for rid in (1, 2, 3, 4):
        result = got[rid]["result"]
        (text,) = [c["text"] for c in result["content"]]
        assert result["isError"] and text.startswith(f"profan: error: {fifo}") and "(a FIFO, socket or device)" in text
    assert len(got[5]["result"]["tools"]) == 4
    assert seconds < HANG_S / 2


def _list(rid: int) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/list"}


def test_mcp_answers_500_pipelined_requests_in_order_within_seconds_after_stdin_closes(tmp_path):
    """All 500 written at once and stdin closed after them: the SDK's transport ended the session at end of input
    and dropped those still in flight (about 250 answered); every one is answered now, in order."""
    responses, seconds = _serve([*_init(), *(_list(i) for i in range(1, 501))], tmp_path)
    assert [r["id"] for r in responses] == list(range(501))
    assert all(len(r["result"]["tools"]) == 4 for r in responses[1:])
    assert seconds < 20, seconds  # ~1.7 s here, of which ~1 s is the interpreter's start and imports


def test_mcp_refuses_a_30_mb_request_in_one_message_and_answers_the_next(tmp_path):
    huge = json.dumps(_call(1, "analyze", {"path": "x" * (30 << 20)})).encode() + b"\n"
    responses, _ = _serve([*_init(), huge, _list(2)], tmp_path)
    assert [r["id"] for r in responses] == [0, 1, 2]
    error = responses[1]["error"]
    assert error["code"] == -32600 and "longer than 4,194,304 bytes" in error["message"]
    assert "\n" not in error["message"] and len(json.dumps(responses[1])) < 400
    assert len(responses[2]["result"]["tools"]) == 4


def test_mcp_answers_other_requests_while_a_slow_analysis_runs(tmp_path):
    """An analysis of the 4-rank Qwen3 sample (seconds) and 50 tool lists after it: every list is answered
    before the analysis, which is answered too."""
    messages = [*_init(), _call(1, "analyze", {"path": str(QWEN3)}), *(_list(i) for i in range(2, 52))]
    responses, _ = _serve(messages, QWEN3.parent)
    order = [r["id"] for r in responses]
    assert sorted(order) == list(range(52)) and order[-1] == 1, order
    assert responses[-1]["result"]["structuredContent"]["schema"].startswith("profan.brief")


def test_mcp_exits_after_end_of_input_when_the_request_in_flight_was_cancelled(tmp_path):
    """A cancelled request may go unanswered: the server does not wait for its answer once stdin is closed."""
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    responses, seconds = _serve([*_init(), _call(1, "analyze", {"path": str(QWEN3)}), cancel, _list(2)], QWEN3.parent)
    got = _by_id(responses)
    assert set(got) - {1} == {0, 2} and seconds < HANG_S / 2, (sorted(got), seconds)
