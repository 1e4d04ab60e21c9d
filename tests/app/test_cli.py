"""The CLI as a program calls it: results on stdout, nothing but errors on a piped stderr, never a prompt, and the
documented exit codes (0 ran, 1 the diagnosis at/above --fail-on, 2 bad input in one line, 3 internal error)."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
import sys

import jsonschema
import pytest
import tomllib
from conftest import ASCEND, FIXTURES, QWEN3, ROOT, analysed, run_cli

pytestmark = pytest.mark.process  # runs profan in child processes: left out of the fast loop

VLLM = ASCEND / "vllm-ascend-msprof-gmm-1op"  # one op, worst finding 'info'


def one_line_error(res: subprocess.CompletedProcess, code: int = 2) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("profan: error: ")
    assert res.stdout == ""
    return lines[0]


def report_json(path) -> dict:
    res = run_cli("analyze", str(path), "-f", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# ---------------------------------------------------------------------------------------------- exit codes 0 / 1


def test_json_on_stdout_and_silent_piped_stderr():
    """No -q: with stderr a pipe there is no progress chatter, and stdout is exactly one JSON document."""
    res = run_cli("analyze", str(QWEN3), "-f", "json")
    assert res.returncode == 0
    assert res.stderr == ""
    doc = json.loads(res.stdout)
    assert doc["schema"] == "profan.report/2"
    assert [r["rank"] for r in doc["source"]["ranks"]] == [0, 1, 2, 3]


def test_progress_only_on_a_terminal():
    """The same run with stderr on a pseudo-terminal shows progress there (and still only JSON on stdout)."""
    master, slave = pty.openpty()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "profan", "analyze", str(QWEN3), "-f", "json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other end is closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())  # the bar's cursor moves and colours
    assert res.returncode == 0
    lines = [ln for ln in re.split(r"[\r\n]", err) if ln.strip()]
    assert lines and all(ln.startswith("profan: ") for ln in lines)
    assert f"profan: found 4 rank(s) in {QWEN3}" in lines  # messages stay lines
    # the bar: ranks read of all, bytes of all (the four ranks' files, as the report lists them), time left
    total = sum(json.loads(res.stdout)["source"]["file_bytes"].values())
    bar = f"4/4 ranks {total / 1e6:.1f}/{total / 1e6:.1f} MB"
    assert any(ln.startswith("profan: reading") and bar in ln for ln in lines)
    assert json.loads(res.stdout)["schema"] == "profan.report/2"


def test_executor_ray_without_ray_is_one_line(monkeypatch):
    """Asking for Ray where it is not installed is refused before any work, with what to install."""
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find(name, *a))
    res = run_cli("analyze", str(QWEN3), "--executor", "ray")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "profan: error: --executor ray needs Ray: pip install 'profan[ray]'\n"
    res = run_cli("compare", str(QWEN3), "--ranks", "0,1", "--executor", "spark")
    assert res.returncode == 2 and "unknown executor 'spark'" in res.stderr


def _expected_gate(doc: dict, level: str) -> list[str]:
    """What --fail-on names, computed from the JSON report: each cause at its own severity (its cost), then each
    finding no cause explains, at the level or above."""
    order = {"info": 0, "warning": 1, "critical": 2}
    items = [(c["id"], c["severity"]) for c in doc["causes"]]
    items += [(f["id"], f["severity"]) for f in doc["findings"] if f["explained_by"] is None]
    return [f"{i} {s}" for i, s in items if order[s] >= order[level]]


def test_fail_on_exit_codes():
    """Exit 1 exactly when the diagnosis reaches the level; the output is complete either way."""
    qwen = report_json(QWEN3)
    for level in ("warning", "critical"):
        res = run_cli("analyze", str(QWEN3), "--brief", "--fail-on", level)
        assert res.returncode == (1 if _expected_gate(qwen, level) else 0), res.stderr
        assert json.loads(res.stdout)["summary"]["critical"] == sum(
            f["severity"] == "critical" for f in qwen["findings"]
        )
    assert _expected_gate(qwen, "warning")  # the slow pipeline stage is a real fault
    vllm = report_json(VLLM)
    assert {f["severity"] for f in vllm["findings"]} == {"info"}
    res = run_cli("analyze", str(VLLM), "-f", "json", "--fail-on", "warning")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["findings"] == vllm["findings"]
    # without --fail-on findings are data, not failure
    assert run_cli("analyze", str(QWEN3), "--brief").returncode == 0


def _gate_line(res: subprocess.CompletedProcess, level: str) -> list[str]:
    """The ids (and severities) the --fail-on line on stderr names, e.g. ['C1 critical']."""
    assert res.returncode == 1, (res.returncode, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"profan: --fail-on {level}: "), res.stderr
    items = lines[0].removeprefix(f"profan: --fail-on {level}: ").split("; ")
    return [f"{i.split(' (')[0]} {i.split('(')[1].split(',')[0]}" for i in items]


def test_fail_on_gates_on_causes_not_on_symptoms():
    """Qwen3: the critical exposed-communication finding is a symptom of C1 (pipeline stage 1 computes 1.73x
    stage 0): `--fail-on warning` names C1 by its own severity, never the symptoms it folds; a cause counts as
    what removing it saves (rules/severity.toml), not as the worst finding it explains."""
    doc = report_json(QWEN3)
    findings = {f["id"]: f for f in doc["findings"]}
    c1 = next(c for c in doc["causes"] if c["id"] == "C1")
    assert c1["check"] == "pipeline-stage-imbalance"
    assert "critical" in {findings[fid]["severity"] for fid in c1["explains"]}
    assert all(f["explained_by"] for f in doc["findings"] if f["severity"] != "info")
    res = run_cli("analyze", str(QWEN3), "-q", "--fail-on", "warning")
    assert _gate_line(res, "warning") == _expected_gate(doc, "warning")
    assert f"C1 ({c1['severity']}, pipeline-stage-imbalance)" in res.stderr
    assert "comm-exposed" not in res.stderr.split("C2")[0] and " F" not in res.stderr


def test_fail_on_counts_a_cause_by_its_cost_and_a_lone_finding_by_itself():
    """DLRM and GPT-3: the gate names each cause at its own severity and each finding no cause explains as
    itself (GPT-3's waiting collectives), computed here from the JSON report."""
    for sample in (FIXTURES / "torch" / "dlrm_v100_8rank", ASCEND / "msinsight-gpt3-2rank-2023"):
        doc = report_json(sample)
        for level in ("warning", "critical"):
            res = run_cli("analyze", str(sample), "-q", "--fail-on", level)
            want = _expected_gate(doc, level)
            if want:
                assert _gate_line(res, level) == want
            else:
                assert res.returncode == 0, res.stderr
    gpt3 = report_json(ASCEND / "msinsight-gpt3-2rank-2023")
    assert [f["id"] for f in gpt3["findings"] if f["explained_by"] is None and f["severity"] == "warning"]


def test_fail_on_passes_when_nothing_reaches_the_level():
    """Single-rank captures whose findings are all informational: no cause, nothing to gate on."""
    for sample in (VLLM, FIXTURES / "ascend" / "mstt-advisor-ut/test/ut/advisor/advisor_backend/compute_advice"):
        doc = report_json(sample)
        assert doc["causes"] == [] and {f["severity"] for f in doc["findings"]} == {"info"}
        for level in ("warning", "critical"):
            res = run_cli("analyze", str(sample), "-q", "-f", "json", "--fail-on", level)
            assert res.returncode == 0 and res.stderr == "", res.stderr


# ---------------------------------------------------------------------------------------------- exit code 2


def test_bad_input_is_one_line(tmp_path):
    line = one_line_error(run_cli("analyze", str(tmp_path / "missing")))
    assert str(tmp_path / "missing") in line and "no such file or directory" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["analyze", str(QWEN3), "-f", "pdf"], "unknown format 'pdf'"),
        (["analyze", str(QWEN3), "--fail-on", "info"], "--fail-on takes 'warning' or 'critical'"),
        (["analyze", str(QWEN3), "--xyzzy"], "No such option: --xyzzy (see 'profan analyze --help')"),
        (["analyze"], "Missing argument"),
        (["evidence", str(QWEN3), "F9999"], "no finding F9999 (report has F1, F2"),
        (["evidence", str(QWEN3), "F1", "-f", "xml"], "unknown format 'xml'; use text or json"),
        (["rules", "NOPE-1"], "no rule or check 'NOPE-1'"),
        (["schema", "nope"], "unknown schema 'nope'"),
        (["nonsense"], "No such command"),
        ([], "missing command (see 'profan --help')"),
        (["skill"], "missing command (see 'profan skill --help')"),
    ],
)
def test_usage_and_lookup_errors_are_one_line(args, needle):
    res = run_cli(*args)
    if len(args) <= 1 and "missing command" in needle:  # help goes to stdout first, as for --help
        assert "Usage: profan" in res.stdout
        res = subprocess.CompletedProcess(res.args, res.returncode, "", res.stderr)
    assert needle in one_line_error(res)


def test_not_a_report(tmp_path):
    bogus = tmp_path / "report.json"
    bogus.write_text('{"schema": "something/else"}')
    line = one_line_error(run_cli("evidence", str(bogus), "F1", "--format", "json"))
    assert str(bogus) in line and "not a profan JSON report" in line


def test_moved_data_names_the_fix(tmp_path):
    doc = report_json(QWEN3)
    doc["source"]["root"] = doc["source"]["root_abs"] = str(tmp_path / "gone")
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    assert "pass --root DIR" in one_line_error(run_cli("evidence", str(path), "F1"))
    res = run_cli("evidence", str(path), "F1", "--format", "json", "--root", str(QWEN3))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["root"] == str(QWEN3)


# ---------------------------------------------------------------------------------------------- exit code 3


def test_internal_error_exit_3(monkeypatch):
    """A bug (any unexpected exception) is one line naming it, exit 3, no traceback."""
    import profan.pipeline

    def boom(*a, **k):
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(profan.pipeline, "analyze", boom)  # the CLI looks it up when the command runs
    res = run_cli("analyze", str(QWEN3))
    line = one_line_error(res, code=3)
    assert line == (
        "profan: error: internal error: RuntimeError: synthetic failure (please report with the command you ran)"
    )


def test_no_prompt_with_closed_stdin(tmp_path):
    """Nothing waits for input: every command finishes with stdin closed."""
    dest = tmp_path / "skills"
    dest.mkdir()
    for args in (
        ["analyze", str(VLLM), "--brief"],
        ["skill", "install", str(dest)],
        ["skill", "install", str(dest), "--force"],
        ["rules", "--format", "json"],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "profan", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert res.returncode == 0, (args, res.stderr)


# ---------------------------------------------------------------------------------------------- commands


def test_brief_with_full_report_file(tmp_path):
    """--brief -o: the full report goes to the file, the brief (pointing at it) to stdout, and evidence on that
    file returns the rows of the finding the brief names."""
    (tmp_path / "my runs").mkdir()
    out = tmp_path / "my runs" / "report.json"
    res = run_cli("analyze", str(QWEN3), "--format", "json", "--brief", "-o", str(out))
    assert res.returncode == 0 and res.stderr == ""
    brief = json.loads(res.stdout)
    full = json.loads(out.read_text())
    assert brief["report_file"] == str(out.resolve())
    assert brief["summary"]["findings"] == len(full["findings"])
    shown = (brief["findings"] or brief["causes"])[0]  # the brief may keep only the causes within its 8 KB
    # the drill hint is a shell command that works as printed (the path has a space)
    drill = [shown["id"] if word == "ID" else word for word in shlex.split(brief["drill"])]
    assert drill == ["profan", "evidence", str(out.resolve()), shown["id"], "--format", "json"]
    ev = run_cli(*drill[1:])
    assert ev.returncode == 0, ev.stderr
    doc = json.loads(ev.stdout)
    assert doc["id"] == shown["id"] and doc["check"] == shown["check"]
    item = doc["evidence"][0]
    kind = next(k for k in ("lines", "events", "pointers") if k in shown["evidence"][0])
    assert item[kind][: len(shown["evidence"][0][kind])] == shown["evidence"][0][kind]


def test_evidence_text_and_limit():
    """Text output: the finding line, then the cited rows verbatim; --limit cuts rows per item."""
    doc = report_json(QWEN3)
    f = next(f for f in doc["findings"] if f["evidence"][0].get("lines") and len(f["evidence"][0]["lines"]) >= 3)
    ev = f["evidence"][0]
    raw = (QWEN3 / ev["file"]).read_bytes().splitlines()
    res = run_cli("evidence", str(QWEN3), f["id"])
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == f"{f['id']} [{f['severity']}] {f['message']}"
    for n in ev["lines"]:
        assert f"{'line ' + str(n):>12}: {raw[n - 1].decode()}" in out
    res = run_cli("evidence", str(QWEN3), f["id"], "--format", "json", "--limit", "2")
    rows = json.loads(res.stdout)["evidence"][0]["rows"]
    assert [r["locator"] for r in rows] == [f"line {n}" for n in ev["lines"][:2]]


def test_schema_command_and_real_reports_validate():
    """`profan schema` prints a valid JSON Schema and the real reports of the bundled samples satisfy it; so do the
    brief and evidence documents against theirs (built in-process: the CLI prints exactly these documents)."""
    from profan.render.brief import brief
    from profan.render.evidence_doc import evidence_doc

    schemas = {}
    for which in ("report", "brief", "evidence"):
        res = run_cli("schema", which)
        assert res.returncode == 0
        schemas[which] = json.loads(res.stdout)
        jsonschema.Draft202012Validator.check_schema(schemas[which])
    assert schemas["report"]["properties"]["schema"]["const"] == "profan.report/2"

    def valid(doc, which):
        jsonschema.validate(doc, schemas[which], cls=jsonschema.Draft202012Validator)

    valid(report_json(QWEN3), "report")
    for sample in (QWEN3, ASCEND / "msinsight-gpt3-2rank-2023", VLLM, FIXTURES / "torch" / "dlrm_v100_8rank"):
        report = analysed(sample)
        doc = json.loads(json.dumps(report.to_dict()))
        valid(doc, "report")
        valid(brief(report), "brief")
        kinds = set()
        for f in report.findings:
            if f.evidence[0].kind not in kinds:
                kinds.add(f.evidence[0].kind)
                valid(evidence_doc(report, sample, f.id), "evidence")
    # the schema rejects what it should: evidence with two locator kinds, a finding without evidence
    bad = json.loads(json.dumps(analysed(VLLM).to_dict()))
    bad["findings"][0]["evidence"][0]["events"] = [1]
    with pytest.raises(jsonschema.ValidationError):
        valid(bad, "report")
    bad["findings"][0]["evidence"] = []
    with pytest.raises(jsonschema.ValidationError):
        valid(bad, "report")


def test_rules_json_matches_the_pack_files():
    """`rules --format json` lists every check of rules/checks.toml with its thresholds; one id explains one."""
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        checks = {c["id"]: c for c in tomllib.load(fh)["check"]}
    doc = json.loads(run_cli("rules", "--format", "json").stdout)
    assert [c["id"] for c in doc["checks"]] == list(checks)
    idle = next(c for c in doc["checks"] if c["id"] == "device-idle")
    assert idle["params"] == {
        k: v for k, v in checks["device-idle"].items() if k not in ("id", "name", "detects", "why")
    }
    with open(ROOT / "rules" / "buckets" / "ascend.toml", "rb") as fh:
        first = tomllib.load(fh)["rule"][0]
    one = json.loads(run_cli("rules", first["id"], "-f", "json").stdout)["item"]
    assert one["kind"] == "bucket-rule" and one["match"] == first["match"] and one["bucket"] == first["bucket"]
    text = run_cli("rules", first["id"]).stdout
    assert text.startswith(f"{first['id']} ({first['name']}) -> bucket '{first['bucket']}'")


def _cause_texts(check: dict) -> dict:
    """action / verify / alternatives of a check in rules/checks.toml, on the check or in its [check.cause]."""
    cause = check.get("cause") or {}
    return {k: check.get(k) or cause.get(k) for k in ("action", "verify", "alternatives")}


def test_rules_check_prints_action_verify_and_alternatives():
    """`profan rules CHECK` says what to change, how to verify it and what else could explain the data, as the
    rule pack words them; a check without them prints none of the three."""
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        checks = {c["id"]: c for c in tomllib.load(fh)["check"]}
    want = _cause_texts(checks["pipeline-stage-imbalance"])
    assert want["action"] and want["verify"] and want["alternatives"], want
    res = run_cli("rules", "pipeline-stage-imbalance")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert f"action: {want['action']}" in lines
    assert f"verify: {want['verify']}" in lines
    i = lines.index("alternatives:")
    assert lines[i + 1 : i + 1 + len(want["alternatives"])] == [f"  - {a}" for a in want["alternatives"]]
    bare = next(cid for cid, c in checks.items() if not any(_cause_texts(c).values()))
    out = run_cli("rules", bare).stdout
    assert out.startswith(f"{bare} (") and not any(
        ln.startswith(("action:", "verify:", "alternatives:")) for ln in out.splitlines()
    )


def test_skill_path_and_install(tmp_path):
    from profan.app.commands.skill import skill_dir as _skill_dir

    path = run_cli("skill", "path").stdout.strip()
    src = ROOT / "profan" / "skill" / "profan"
    assert path == str(_skill_dir()) and path.endswith("/profan/skill/profan")
    assert (_skill_dir() / "SKILL.md").read_bytes() == (src / "SKILL.md").read_bytes()
    res = run_cli("skill", "install", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(tmp_path / "profan")
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert [p for p in files if p.name == "SKILL.md"]
    assert sorted(p.relative_to(tmp_path / "profan") for p in (tmp_path / "profan").rglob("*") if p.is_file()) == files
    for rel in files:
        assert (tmp_path / "profan" / rel).read_bytes() == (src / rel).read_bytes()
    line = one_line_error(run_cli("skill", "install", str(tmp_path)))
    assert line == f"profan: error: {tmp_path / 'profan'}: already exists; pass --force to replace it"
    (tmp_path / "profan" / "SKILL.md").write_text("stale")
    assert run_cli("skill", "install", str(tmp_path), "--force").returncode == 0
    assert (tmp_path / "profan" / "SKILL.md").read_bytes() == (src / "SKILL.md").read_bytes()


def test_compare_brief_and_evidence(tmp_path):
    """compare --brief: the compact view of the comparison; with -o the saved comparison is what evidence reads,
    and its rows are the raw kernel_details.csv lines of both ranks."""
    out = tmp_path / "compare.json"
    res = run_cli("compare", str(QWEN3), "--ranks", "0,2", "--format", "json", "--brief", "-o", str(out))
    assert res.returncode == 0, res.stderr
    brief = json.loads(res.stdout)
    assert len(res.stdout.encode()) < 8 * 1024
    full = json.loads(out.read_text())
    jsonschema.validate(full, json.loads(run_cli("schema").stdout), cls=jsonschema.Draft202012Validator)
    assert full["source"]["format"] == "compare"
    assert brief["report_file"] == str(out.resolve())
    assert [f["id"] for f in brief["findings"]] == [f["id"] for f in full["findings"]]
    assert {f["check"] for f in brief["findings"]} == {"compare-regression"}
    unsaved = json.loads(run_cli("compare", str(QWEN3), "--ranks", "0,2", "--brief").stdout)
    assert unsaved["report_file"] is None and unsaved["drill"].startswith("save the comparison with --format json")
    ev = json.loads(run_cli("evidence", str(out), "F1", "--format", "json").stdout)
    sides = set()
    for item in ev["evidence"]:
        raw = (QWEN3 / item["file"]).read_bytes().decode("utf-8").splitlines()
        assert [r["text"] for r in item["rows"]] == [raw[n - 1] for n in item["lines"]]
        sides.add(item["file"].split("/")[0])
    assert sides == {"rank_0_ascend_pt", "rank_2_ascend_pt"}


def test_markdown_shows_microsecond_kernels_without_rounding_them_to_zero():
    """vllm-ascend msprof capture: OnesLike ran 4.800 and 8.860 µs, GroupedMatmul 25.861 µs (op_summary lines 2–4).
    The ms columns keep digits enough to tell them apart instead of printing 0.00 / 0.01."""
    res = run_cli("analyze", str(ASCEND / "vllm-ascend-msprof-gmm-1op"), "-q")
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("| 0 | — | ") and "ASC-" in line]
    # the top-kernels rows (their op in code); the moe_parts rows name the rules too
    times = {(cells[3], cells[4]): cells[6] for cells in (r.split(" | ") for r in rows) if cells[3].startswith("`")}
    assert times == {
        ("`GroupedMatmul`", "512,16;8,2048,16;;;;;;8"): "0.026",
        ("`OnesLike`", "8,2048,16"): "0.0089",
        ("`OnesLike`", "512,16"): "0.0048",
    }
