"""Command line: a thin skin over the library. Parse arguments, call profan, print; one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from profan.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, ProfanError, ProfanInputError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Profiling analysis for Ascend NPU and NVIDIA GPU jobs; every claim cites its source rows.")

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def _err(msg: str) -> None:
    typer.echo(f"profan: error: {msg}", err=True)


def _progress(quiet: bool):
    if quiet:
        return None
    return lambda msg: typer.echo(f"profan: {msg}", err=True)


@app.command()
def analyze(
    path: Annotated[Path, typer.Argument(help="Profiler output directory (or one kernel_details.csv).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="md | json | html | xlsx")] = "md",
    out: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule file(s), tried first.")] = None,
    fail_on: Annotated[str | None, typer.Option(
        "--fail-on", help="Exit 1 when a finding of this severity or worse exists: warning | critical.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    hardware: Annotated[Path | None, typer.Option(
        "--hardware", help="TOML file of link-bandwidth priors / the device, on top of rules/hardware.")] = None,
) -> None:
    """Analyse a profiler output directory into a report."""
    from profan.pipeline import analyze as run
    from profan.render import FORMATS, render

    if fmt not in FORMATS:
        _err(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        raise typer.Exit(EXIT_BAD_INPUT)
    if fail_on is not None and fail_on not in ("warning", "critical"):
        _err("--fail-on takes 'warning' or 'critical'")
        raise typer.Exit(EXIT_BAD_INPUT)
    if fmt in ("html", "xlsx") and out is None:
        out = Path(f"report.{fmt}")
    report = run(path, rules=rules or [], progress=_progress(quiet), hardware=hardware)
    text = render(report, fmt, out)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    elif not quiet:
        typer.echo(f"profan: wrote {out}", err=True)
    if fail_on is not None and any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on] for f in report.findings):
        raise typer.Exit(EXIT_FINDINGS)


@app.command()
def evidence(
    report_or_dir: Annotated[Path, typer.Argument(help="A report.json written by 'analyze', or the data directory.")],
    finding_id: Annotated[str, typer.Argument(help="Finding id, e.g. F3.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
    root: Annotated[Path | None, typer.Option("--root", help="Data directory, if moved since the report.")] = None,
) -> None:
    """Print the raw source lines behind one finding, read back from the original files."""
    from profan.drill import evidence_rows, load_report_or_analyze

    report, data_root = load_report_or_analyze(report_or_dir, root)
    try:
        finding = report.finding(finding_id)
    except KeyError:
        raise ProfanInputError(report_or_dir, f"no finding {finding_id} (report has "
                                              f"{', '.join(f.id for f in report.findings[:12]) or 'none'}"
                                              f"{'…' if len(report.findings) > 12 else ''})") from None
    items = evidence_rows(data_root, finding)
    if fmt == "json":
        typer.echo(json.dumps({"id": finding.id, "check": finding.check, "message": finding.message,
                               "root": str(data_root), "evidence": items}, indent=1, ensure_ascii=False))
        return
    typer.echo(f"{finding.id} [{finding.severity}] {finding.message}")
    for item in items:
        shown = len(item["rows"])
        typer.echo(f"\n{item['file']}  ({shown} of {item['row_count']} rows cited; select: "
                   f"{json.dumps(item['select'], ensure_ascii=False)})")
        for row in item["rows"]:
            typer.echo(f"{row['locator']:>12}: {row['text']}")


@app.command()
def rules(
    ident: Annotated[str | None, typer.Argument(help="A rule or check id to explain.")] = None,
    extra: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule file(s) to include.")] = None,
) -> None:
    """List the rule pack (bucket rules and checks), or explain one rule."""
    from profan.rulepack import BucketRule, load

    pack = load(extra or [])
    if ident:
        item = pack.find(ident)
        if item is None:
            raise ProfanInputError(None, f"no rule or check {ident!r}; run 'profan rules' for the list")
        if isinstance(item, BucketRule):
            typer.echo(f"{item.id} ({item.name}) -> bucket '{item.bucket}'  [{item.source}, {item.applies_to}]")
            typer.echo("matches: " + "; ".join(f"{k} ~ /{v}/" for k, v in item.match.items()))
            typer.echo(f"why: {item.why}")
            if item.example:
                typer.echo(f"example: {item.example}")
        else:
            typer.echo(f"{item.id} ({item.name})  [{item.source}]")
            typer.echo(f"detects: {item.detects}")
            typer.echo(f"why: {item.why}")
            if item.params:
                typer.echo("parameters: " + ", ".join(f"{k}={v}" for k, v in item.params.items()))
        return
    typer.echo("Bucket rules (first match wins):")
    for r in pack.rules:
        typer.echo(f"  {r.id:<16} {r.bucket:<14} {r.name:<28} {r.applies_to:<7} {r.source}")
    typer.echo("\nChecks:")
    for c in pack.checks.values():
        typer.echo(f"  {c.id:<28} {c.name}")
    typer.echo("\n'profan rules ID' explains one.")


def main() -> None:
    """Entry point: map errors to one line on stderr and a documented exit code."""
    try:
        # With standalone_mode=False click *returns* the code of a typer.Exit instead of raising it.
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc != EXIT_OK:
            sys.exit(rc)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except ProfanError as exc:
        _err(str(exc))
        sys.exit(EXIT_BAD_INPUT)
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except Exception as exc:  # click usage errors and genuine bugs
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(EXIT_BAD_INPUT)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        _err(f"internal error: {type(exc).__name__}: {exc} (please report with the command you ran)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)
