"""`profan compare`: two ranks of one job or two runs, written or printed as asked, gated by --fail-on-regression."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from profan.app.console import detail, err, mode, print_brief, print_text, progress, say
from profan.app.options import Debug, Executor, Output, Quiet, RayAddress, Rules, Verbose, output_format, rank_reader
from profan.model.errors import EXIT_BAD_INPUT, EXIT_FINDINGS


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
            metavar="[BUCKET=]PCT|causes",
            help="Exit 1 when B's step time (or, with BUCKET=PCT, that bucket's time per step) is more than PCT "
            "percent above A's; with 'causes', when a cause at warning or above appeared in B (each side "
            "diagnosed as analyze does). Repeatable.",
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

    mode(verbose, quiet, debug)
    if out is not None:
        output.check_target(out)
    fmt = output_format(fmt, out, "md", "comparison")
    pair = _rank_pair(ranks)
    pack = load(rules or [])
    limits = regression_limits(fail_on_regression or [], pack)
    reader = rank_reader(executor, ray_address, jobs)
    with progress(quiet) as show:
        report = run_compare(a, b, ranks=pair, pack=pack, progress=show, jobs=reader)
    detail(report)
    _emit_compare(report, fmt, out, brief, quiet, rules or [])
    if fail_on_regression and (past := regressions(report, limits)):
        say("regression: " + "; ".join(past))
        raise typer.Exit(EXIT_FINDINGS)


def _rank_pair(ranks: str | None) -> tuple[int, ...] | None:
    if ranks is None:
        return None
    try:
        pair = tuple(int(x) for x in ranks.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2:
        err(f"--ranks takes two rank numbers like 0,7 (got {ranks!r})")
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
        print_brief(
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
        print_text(renderer(report, None))
    elif not quiet:
        say(f"wrote {out}")
