"""`profan mcp` end to end: start it as a subprocess, talk to it with the MCP SDK's stdio client, analyse a real
sample, drill into one returned finding, and hold the returned rows against the fixture file read directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio
import jsonschema
from conftest import QWEN3, ROOT, run_cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def schema(which: str) -> dict:
    return json.loads(run_cli("schema", which).stdout)


def call_session(steps, *roots):
    """Run `steps(client)` against a fresh `profan mcp` subprocess and return what it returns. The server reads
    only inside the repository (its working folder) unless ``roots`` name the folders it may read."""
    # the test session's environment (private cache and sealing key): the SDK passes only a few variables
    server = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        env=dict(os.environ),
        args=["-m", "profan", "mcp", *[a for r in roots for a in ("--root", str(r))]],
    )

    async def main():
        async with Client(server) as client:
            return await steps(client)

    return anyio.run(main)


def test_analyze_then_evidence_rows_equal_the_source_lines():
    async def steps(client):
        tools = await client.list_tools()
        by_name = {t.name: t for t in tools.tools}
        brief = await client.call_tool("analyze", {"path": str(QWEN3)})
        doc = brief.structured_content
        shown = doc["causes"] + doc["findings"]
        # a cause or finding citing CSV lines, and one citing JSON pointers
        f_lines = next(f for f in shown if "lines" in f["evidence"][0] and f["evidence"][0]["row_count"] > 1)
        f_ptr = next(f for f in shown if "pointers" in f["evidence"][0])
        ev_lines = await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": f_lines["id"]})
        ev_ptr = await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": f_ptr["id"], "limit": 2})
        ev_cause = await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": "C1"})
        return by_name, brief, f_lines, ev_lines, f_ptr, ev_ptr, ev_cause

    tools, brief, f_lines, ev_lines, f_ptr, ev_ptr, ev_cause = call_session(steps)

    assert set(tools) == {"analyze", "compare", "evidence", "rules"}
    assert tools["compare"].output_schema == tools["analyze"].output_schema  # both return a brief
    for name in ("analyze", "compare", "evidence", "rules"):
        assert tools[name].output_schema and tools[name].output_schema["type"] == "object"
        assert tools[name].annotations.read_only_hint is True
    assert "path" in tools["analyze"].input_schema["properties"]
    assert {"source", "finding_id"} <= set(tools["evidence"].input_schema["required"])

    # analyze: the same brief the CLI prints, except the drill hint that points at the evidence tool
    assert not brief.is_error
    doc = brief.structured_content
    jsonschema.validate(doc, schema("brief"), cls=jsonschema.Draft202012Validator)
    cli = json.loads(run_cli("analyze", str(QWEN3), "--brief").stdout)
    assert doc["drill"] == f'call the evidence tool with source="{QWEN3}" and a finding_id (C1, F3 or F3.2)'
    assert {k: v for k, v in doc.items() if k != "drill"} == {k: v for k, v in cli.items() if k != "drill"}
    # it leads with the causes: the slow pipeline stage first
    assert list(doc)[:4] == ["schema", "report_schema", "headline", "causes"]
    assert "stage 1 (ranks 2, 3)" in doc["causes"][0]["title"] and doc["headline"][0] == "C1"
    assert len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()) <= 8000
    assert json.loads(brief.content[0].text) == doc

    # evidence on CSV lines: the rows are the physical lines of the fixture file, cited in the brief's order
    assert not ev_lines.is_error
    got = ev_lines.structured_content
    jsonschema.validate(got, schema("evidence"), cls=jsonschema.Draft202012Validator)
    assert got["id"] == f_lines["id"] and got["check"] == f_lines["check"]
    item = got["evidence"][0]
    stub = f_lines["evidence"][0]
    assert item["file"] == stub["file"] and item["lines"][:3] == stub["lines"]
    raw = (QWEN3 / item["file"]).read_bytes().decode("utf-8").splitlines()
    assert [r["locator"] for r in item["rows"]] == [f"line {n}" for n in item["lines"]]
    assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in item["lines"]]
    assert item["header"] == raw[0].lstrip("\ufeff")

    # evidence on a cause: the rows of the findings it is made from, its action with them
    assert not ev_cause.is_error, ev_cause.content
    cause = ev_cause.structured_content
    jsonschema.validate(cause, schema("evidence"), cls=jsonschema.Draft202012Validator)
    assert (cause["id"], cause["kind"]) == ("C1", "cause") and cause["action"] == doc["causes"][0]["action"]
    assert cause["evidence"][0]["file"] == doc["causes"][0]["evidence"][0]["file"]

    # evidence on JSON pointers: each row is the value at the pointer in the raw file; limit honoured
    ptr_item = ev_ptr.structured_content["evidence"][0]
    src = json.loads((QWEN3 / ptr_item["file"]).read_text(encoding="utf-8"))
    assert len(ptr_item["rows"]) == min(2, ptr_item["cited"])
    for row, ptr in zip(ptr_item["rows"], f_ptr["evidence"][0]["pointers"], strict=False):
        assert row["locator"] == ptr
        node = src
        for part in ptr.lstrip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        assert json.loads(row["text"]) == node


def test_errors_are_the_cli_one_liners(tmp_path):
    missing = str(tmp_path / "missing")

    async def steps(client):
        return (
            await client.call_tool("analyze", {"path": missing}),
            await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": "F999"}),
            await client.call_tool("rules", {"id": "NOPE-1"}),
            await client.call_tool("rules", {"id": "device-idle"}),
            await client.call_tool("rules", {}),
        )

    bad_path, bad_id, bad_rule, one, listing = call_session(steps, ROOT, tmp_path)
    for result, args in (
        (bad_path, ["analyze", missing]),
        (bad_id, ["evidence", str(QWEN3), "F999"]),
        (bad_rule, ["rules", "NOPE-1"]),
    ):
        assert result.is_error
        assert result.structured_content is None
        cli = run_cli(*args)
        assert cli.returncode == 2
        assert [c.text for c in result.content] == [cli.stderr.strip()]
    assert one.structured_content == json.loads(run_cli("rules", "device-idle", "-f", "json").stdout)
    assert listing.structured_content == json.loads(run_cli("rules", "-f", "json").stdout)


def test_report_file_source_and_closed_stdin(tmp_path):
    """evidence also takes a report.json written by the CLI; the server exits cleanly when its stdin closes."""
    out = tmp_path / "report.json"
    assert run_cli("analyze", str(QWEN3), "-f", "json", "-o", str(out), "-q").returncode == 0
    full = json.loads(out.read_text())
    fid = full["findings"][-1]["id"]

    async def steps(client):
        return await client.call_tool("evidence", {"source": str(out), "finding_id": fid})

    got = call_session(steps, ROOT, tmp_path).structured_content
    cli = json.loads(run_cli("evidence", str(out), fid, "--format", "json").stdout)
    assert got == cli
    res = subprocess.run(
        [sys.executable, "-m", "profan", "mcp"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout == ""


def test_compare_then_evidence_on_both_sides():
    """compare ranks 0 and 2 of the Qwen3 job (the two ranks with kernel rows), then evidence on its first finding:
    the rows are the raw kernel_details.csv lines of both ranks."""

    async def steps(client):
        got = await client.call_tool("compare", {"a": str(QWEN3), "ranks": [0, 2]})
        fid = got.structured_content["findings"][0]["id"]
        ev = await client.call_tool("evidence", {"source": str(QWEN3), "ranks": [0, 2], "finding_id": fid})
        bad = await client.call_tool("compare", {"a": str(QWEN3), "ranks": [0]})
        return got, ev, bad

    got, ev, bad = call_session(steps)
    assert not got.is_error, got.content
    doc = got.structured_content
    jsonschema.validate(doc, schema("brief"), cls=jsonschema.Draft202012Validator)
    assert (
        doc["drill"] == f'call the evidence tool with source="{QWEN3}", ranks=[0, 2] and a finding_id (C1, F3 or F3.2)'
    )
    assert {f["check"] for f in doc["findings"]} == {"compare-regression"}
    items = ev.structured_content["evidence"]
    files = {i["file"] for i in items}
    assert any(f.startswith("rank_0_ascend_pt/") for f in files) and any(
        f.startswith("rank_2_ascend_pt/") for f in files
    )
    for item in items:
        if "lines" not in item:
            continue
        raw = (QWEN3 / item["file"]).read_bytes().decode("utf-8").splitlines()
        assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in item["lines"]]
    assert bad.is_error
    assert bad.content[0].text == "profan: error: ranks takes two rank numbers, e.g. [0, 1] (got [0])"


def test_reports_are_reused_and_bounded(tmp_path):
    """evidence answers from the report analyse produced (same object, same ids); old reports are dropped."""
    from conftest import ASCEND

    from profan.app.mcp_server import Reports

    reports = Reports()
    reports.KEEP = 2
    vllm = str(ASCEND / "vllm-ascend-msprof-gmm-1op")
    first = reports.get(vllm, None, None)
    assert reports.get(vllm + "/", None, None) is first  # same directory, same report
    extra = tmp_path / "mine.toml"
    extra.write_text('[[rule]]\nid = "MY-1"\nbucket = "moe"\nmatch = { name = "^GroupedMatmul" }\n')
    other = reports.get(vllm, [str(extra)], None)  # other options, other report
    assert other is not first and other.meta["rule_files"][0] == str(extra)
    reports.get(str(QWEN3), None, None)  # a third report pushes out the least recently used
    assert reports.get(vllm, None, None) is not first


def test_the_server_reads_only_inside_its_roots(tmp_path):
    """An agent steered into asking for '/', /etc, a rules file elsewhere, a root of '/', or a link out of an
    allowed folder gets one refusal line each; nothing outside the roots is read."""
    data = tmp_path / "data"
    data.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CANARY\n")
    (data / "rank_0").mkdir()
    (data / "rank_0" / "kernel_details.csv").symlink_to(secret)
    rules = tmp_path / "rules.toml"
    rules.write_text("")

    async def steps(client):
        return [
            await client.call_tool("analyze", {"path": "/"}),
            await client.call_tool("analyze", {"path": "/etc"}),
            await client.call_tool("analyze", {"path": str(QWEN3), "rules": [str(rules)]}),
            await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": "F1", "root": "/"}),
            await client.call_tool("evidence", {"source": str(QWEN3), "finding_id": "F1", "limit": 0}),
            await client.call_tool("analyze", {"path": str(data)}),
        ]

    results = call_session(steps, ROOT, data)
    for res in results[:5]:
        assert res.is_error
        (text,) = [c.text for c in res.content]
        assert text.startswith("profan: error: ") and "\n" not in text
    for res in results[:4]:
        assert "lies outside the folders this server may read" in res.content[0].text
    assert "limit must be 1 or more (got 0)" in results[4].content[0].text
    # the data folder is allowed, but its kernel file links out of it: not read, and said
    assert results[5].is_error and "no profiler output found" in results[5].content[0].text
    assert all("TOP-SECRET-CANARY" not in c.text for r in results for c in r.content)
