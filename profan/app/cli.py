"""Command line: a thin skin over the library. Parse arguments, call profan, print; one-line errors."""

from __future__ import annotations

import codecs
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from profan.model.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, ProfanError, ProfanInputError
from profan.model.textfmt import visible

if TYPE_CHECKING:
    from profan.app.output import Inputs

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is shown as written: "[default: md]" and "profan[mcp]" are not markup
    help="Profiling analysis for Ascend NPU and NVIDIA GPU jobs; every claim cites its source rows.",
)

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
JEMALLOC_ENV = "_RJEM_MALLOC_CONF"  # the allocator settings of the jemalloc built into polars
JEMALLOC_SETTINGS = "background_thread:true,dirty_decay_ms:250,muzzy_decay_ms:0"  # freed pages returned within 250 ms
# the format an -o file's extension names; -f may only agree with it
EXTENSIONS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html", ".xlsx": "xlsx"}
# what this run was asked for beyond its command: progress detail, tracebacks (read by `main` on an error)
_RUN = {"verbose": False, "debug": False}

Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to this file instead of stdout; its extension picks the format."),
]
Rules = Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule file(s), tried first.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Progress on stderr even when it is not a terminal, then what was read and the timings."
    ),
]
Debug = Annotated[
    bool,
    typer.Option("--debug", help="On an internal error, print the traceback instead of one line (still exit 3)."),
]


def _version(value: bool) -> None:
    if value:
        from profan.model.version import __version__

        typer.echo(f"profan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Profiling analysis for Ascend NPU and NVIDIA GPU jobs; every claim cites its source rows."""
    _mode(verbose, False, debug)


def _mode(verbose: bool, quiet: bool, debug: bool) -> None:
    """Record -v / --debug, given before the command or after it."""
    _RUN["verbose"] = _RUN["verbose"] or verbose
    _RUN["debug"] = _RUN["debug"] or debug
    if quiet and _RUN["verbose"]:
        _bad("-q and -v ask for opposite things; pass one of them")


def _safe(text: str) -> str:
    """Text for the terminal: names from traces and paths may hold escape sequences (retitle the window, clear the
    screen) and line breaks (forge a second line); each is shown as a visible escape, as the renderers show it."""
    return visible(text, newlines=False)


def _err(msg: str) -> None:
    typer.echo(f"profan: error: {_safe(msg)}", err=True)


def _bad(msg: str) -> NoReturn:
    """A usage error: one line, exit 2."""
    _err(msg)
    raise typer.Exit(EXIT_BAD_INPUT)


def _say(msg: str) -> None:
    typer.echo(f"profan: {_safe(msg)}", err=True)


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """Progress goes to stderr, and only to a terminal unless -v asks for it: a program reading stderr wants
    errors, not chatter. On a terminal the ranks read show as a bar (ranks, bytes, time left, counted in bytes as
    a rank's read costs about its bytes); piped with -v, every message is a line."""
    if quiet or not (_RUN["verbose"] or sys.stderr.isatty()):
        yield None
    elif not sys.stderr.isatty():
        yield _say
    else:
        bar = _Bar()
        try:
            yield bar
        finally:
            bar.stop()


class _Bar:
    """The terminal's progress: a rich bar for `RankProgress` messages, the other messages as lines above it."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.bar = None
        self.task = None

    def __call__(self, msg: str) -> None:
        from profan.ranks.rankmap import RankProgress

        if not isinstance(msg, RankProgress):
            self.console.print(f"profan: {_safe(msg)}", markup=False, soft_wrap=True)  # a line, as piped
            return
        if self.bar is None:
            self._start(msg.total, msg.total_bytes)
        ranks = f"{msg.done}/{msg.total} ranks"
        self.bar.update(self.task, completed=msg.done_bytes, ranks=ranks)
        if msg.done == msg.total:
            self.stop()

    def _start(self, ranks: int, total_bytes: int) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("profan: reading"),
            BarColumn(),
            TextColumn("{task.fields[ranks]}"),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.bar.add_task("ranks", total=max(total_bytes, 1), ranks=f"0/{ranks} ranks")
        self.bar.start()

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _detail(report) -> None:
    """-v after a run: what the result rests on (files, rows skipped, warnings) and where the time went, so a
    surprising report or exit code can be traced without opening it."""
    if not _RUN["verbose"]:
        return
    src = report.source
    sizes = src.get("file_bytes") or {}
    ranks = src.get("ranks") or []
    if src.get("kind") == "compare":
        of = "rank(s) " + " and ".join(f"{src[s]['ranks']} ({s.upper()})" for s in ("a", "b") if s in src)
    else:
        of = f"{len(ranks)} rank(s)"
    _say(f"read {len(sizes)} file(s), {sum(sizes.values()) / 1e6:.1f} MB, of {of} under {src['root']}")
    for r in ranks:
        if skipped := {k: n for k, n in (r.get("rows_skipped") or {}).items() if n}:
            _say(f"rank {r['rank']}: rows skipped: " + ", ".join(f"{k} {n}" for k, n in skipped.items()))
    for w in report.warnings:
        _say(f"warning: {w}")
    timings = report.meta.get("timings_s") or {}
    if timings:
        _say("time: " + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
    _say(f"{len(report.causes)} cause(s), {len(report.findings)} finding(s), {len(report.warnings)} warning(s)")


def _output_format(fmt: str | None, out: Path | None, default: str, what: str) -> str:
    """The format to write: -f, else the -o file's extension, else ``default`` (also for a stream such as
    ``/dev/stdout``, whose name has none). A -f that contradicts a known
    extension, or an -o whose extension names no format, is refused before any work (a report.xlsx holding
    Markdown is worse than an error); html and xlsx are files, so without -o nothing is written unasked."""
    from profan.render import FORMATS

    if fmt is not None and fmt not in FORMATS:
        _bad(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    implied = EXTENSIONS.get(out.suffix.lower()) if out is not None else None
    if out is not None and fmt is None and implied is None and not _is_stream(out):
        ext = f"its extension {out.suffix!r}" if out.suffix else "a name without an extension"
        _bad(f"-o {out}: cannot tell the format from {ext}; name the file {', '.join(EXTENSIONS)}, or pass -f")
    if fmt is not None and implied is not None and fmt != implied:
        _bad(f"-f {fmt} disagrees with -o {out} (a {out.suffix} file is {implied}); drop -f or rename the file")
    fmt = fmt or implied or default
    if fmt in ("html", "xlsx") and out is None:
        _bad(f"the {fmt} {what} is a file: name it with -o, e.g. -o {what}.{fmt} (nothing is written unasked)")
    return fmt


def _is_stream(out: Path) -> bool:
    """Whether -o is a FIFO, terminal or device (``/dev/stdout``, ``/dev/null``): its name says no format, and
    like stdout it takes the default one."""
    from profan.app import output

    try:
        return output.target_kind(out) == output.STREAM
    except ProfanInputError:
        return False  # `check_target` says what is wrong with it


def _cli_jobs(jobs: int | None) -> int | None:
    """The command line reads ranks in parallel by default (0: one process per core for 4 ranks or more holding
    32 MB or more, else this process's threads).
    The library keeps 1 unless asked: its spawned workers re-import the caller's main module, which the console
    script guards and an arbitrary user script may not."""
    if jobs is not None or os.environ.get("PROFAN_JOBS", "").strip():
        return jobs
    return 0


Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        help="Processes reading ranks (1 = sequential, 0 = one per core for 4+ ranks of 32+ MB, else threads)  "
        "[default: PROFAN_JOBS, else 0]",
    ),
]
Executor = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where the per-rank map runs: local (this machine's processes, see -j) or ray (Ray tasks; needs "
        "'pip install profan[ray]')",
    ),
]
RayAddress = Annotated[
    str,
    typer.Option(
        "--ray-address",
        help="With --executor ray: the cluster's address; auto joins the one Ray finds (RAY_ADDRESS, ray start), "
        "else starts a local one for this run",
    ),
]


def _cli_executor(executor: str, address: str, jobs: int | None):
    """What reads the ranks: ``jobs`` for local processes, or a Ray executor. Asking for Ray without it installed
    is refused before any work."""
    if executor == "local":
        return _cli_jobs(jobs)
    if executor != "ray":
        _bad(f"unknown executor {executor!r}; use local or ray")
    if jobs is not None:
        _bad("-j sets local processes; with --executor ray the cluster's CPUs read the ranks (drop -j)")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        _bad("--executor ray needs Ray: pip install 'profan[ray]'")
    from profan.ranks.ray_tasks import RayTasks

    return RayTasks(address)


Tables = Annotated[
    Path | None,
    typer.Option(
        "--tables",
        help="Also write every report table in full as DIR/<table>.parquet (the JSON report cuts tables over "
        "5,000 rows to the rows its diagnosis names, plus summaries)",
    ),
]
FAIL_ON_HELP = (
    "warning | critical: exit 1 when the diagnosis reaches this severity: a cause counts as its own severity, "
    "which follows its gain (or bound) as a share of the step and in ms (rules/severity.toml), a finding no cause "
    "explains as itself; a symptom a cause explains does not count on its own (stderr names the causes and "
    "findings that did)."
)


@app.command()
def analyze(
    path: Annotated[Path, typer.Argument(help="Profiler output directory (or one kernel_details.csv).")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="md | json | html | xlsx  [default: the -o file's extension, else md (json with --brief)]",
        ),
    ] = None,
    out: Output = None,
    rules: Rules = None,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help=FAIL_ON_HELP)] = None,
    quiet: Quiet = False,
    hardware: Annotated[
        Path | None,
        typer.Option("--hardware", help="TOML file of link-bandwidth priors / the device, on top of rules/hardware."),
    ] = None,
    jobs: Jobs = None,
    executor: Executor = "local",
    ray_address: RayAddress = "auto",
    tables: Tables = None,
    brief: Annotated[
        bool,
        typer.Option(
            "--brief",
            help="Compact JSON (< 8 KB) on stdout: the causes first, then the findings no cause explains, with "
            "evidence locators. "
            "With -o, the full report (format from the extension) is written there too.",
        ),
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Analyse a profiler output directory into a report."""
    from profan.app import output
    from profan.pipeline import analyze as run

    _mode(verbose, quiet, debug)
    if fail_on is not None and fail_on not in ("warning", "critical"):
        _bad("--fail-on takes 'warning' or 'critical'")
    if out is not None:
        output.check_target(out)
    if tables is not None:
        output.check_tables_folder(tables)
    fmt = _output_format(fmt, out, "json" if brief else "md", "report")
    reader = _cli_executor(executor, ray_address, jobs)
    with _progress(quiet) as say:
        report = run(path, rules=rules or [], progress=say, hardware=hardware, jobs=reader)
    _detail(report)
    read = output.read_files(report, [*(rules or []), *([hardware] if hardware else [])])
    if tables is not None:
        written = output.write_tables(tables, report, read)
        if not quiet:
            _say(f"wrote {len(written)} table(s) to {tables}")
    _emit_report(report, fmt, out, brief, quiet, read)
    _gate(report, fail_on)


def _emit_report(report, fmt: str, out: Path | None, brief: bool, quiet: bool, read: Inputs) -> None:
    """Write and print a report as `analyze` was asked: the file with -o, the brief or the report on stdout."""
    from profan.app import output
    from profan.render import render

    if out is not None:
        output.write(out, read, lambda tmp: render(report, fmt, tmp))
    if brief:
        _print_brief(report, str(out.resolve()) if fmt == "json" and out is not None else None)
    elif out is None:
        _print_text(render(report, fmt))
    elif not quiet:
        _say(f"wrote {out}")


def _print_text(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _gate(report, level: str | None) -> None:
    """--fail-on: exit 1 when a headline item reaches ``level``. The diagnosis decides, not the symptoms: a CI
    job fails because of the slow stage, and says so, rather than because of the waiting it causes elsewhere."""
    if level is None:
        return
    hits = [
        f"{item.id} ({sev}, {item.check})"
        for item, sev in _headline_severities(report)
        if SEVERITY_RANK[sev] >= SEVERITY_RANK[level]
    ]
    if hits:
        _say(f"--fail-on {level}: " + "; ".join(hits))
        raise typer.Exit(EXIT_FINDINGS)


def _headline_severities(report) -> list[tuple]:
    """Each headline item with the severity it gates on, its own: a cause's follows what removing it saves
    (`profan.diagnosis.severity`), not the findings it explains — a healthy run's symptoms must not fail CI."""
    return [(item, item.severity) for item in report.headline]


def _print_brief(report, report_file: str | None, drill: str | None = None) -> None:
    """The compact JSON (profan.brief/2) on stdout; `report_file` is the full JSON report when one was written."""
    from profan.render.brief import brief, dumps

    sys.stdout.write(dumps(brief(report, report_file=report_file, drill=drill)) + "\n")


@app.command()
def evidence(
    report_or_dir: Annotated[Path, typer.Argument(help="A report.json written by 'analyze', or the data directory.")],
    finding_id: Annotated[str, typer.Argument(help="A cause (C1), finding (F3) or group member (F3.2) id.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
    root: Annotated[Path | None, typer.Option("--root", help="Data directory, if moved since the report.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=0, help="At most this many rows per evidence item; 0: the claim and locators only."
        ),
    ] = None,
    debug: Debug = False,
) -> None:
    """Print the raw source lines behind one cause or finding, read back from the original files."""
    from profan.app.drill import load_report_or_analyze
    from profan.render.brief import dumps, evidence_doc

    _mode(False, False, debug)
    if fmt not in ("text", "json"):
        _bad(f"unknown format {fmt!r}; use text or json")
    report, data_root = load_report_or_analyze(report_or_dir, root)
    doc = evidence_doc(report, data_root, finding_id, where=report_or_dir, limit=limit)
    if fmt == "json":
        typer.echo(dumps(doc))
        return
    typer.echo(_safe(f"{doc['id']} [{doc['severity']}] {doc['message']}"))
    for item in doc["evidence"]:
        typer.echo(
            "\n"
            + _safe(
                f"{item['file']}  ({item.get('cited', len(item['rows']))} of {item['row_count']} rows cited; select: "
                f"{json.dumps(item['select'], ensure_ascii=False)})"
            )
        )
        for row in item["rows"]:
            typer.echo(_safe(f"{row['locator']:>12}: {row['text']}"))


@app.command()
def rules(
    ident: Annotated[str | None, typer.Argument(help="A rule or check id to explain.")] = None,
    extra: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule file(s) to include.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
) -> None:
    """List the rule pack (bucket rules and checks), or explain one rule."""
    from profan.render.brief import dumps, rules_doc

    if fmt not in ("text", "json"):
        _err(f"unknown format {fmt!r}; use text or json")
        raise typer.Exit(EXIT_BAD_INPUT)
    doc = rules_doc(extra or [], ident)
    if fmt == "json":
        typer.echo(dumps(doc))
        return
    if ident:
        item = doc["item"]
        if item["kind"] == "bucket-rule":
            typer.echo(
                f"{item['id']} ({item['name']}) -> bucket '{item['bucket']}'  [{item['source']}, {item['applies_to']}]"
            )
            typer.echo("matches: " + "; ".join(f"{k} ~ /{v}/" for k, v in item["match"].items()))
            typer.echo(f"why: {item['why']}")
            if item["example"]:
                typer.echo(f"example: {item['example']}")
        else:
            _print_check(item)
        return
    typer.echo("Bucket rules (first match wins):")
    for r in doc["rules"]:
        typer.echo(f"  {r['id']:<16} {r['bucket']:<14} {r['name']:<28} {r['applies_to']:<7} {r['source']}")
    typer.echo("\nChecks:")
    for c in doc["checks"]:
        typer.echo(f"  {c['id']:<28} {c['name']}")
    typer.echo("\n'profan rules ID' explains one.")


def _print_check(item: dict) -> None:
    """One check as ruff prints a rule: what it detects and why, its parameters, and, for a check that names a
    cause, what to change, how to verify the change worked and what else could explain the same data. The three
    are templates whose {names} a report fills with the cause's numbers."""
    params = item.get("params") or {}
    cause = params.get("cause") if isinstance(params.get("cause"), dict) else {}
    typer.echo(f"{item['id']} ({item['name']})  [{item['source']}]")
    typer.echo(f"detects: {item['detects']}")
    typer.echo(f"why: {item['why']}")
    shown = {k: v for k, v in params.items() if k != "cause"}
    if shown:
        typer.echo("parameters: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    for key in ("action", "verify"):
        if text := item.get(key) or cause.get(key):
            typer.echo(f"{key}: {text}")
    if alternatives := item.get("alternatives") or cause.get("alternatives"):
        typer.echo("alternatives:")
        for alt in alternatives:
            typer.echo(f"  - {alt}")


SCHEMAS = ("report", "brief", "evidence")


@app.command()
def schema(
    which: Annotated[str, typer.Argument(help="report | brief | evidence")] = "report",
) -> None:
    """Print the JSON Schema of the JSON report (or of the --brief / evidence documents)."""
    if which not in SCHEMAS:
        _err(f"unknown schema {which!r}; use one of {', '.join(SCHEMAS)}")
        raise typer.Exit(EXIT_BAD_INPUT)
    sys.stdout.write(_schema_path(which).read_text(encoding="utf-8"))


def _schema_path(which: str) -> Path:
    return Path(__file__).resolve().parent.parent / "schema" / f"{which}.schema.json"


skill_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="The agent skill (SKILL.md + references) shipped with profan."
)
app.add_typer(skill_app, name="skill")


def _skill_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "skill" / "profan"


@skill_app.command("path")
def skill_path() -> None:
    """Print the folder holding the skill (SKILL.md and references/)."""
    typer.echo(str(_skill_dir()))


@skill_app.command("install")
def skill_install(
    dest: Annotated[
        Path, typer.Argument(help="A skills directory, e.g. ~/.claude/skills; the skill goes in DEST/profan.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DEST/profan.")] = False,
) -> None:
    """Copy the skill folder into a skills directory (never asks; refuses to overwrite without --force)."""
    import shutil

    target = dest.expanduser() / "profan"
    if dest.exists() and not dest.is_dir():
        raise ProfanInputError(dest, "not a directory")
    if target.is_symlink():  # rmtree refuses one, and copying through it would write where it points
        raise ProfanInputError(target, "is a symbolic link; remove it or name another skills directory")
    if target.exists():
        if not force:
            raise ProfanInputError(target, "already exists; pass --force to replace it")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    shutil.copytree(_skill_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    typer.echo(str(target))


@app.command()
def mcp(
    root: Annotated[
        list[Path] | None,
        typer.Option("--root", help="A folder the tools may read (repeat for more); default: the current folder."),
    ] = None,
) -> None:
    """Serve profan's tools (analyze, compare, evidence, rules) over MCP on stdio; needs 'pip install profan[mcp]'."""
    from profan.app.mcp_server import serve

    for r in root or []:
        if not r.is_dir():
            raise ProfanInputError(r, "--root takes a folder that exists")
    serve(root)


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Side A: a rank file/folder, a run directory, or (with --ranks) the job.")],
    b: Annotated[Path | None, typer.Argument(help="Side B: the same kind of path as A.")] = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Two ranks of directory A to compare, e.g. 0,7.")] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="md | json | html | xlsx  [default: the -o file's extension, else md]"),
    ] = None,
    out: Output = None,
    rules: Rules = None,
    quiet: Quiet = False,
    brief: Annotated[
        bool,
        typer.Option(
            "--brief", help="Compact JSON (< 8 KB) on stdout, as for analyze; with -o the full report goes there."
        ),
    ] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Processes reading each side's ranks, as for analyze.")
    ] = None,
    executor: Executor = "local",
    ray_address: RayAddress = "auto",
    fail_on_regression: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on-regression",
            metavar="[BUCKET=]PCT",
            help="Exit 1 when B's step time (or, with BUCKET=PCT, that bucket's time per step) is more than PCT "
            "percent above A's. Repeatable.",
        ),
    ] = None,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Compare two ranks of one job or two runs: step totals, bucket and kernel deltas (B minus A), with rows."""
    from profan.app import output
    from profan.comparison.compare import compare as run_compare
    from profan.comparison.regression_limits import regression_limits, regressions
    from profan.rulepack.pack import load

    _mode(verbose, quiet, debug)
    if out is not None:
        output.check_target(out)
    fmt = _output_format(fmt, out, "md", "comparison")
    pair = _rank_pair(ranks)
    pack = load(rules or [])
    step_pct, bucket_pct = regression_limits(fail_on_regression or [], pack)
    reader = _cli_executor(executor, ray_address, jobs)
    with _progress(quiet) as say:
        report = run_compare(a, b, ranks=pair, pack=pack, progress=say, jobs=reader)
    _detail(report)
    _emit_compare(report, fmt, out, brief, quiet, rules or [])
    if fail_on_regression and (past := regressions(report, step_pct, bucket_pct)):
        _say("regression: " + "; ".join(past))
        raise typer.Exit(EXIT_FINDINGS)


def _rank_pair(ranks: str | None) -> tuple[int, ...] | None:
    if ranks is None:
        return None
    try:
        pair = tuple(int(x) for x in ranks.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2:
        _err(f"--ranks takes two rank numbers like 0,7 (got {ranks!r})")
        raise typer.Exit(EXIT_BAD_INPUT)
    return pair


def _emit_compare(report, fmt: str, out: Path | None, brief: bool, quiet: bool, rules: list[Path]) -> None:
    """Write and print a comparison as `compare` was asked: the file with -o, the brief or the report on stdout."""
    from profan.app import output
    from profan.render import render
    from profan.render.compare_markdown import render_compare_markdown

    def renderer(r, tmp: Path | None):
        return render_compare_markdown(r, tmp) if fmt == "md" else render(r, fmt, tmp)

    if out is not None:
        output.write(out, output.read_files(report, rules), lambda tmp: renderer(report, tmp))
    if brief:
        report_file = str(out.resolve()) if fmt == "json" and out is not None else None
        # `profan evidence DIR` would analyse DIR, not compare it: only a saved comparison has these ids
        _print_brief(
            report,
            report_file,
            None
            if report_file
            else (
                "save the comparison with --format json -o report.json, then "
                "profan evidence report.json ID --format json"
            ),
        )
    elif out is None:
        _print_text(renderer(report, None))
    elif not quiet:
        _say(f"wrote {out}")


def _json_escape(exc: UnicodeError) -> tuple[str, int]:
    """A codec error handler: what the stream cannot encode as ``\\u00b7`` escapes (UTF-16 pairs past U+FFFF),
    which are valid inside a JSON string (JSON on stdout stays JSON) and readable in text."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for ch in exc.object[exc.start : exc.end]:
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out), exc.end


codecs.register_error("profan-escape", _json_escape)


def _lenient_streams() -> None:
    """A terminal or pipe whose encoding is not UTF-8 (``PYTHONIOENCODING=ascii``, an old locale) gets what it
    cannot encode escaped (`_json_escape`), not an internal error on profan's own ``·`` or a kernel's name.
    Streams that are no text file of the OS (a test's StringIO) are left as they are."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="profan-escape")


def main(argv: list[str] | None = None) -> None:
    """Entry point: map errors to one line on stderr and a documented exit code (with --debug, an internal error
    prints its traceback instead). ``argv``: the arguments (default the command line's)."""
    _RUN.update(verbose=False, debug=False)  # one process may run several commands (tests, embedding)
    # polars' allocator keeps freed pages for seconds, and a cluster's read frees its batches' working memory one
    # after the other: returned within a quarter second, a 1,000-rank analysis peaks lower. Returned at once (a
    # decay of 0) it peaks lower still, but every buffer a streaming scan frees is then handed back and faulted in
    # again, which slows the scan of a GB kernel file by half (the trade-off measured in bench/README.md). Set
    # before polars is imported (it reads this once), and inherited by worker processes.
    os.environ.setdefault(JEMALLOC_ENV, JEMALLOC_SETTINGS)
    _lenient_streams()
    try:
        # With standalone_mode=False click *returns* the code of a typer.Exit instead of raising it.
        rc = app(args=argv, standalone_mode=False, prog_name="profan")
        if isinstance(rc, int) and rc != EXIT_OK:
            sys.exit(rc)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except ProfanError as exc:
        _err(str(exc))
        sys.exit(EXIT_BAD_INPUT)
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except Exception as exc:  # usage errors of the CLI framework, and genuine bugs
        # typer vendors click, so recognise its usage errors by shape rather than by importing click
        if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            if type(exc).__name__ == "NoArgsIsHelpError":  # its message is the help: to stdout, as --help
                typer.echo(exc.format_message())
                _err(f"missing command{where}")
            else:
                _err(f"{exc.format_message()}{where}")
            sys.exit(EXIT_BAD_INPUT)
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        if _RUN["debug"]:
            traceback.print_exc()
            sys.exit(EXIT_INTERNAL)
        _err(f"internal error: {type(exc).__name__}: {exc} (please report with the command you ran)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)
