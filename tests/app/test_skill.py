"""The agent skill: front matter per the Agent Skills rules, every `profan …` command it mentions exists and runs on
a bundled sample, its references are present and current, and a built wheel carries all of it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import zipfile
from itertools import pairwise

import pytest
import tomllib
import yaml
from conftest import QWEN3, ROOT, run_cli

pytestmark = pytest.mark.process  # runs profan in child processes: left out of the fast loop

SKILL = ROOT / "profan" / "skill" / "profan"
TEXT = (SKILL / "SKILL.md").read_text(encoding="utf-8")


def front_matter() -> tuple[dict, str]:
    assert TEXT.startswith("---\n")
    head, body = TEXT[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def test_front_matter():
    meta, body = front_matter()
    assert set(meta) == {"name", "description"}
    name = meta["name"]
    assert isinstance(name, str) and len(name) <= 64
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)  # lowercase letters, digits, single inner hyphens
    assert name == SKILL.name == "profan"
    desc = meta["description"]
    assert isinstance(desc, str) and 0 < len(desc) <= 1024
    assert "<" not in desc and ">" not in desc
    # what it does and when to use it
    assert "Ascend" in desc and "evidence" in desc and "Use it when" in desc
    assert len(TEXT.splitlines()) < 500
    assert body.lstrip().startswith("# profan")


def test_references_exist_and_are_current():
    """Every reference SKILL.md names exists and every file in references/ is named; the report schema reference
    is docs/report-schema.md; the rule list names only real checks and all of them."""
    named = set(re.findall(r"`(references/[\w.-]+)`", TEXT))
    present = {f"references/{p.name}" for p in (SKILL / "references").iterdir()}
    assert named == present
    assert (SKILL / "references" / "report-schema.md").read_bytes() == (ROOT / "docs" / "report-schema.md").read_bytes()
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        checks = {c["id"] for c in tomllib.load(fh)["check"]}
    rules_md = (SKILL / "references" / "rules.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", rules_md, flags=re.M))
    assert listed - checks == set(), "rules.md lists checks that do not exist"
    assert checks - listed == set(), "checks missing from references/rules.md"


def _cause_checks() -> set[str]:
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        return {c["id"] for c in tomllib.load(fh)["check"] if "cause" in c}


def test_skill_says_to_read_the_causes_first_and_which_checks_make_them():
    """An agent reads `causes` first; the skill and the schema reference name exactly the checks that make causes
    (those with a [check.cause] table)."""
    _, body = front_matter()
    assert "**Read `causes` first**" in body
    brief_section = body[body.index("## Reading the brief") : body.index("## Verifying a claim")]
    assert brief_section.index("`causes`") < brief_section.index("`findings`")
    para = brief_section[brief_section.index("Checks that make causes") :].split("\n\n")[0]
    assert set(re.findall(r"`([a-z0-9-]+)`", para)) - {"rules"} == _cause_checks()
    doc = (ROOT / "docs" / "report-schema.md").read_text(encoding="utf-8")
    causes = doc[doc.index("### Causes") :]
    para = causes[causes.index("Causes are") :].split("\n\n")[0]
    assert set(re.findall(r"`([a-z0-9-]+)`", para)) == _cause_checks()


def test_skill_leads_with_the_verdict_workflow():
    """The first section is the workflow an agent follows (the one tests/app/test_agent_transcript.py scripts): causes
    first, then `evidence` without rows (`limit=0`), rows last; and its table of causes and their usual symptoms
    is the rule pack's own ([check.cause] explains of every cause check that explains any)."""
    _, body = front_matter()
    first = body[body.index("\n## ") :].split("\n## ")[1]
    assert first.startswith("The verdict workflow\n")
    steps = [first.index(s) for s in ("read `causes` first", "`limit=0`", "`limit=1`")]
    assert steps == sorted(steps)
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (.+) \|$", first, flags=re.M)
    with open(ROOT / "rules" / "checks.toml", "rb") as fh:
        explains = {
            c["id"]: c["cause"]["explains"] for c in tomllib.load(fh)["check"] if c.get("cause", {}).get("explains")
        }
    assert {check: re.findall(r"`([a-z0-9-]+)`", cells) for check, cells in rows} == explains
    # the MCP defaults it states are the ones the tools advertise
    from profan.app.mcp_server import BRIEF_BYTES, EVIDENCE_BYTES, RULES_BYTES

    mcp = body[body.index("## MCP") :]
    assert f"`analyze` with the path (default `max_bytes` {BRIEF_BYTES})" in first
    for tool, default in (("analyze", BRIEF_BYTES), ("evidence", EVIDENCE_BYTES), ("rules", RULES_BYTES)):
        (row,) = [ln for ln in mcp.splitlines() if ln.startswith(f"| `{tool}` |")]
        assert f"`max_bytes` ({default})" in row


def mentioned_commands() -> list[str]:
    """`profan …` in inline code and in code blocks of SKILL.md, in order, without duplicates."""
    found = re.findall(r"`(profan(?: [^`|]*)?)`", TEXT)
    for block in re.findall(r"```\n(.*?)```", TEXT, flags=re.S):
        found += [ln.strip() for ln in block.splitlines() if ln.strip().startswith("profan")]
    return list(dict.fromkeys(c.strip() for c in found))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory with what the commands refer to: report.json of the Qwen3 sample, a rules file and a
    hardware file, and an empty skills directory."""
    wd = tmp_path_factory.mktemp("skill")
    res = run_cli("analyze", str(QWEN3), "-f", "json", "-o", str(wd / "report.json"), "-q", cwd=wd)
    assert res.returncode == 0, res.stderr
    (wd / "my_rules.toml").write_text(
        '[pack]\napplies_to = "ascend"\n\n[[rule]]\nid = "MY-ATTN-001"\n'
        'name = "my-fused-attention"\nbucket = "attention"\n'
        'match = { name = "MyFusedAttn" }\nwhy = "Our kernel."\n'
    )
    (wd / "hw.toml").write_text('[assume]\ndevice = "ascend_910b"\n')
    (wd / "skills").mkdir()
    return wd


def concrete(cmd: str, wd) -> list[str]:
    """Replace the placeholders of a documented command with real paths and ids."""
    subst = {
        "DIR": str(QWEN3),
        "report.json": str(wd / "report.json"),
        "CHECK_OR_RULE_ID": "device-idle",
        "CHECK": "exposed-communication",
        "RULE_ID": "ASC-ATTN-001",
        "ID": "ASC-GEMM-001",
        "my_rules.toml": str(wd / "my_rules.toml"),
        "hw.toml": str(wd / "hw.toml"),
        "report.html": str(wd / "report.html"),
        "compare.json": str(wd / "compare.json"),
        "A,B": "0,2",
        "RUN_A": str(QWEN3 / "rank_0_ascend_pt"),
        "RUN_B": str(QWEN3 / "rank_2_ascend_pt"),
    }
    args = shlex.split(cmd)[1:]
    if args[:2] == ["skill", "install"]:
        return [*args[:2], str(wd / "skills"), *args[3:]]
    return [subst.get(a, a) for a in args]


def test_every_mentioned_command_runs(workdir):
    """Each command SKILL.md teaches runs on the bundled Qwen3 sample with the exit code the skill promises."""
    cmds = mentioned_commands()
    assert len(cmds) >= 12
    subcommands = {c.split()[1] for c in cmds if len(c.split()) > 1}
    assert {"analyze", "compare", "evidence", "rules", "schema", "skill", "mcp"} <= subcommands
    runs = []
    for cmd in cmds:
        args = concrete(cmd, workdir)
        if len(args) == 1 and args[0] in ("analyze", "compare", "evidence"):  # named in prose: it must exist
            args = [args[0], "--help"]
        if args[:2] == ["skill", "install"]:
            args.append("--force")  # the folder may be there from an earlier run
        runs.append((cmd, args))
    # `profan mcp` serves on stdin until it closes: a process of its own, with stdin closed, started first and
    # run beside the rest; the others run through the console script's entry point in this process, the
    # commands that write a file the others read first
    servers = [(cmd, args, _start(args, workdir)) for cmd, args in runs if args[0] == "mcp"]
    writers = [r for r in runs if "-o" in r[1] and r[1][0] != "mcp"]
    readers = [r for r in runs if "-o" not in r[1] and r[1][0] != "mcp"]
    results = [(cmd, args, run_cli(*args, cwd=workdir)) for cmd, args in [*writers, *readers]]
    results += [(cmd, args, _finish(args, proc)) for cmd, args, proc in servers]
    assert len(results) == len(runs)
    for cmd, args, res in results:
        expected = 1 if "--fail-on" in args else 0
        assert res.returncode == expected, (cmd, args, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr
        if "--brief" in args or args[0] == "schema" or ("--format", "json") in pairwise(args):
            json.loads(res.stdout)  # stdout is exactly one JSON document


def _start(args: list[str], cwd) -> subprocess.Popen:
    """`profan ARGS` as a process of its own, stdin closed, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "profan", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def _finish(args: list[str], proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(["profan", *args], proc.returncode, out, err)


def test_wheel_ships_skill_and_schemas(tmp_path):
    """A built wheel (what `pip install .` installs) carries SKILL.md, its references and the JSON Schemas."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    (wheel,) = tmp_path.glob("profan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"profan/skill/profan/{p.relative_to(SKILL)}" for p in SKILL.rglob("*") if p.is_file()}
    expected |= {f"profan/schema/{p.name}" for p in (ROOT / "profan" / "schema").glob("*.json")}
    assert {"profan/skill/profan/SKILL.md", "profan/schema/report.schema.json"} <= expected
    assert expected <= names, sorted(expected - names)
