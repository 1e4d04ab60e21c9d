"""The command line keeps the conventions of the tools it sits beside (ruff, sqlite-utils, HTA): the output file's
extension picks the format and -f may not contradict it, nothing is written unasked, `--version`, shell
completion, `-v` / `--debug`, help text shown as written, and help for every option of the synthetic generator."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import ASCEND, QWEN3, ROOT, analysed, assert_one_line_error, run_cli
from openpyxl import load_workbook

import profan

pytestmark = pytest.mark.process  # runs profan in child processes: left out of the fast loop

VLLM = ASCEND / "vllm-ascend-msprof-gmm-1op"  # one rank, one op: quick to analyse


def _kind(path: Path) -> str:
    """What a written file really is, read back (not what its name says)."""
    data = path.read_bytes()
    if data.startswith(b"PK"):
        load_workbook(path)  # a real workbook, or this raises
        return "xlsx"
    text = data.decode("utf-8")
    if text.startswith("<!DOCTYPE html>"):
        return "html"
    if text.startswith("{"):
        json.loads(text)
        return "json"
    assert text.startswith("#"), text[:80]
    return "md"


# ------------------------------------------------------------------------------------ format from the extension


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("r.md", "md"), ("r.json", "json"), ("r.html", "html"), ("r.xlsx", "xlsx"), ("R.XLSX", "xlsx"), ("r.htm", "html")],
)
def test_analyze_format_follows_the_extension(tmp_path, name, fmt):
    """`-o r.xlsx` without -f writes a workbook (it used to write Markdown into it, exit 0)."""
    out = tmp_path / name
    res = run_cli("analyze", str(VLLM), "-q", "-o", str(out))
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "", res.stderr
    assert _kind(out) == fmt


def test_xlsx_by_extension_is_a_real_workbook(tmp_path):
    """The workbook written from the extension alone has the sheets the Excel renderer writes, with the report's
    findings in it."""
    out = tmp_path / "report.xlsx"
    assert run_cli("analyze", str(QWEN3), "-q", "-o", str(out)).returncode == 0
    book = load_workbook(out)
    assert {"Summary", "Findings", "Evidence"} <= set(book.sheetnames)
    cells = {str(c.value) for row in book["Findings"].iter_rows() for c in row if c.value is not None}
    ids = [f.id for f in analysed(QWEN3).findings]
    assert set(ids) <= cells


@pytest.mark.parametrize(("name", "fmt"), [("c.md", "md"), ("c.json", "json"), ("c.html", "html"), ("c.xlsx", "xlsx")])
def test_compare_format_follows_the_extension(tmp_path, name, fmt):
    """The same for compare, --brief included: the brief goes to stdout and the file is what its name says (the
    brief used to write Markdown or JSON whatever -f asked)."""
    out = tmp_path / name
    res = run_cli("compare", str(QWEN3), "--ranks", "0,2", "-q", "-o", str(out))
    assert res.returncode == 0 and res.stdout == "", res.stderr
    assert _kind(out) == fmt
    out.unlink()
    res = run_cli("compare", str(QWEN3), "--ranks", "0,2", "-q", "--brief", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "profan.brief/2"
    assert _kind(out) == fmt


@pytest.mark.parametrize("command", ["analyze", "compare"])
@pytest.mark.parametrize(("fmt", "name"), [("json", "r.md"), ("md", "r.xlsx"), ("html", "r.json"), ("xlsx", "r.htm")])
def test_a_format_that_contradicts_the_extension_is_refused(tmp_path, command, fmt, name):
    """-f and a known extension that disagree are one line, exit 2, before any work: nothing is written."""
    out = tmp_path / name
    args = [str(QWEN3), "--ranks", "0,2"] if command == "compare" else [str(VLLM)]
    res = run_cli(command, *args, "-f", fmt, "-o", str(out))
    assert_one_line_error(res, f"-f {fmt} disagrees with -o {out}", f"a {out.suffix} file is ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["analyze", "compare"])
@pytest.mark.parametrize("name", ["report.txt", "report", "report.csv"])
def test_an_extension_that_names_no_format_is_refused_without_f(tmp_path, command, name):
    """Without -f the extension must name a format; the message lists the ones that do. With -f the name is
    free (a .txt or .log holding JSON is a choice, not a contradiction)."""
    out = tmp_path / name
    args = [str(QWEN3), "--ranks", "0,2"] if command == "compare" else [str(VLLM)]
    res = run_cli(command, *args, "-q", "-o", str(out))
    assert_one_line_error(res, f"-o {out}: cannot tell the format", ".md", ".json", ".html", ".xlsx", "or pass -f")
    assert not out.exists()
    assert run_cli(command, *args, "-q", "-f", "json", "-o", str(out)).returncode == 0
    assert _kind(out) == "json"


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", str(VLLM), "-f", "html"],
        ["analyze", str(VLLM), "-f", "xlsx"],
        ["analyze", str(VLLM), "-f", "html", "--brief"],
        ["compare", str(QWEN3), "--ranks", "0,2", "-f", "xlsx"],
        ["compare", str(QWEN3), "--ranks", "0,2", "-f", "html", "--brief"],
    ],
)
def test_nothing_is_written_unasked(tmp_path, args):
    """An HTML or Excel report is a file: without -o it is refused, naming the fix, and the current folder stays
    empty (no ./report.html)."""
    res = run_cli(*args, cwd=tmp_path)
    fmt = args[args.index("-f") + 1]
    assert_one_line_error(res, f"the {fmt} ", "name it with -o", "nothing is written unasked")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ --version, completion


def test_version():
    res = run_cli("--version")
    assert (res.returncode, res.stdout, res.stderr) == (0, f"profan {profan.__version__}\n", "")
    proc = subprocess.run(
        [sys.executable, "-m", "profan", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (proc.returncode, proc.stdout) == (0, f"profan {profan.__version__}\n")


def _bin_path() -> str:
    """PATH with the folder of the `profan` console script of this environment first."""
    script = Path(sys.executable).parent / "profan"
    assert script.exists(), script
    return f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def test_shell_completion_installs_and_completes(tmp_path):
    """`--install-completion`, run from bash, writes a script under $HOME and sources it from .bashrc; that script,
    run by bash, completes subcommands and options by asking profan itself."""
    env = {**os.environ, "HOME": str(tmp_path), "PATH": _bin_path()}
    bash = shutil.which("bash")
    assert bash
    # run from bash, as a user does: the shell is detected from the parent process, which in a test worker
    # (pytest-xdist) or a suite started from no shell is none; a command after it keeps bash from exec-ing profan

    def in_bash(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [bash, "--norc", "-c", f"{command}; exit $?"], capture_output=True, text=True, env=env, timeout=120
        )

    shown = in_bash("profan --show-completion")
    assert shown.returncode == 0 and "_PROFAN_COMPLETE=complete_bash" in shown.stdout, shown.stderr
    res = in_bash("profan --install-completion")
    assert res.returncode == 0, res.stderr
    script = tmp_path / ".bash_completions" / "profan.sh"
    assert script.read_text().strip() == shown.stdout.strip()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    for words, cword, want in (("profan ana", 1, "analyze"), ("profan analyze --fo", 2, "--format")):
        done = subprocess.run(
            [
                bash,
                "--norc",
                "-c",
                f'source "{script}"; COMP_WORDS=({words}); COMP_CWORD={cword}; _profan_completion profan; '
                'printf "%s\\n" "${COMPREPLY[@]}"',
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.stdout.split() == [want], (done.stdout, done.stderr)


# ------------------------------------------------------------------------------------ -v / --debug


@pytest.mark.parametrize("where", ["after", "before"])
def test_verbose_shows_progress_and_detail_on_a_piped_stderr(where):
    """-v (after the command or before it): the progress a terminal sees, then what was read, the warnings and
    the timings — even when stderr is a pipe; stdout is still exactly the report."""
    args = ["analyze", str(QWEN3), "-f", "json", "-v"] if where == "after" else ["-v", "analyze", str(QWEN3)]
    res = run_cli(*args, *(["-f", "json"] if where == "before" else []))
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    lines = res.stderr.splitlines()
    assert all(ln.startswith("profan: ") for ln in lines)
    assert f"profan: found 4 rank(s) in {QWEN3}" in lines
    assert "profan: [4/4] read rank 3" in lines
    n_files = len(report["source"]["file_bytes"])
    assert any(
        ln.startswith(f"profan: read {n_files} file(s), ") and ln.endswith(f"of 4 rank(s) under {QWEN3}")
        for ln in lines
    )
    assert [ln for ln in lines if ln.startswith("profan: warning: ")] == [
        f"profan: warning: {w}" for w in report["warnings"]
    ]
    assert any(ln.startswith("profan: time: read ") for ln in lines)
    assert lines[-1] == (
        f"profan: {len(report['causes'])} cause(s), {len(report['findings'])} finding(s), "
        f"{len(report['warnings'])} warning(s)"
    )


def test_verbose_compare_names_the_ranks_of_each_side():
    res = run_cli("compare", str(QWEN3), "--ranks", "0,2", "-f", "json", "-v")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    lines = res.stderr.splitlines()
    assert "profan: [2/2] read rank 2" in lines
    read = next(ln for ln in lines if ln.startswith("profan: read "))
    assert read.startswith(f"profan: read {len(doc['source']['file_bytes'])} file(s), ")
    assert read.endswith(f"of rank(s) [0] (A) and [2] (B) under {QWEN3}")
    assert lines[-1] == f"profan: 0 cause(s), {len(doc['findings'])} finding(s), {len(doc['warnings'])} warning(s)"


def test_verbose_and_quiet_together_are_refused():
    assert_one_line_error(run_cli("analyze", str(VLLM), "-q", "-v"), "-q and -v")
    assert_one_line_error(run_cli("-v", "compare", str(QWEN3), "--ranks", "0,2", "-q"), "-q and -v")


@pytest.fixture
def broken_pipeline(monkeypatch):
    """A bug inside the analysis: any unexpected exception."""
    import profan.pipeline

    def boom(*_a, **_k):
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(profan.pipeline, "analyze", boom)


@pytest.mark.parametrize("where", ["after", "before"])
def test_debug_prints_the_traceback_of_an_internal_error(broken_pipeline, where):
    """--debug: the traceback instead of the one line, still exit 3; the next run without it is one line again
    (the flag does not stick to the process)."""
    args = ["analyze", str(VLLM), "--debug"] if where == "after" else ["--debug", "analyze", str(VLLM)]
    res = run_cli(*args)
    assert res.returncode == 3 and res.stdout == ""
    assert res.stderr.startswith("Traceback (most recent call last):")
    assert res.stderr.rstrip().endswith("RuntimeError: synthetic failure")
    assert "in boom" in res.stderr and "profan: error:" not in res.stderr
    res = run_cli("analyze", str(VLLM))
    assert (res.returncode, res.stderr) == (
        3,
        "profan: error: internal error: RuntimeError: synthetic failure (please report with the command you ran)\n",
    )


def test_debug_leaves_bad_input_one_line(tmp_path):
    """Bad input is not a bug: --debug does not turn its one line into a traceback."""
    assert_one_line_error(run_cli("analyze", str(tmp_path / "missing"), "--debug"), "no such file or directory")


# ------------------------------------------------------------------------------------ help text


def _help(*args: str) -> str:
    res = run_cli(*args, "--help")
    assert res.returncode == 0, res.stderr
    return " ".join(res.stdout.split())  # the help is wrapped to the terminal; compare words


def test_help_shows_bracketed_text_verbatim():
    """No markup eats `[default: …]` or the `profan[mcp]` extra's name."""
    assert "md | json | html | xlsx [default: the -o file's extension, else md (json with --brief)]" in _help("analyze")
    assert "[default: PROFAN_JOBS, else 0]" in _help("analyze")
    assert "md | json | html | xlsx [default: the -o file's extension, else md]" in _help("compare")
    assert "text | json [default: text]" in _help("evidence")
    assert "pip install profan[mcp]" in _help("mcp")


def test_help_names_the_conventions():
    top = _help()
    for option in ("--version", "--verbose", "--debug", "--install-completion", "--show-completion"):
        assert option in top
    analyze = _help("analyze")
    assert "its extension picks the format" in analyze
    assert "a cause counts as its own severity" in analyze  # the --fail-on rule


# ------------------------------------------------------------------------------------ python -m profan.synth


def _synth(*args: str) -> subprocess.CompletedProcess:
    """`python -m profan.synth ARGS` through the module's own `main`, in this process, output captured."""
    from profan.synth.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    return subprocess.CompletedProcess(["profan.synth", *args], code, out.getvalue(), err.getvalue())


def test_synth_help_has_text_and_default_for_every_option(monkeypatch):
    """Every generator option says what it does and its default; the list is the SynthParams fields."""
    from profan.synth import SynthParams
    from profan.synth.__main__ import HELP

    defaults = asdict(SynthParams())
    assert list(HELP) == list(defaults)
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: argparse wraps at the terminal's width
    res = _synth("--help")
    assert res.returncode == 0, res.stderr
    blocks: dict[str, str] = {}  # option -> its help entry, lines joined (argparse wraps a long invocation)
    for ln in res.stdout.split("options:", 1)[1].splitlines():
        if ln.startswith("  -"):
            flag, _, rest = ln.strip().partition(" ")
            blocks[flag] = rest
        elif ln.strip():
            blocks[flag] += " " + ln.strip()
    assert set(blocks) == {"-h,", *("--" + name.replace("_", "-") for name in defaults)}
    for name, default in defaults.items():
        entry = " ".join(blocks["--" + name.replace("_", "-")].split())
        metavar, text = entry.split(" ", 1)
        assert metavar and text.startswith(HELP[name]), entry
        shown = "none" if default is None else (str(default).lower() if isinstance(default, bool) else str(default))
        if name == "straggler_layer":
            shown = "the middle layer"
        assert text == f"{HELP[name]} (default: {shown})", entry


def test_synth_runs_with_the_options_its_help_names(tmp_path):
    """The options do what their help says: two ranks, one step, no trace_view.json, a slow link; a misspelt
    boolean or an unknown dispatcher is refused (exit 2) rather than read as something else."""
    out = tmp_path / "c2"
    cmd = [str(out), "--ranks", "2", "--steps", "1", "--layers", "1"]
    res = _synth(*cmd, "--trace", "false", "--slow-link", "0,1")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["slow_link"] == {"ranks": [0, 1], "factor": 4.0}
    ranks = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(ranks) == 2 and all(r.endswith("_ascend_pt") for r in ranks)
    assert not list(out.rglob("trace_view.json")) and (out / "ground_truth.json").is_file()
    for bad, said in (("--trace=flase", "expected true or false"), ("--dispatcher=mc3", "invalid choice: 'mc3'")):
        res = _synth(*cmd, bad)
        assert res.returncode == 2 and said in res.stderr, res.stderr
