"""`profan analyze`: a profiler output folder into a report, written or printed as asked, gated by --fail-on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from profan.app.console import bad, detail, mode, print_brief, print_text, progress, say
from profan.app.options import (
    Debug,
    Executor,
    Jobs,
    Output,
    Quiet,
    RayAddress,
    Rules,
    Verbose,
    output_format,
    rank_reader,
)
from profan.model.errors import EXIT_FINDINGS

if TYPE_CHECKING:
    from profan.app.output import Inputs


SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}

Tables = Annotated[
    Path | None,
    typer.Option(
        "--tables",
        help="Also write every report table in full as DIR/<table>.parquet (the JSON report cuts tables over "
        "5,000 rows to the rows its diagnosis names, plus summaries)",
    ),
]

NoIterations = Annotated[
    bool,
    typer.Option(
        "--no-iterations",
        help="Read a serving capture as one whole-trace span: no model iterations, phases or serving causes "
        "(as [serving] iterations = false in a --rules file).",
    ),
]

FAIL_ON_HELP = (
    "warning | critical: exit 1 when the diagnosis reaches this severity: a cause counts as its own severity, "
    "which follows its gain (or bound) as a share of the step and in ms (rules/severity.toml), a finding no cause "
    "explains as itself; a symptom a cause explains does not count on its own (stderr names the causes and "
    "findings that did)."
)


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
    no_iterations: NoIterations = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Analyse a profiler output directory into a report."""
    from profan.app import output
    from profan.pipeline import analyze as run

    mode(verbose, quiet, debug)
    if fail_on is not None and fail_on not in ("warning", "critical"):
        bad("--fail-on takes 'warning' or 'critical'")
    if out is not None:
        output.check_target(out)
    if tables is not None:
        output.check_tables_folder(tables)
    fmt = output_format(fmt, out, "json" if brief else "md", "report")
    reader = rank_reader(executor, ray_address, jobs)
    with progress(quiet) as show:
        report = run(
            path, rules=rules or [], progress=show, pack=_pack(rules, no_iterations), hardware=hardware, jobs=reader
        )
    detail(report)
    read = output.read_files(report, [*(rules or []), *([hardware] if hardware else [])])
    if tables is not None:
        written = output.write_tables(tables, report, read)
        if not quiet:
            say(f"wrote {len(written)} table(s) to {tables}")
    _emit_report(report, fmt, out, brief, quiet, read)
    _gate(report, fail_on)


def _pack(rules: list[Path] | None, no_iterations: bool):
    """The rule pack with the serving iteration view off, for ``--no-iterations``; else None (the run loads it)."""
    if not no_iterations:
        return None
    from profan.rulepack.pack import load

    pack = load(rules or [])
    pack.iterations = False
    return pack


def _emit_report(report, fmt: str, out: Path | None, brief: bool, quiet: bool, read: Inputs) -> None:
    """Write and print a report as `analyze` was asked: the file with -o, the brief or the report on stdout."""
    from profan.app import output
    from profan.render import render

    if out is not None:
        output.write(out, read, lambda tmp: render(report, fmt, tmp))
    if brief:
        print_brief(report, str(out.resolve()) if fmt == "json" and out is not None else None)
    elif out is None:
        print_text(render(report, fmt))
    elif not quiet:
        say(f"wrote {out}")


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
        say(f"--fail-on {level}: " + "; ".join(hits))
        raise typer.Exit(EXIT_FINDINGS)


def _headline_severities(report) -> list[tuple]:
    """Each headline item with the severity it gates on, its own: a cause's follows what removing it saves
    (`profan.diagnosis.severity`), not the findings it explains — a healthy run's symptoms must not fail CI."""
    return [(item, item.severity) for item in report.headline]
