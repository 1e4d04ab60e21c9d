"""Command line: a thin skin over the library. Parse arguments, call profan, print; one-line errors. The commands
are in `profan.app.commands` (one module each), what they share in `console` (stderr, progress) and `options`.
"""

from __future__ import annotations

import codecs
import os
import sys
import traceback
from typing import Annotated

import typer

from profan.app.commands import analyze, compare, evidence, mcp, rules, skill
from profan.app.console import RUN, err, mode
from profan.app.options import Debug, Verbose
from profan.model.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, ProfanError

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is shown as written: "[default: md]" and "profan[mcp]" are not markup
    help="Profiling analysis for Ascend NPU and NVIDIA GPU jobs; every claim cites its source rows.",
)


JEMALLOC_ENV = "_RJEM_MALLOC_CONF"  # the allocator settings of the jemalloc built into polars


JEMALLOC_SETTINGS = "background_thread:true,dirty_decay_ms:250,muzzy_decay_ms:0"  # freed pages returned within 250 ms


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
    mode(verbose, False, debug)


app.command()(analyze.analyze)
app.command()(evidence.evidence)
app.command()(rules.rules)
app.command()(rules.schema)
app.add_typer(skill.skill_app, name="skill")
app.command()(mcp.mcp)
app.command()(compare.compare)


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
    RUN.update(verbose=False, debug=False)  # one process may run several commands (tests, embedding)
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
        err(str(exc))
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
                err(f"missing command{where}")
            else:
                err(f"{exc.format_message()}{where}")
            sys.exit(EXIT_BAD_INPUT)
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        if RUN["debug"]:
            traceback.print_exc()
            sys.exit(EXIT_INTERNAL)
        err(f"internal error: {type(exc).__name__}: {exc} (please report with the command you ran)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_OK)
