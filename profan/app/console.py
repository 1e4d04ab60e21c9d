"""The terminal side of every command: one-line errors and notes on stderr (trace text made visible), the
progress bar, the -v detail after a run, and the -v / --debug switches a command records."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

from profan.model.errors import EXIT_BAD_INPUT
from profan.model.textfmt import visible

# what this run was asked for beyond its command: progress detail, tracebacks (read by `main` on an error)
RUN = {"verbose": False, "debug": False}


def mode(verbose: bool, quiet: bool, debug: bool) -> None:
    """Record -v / --debug, given before the command or after it."""
    RUN["verbose"] = RUN["verbose"] or verbose
    RUN["debug"] = RUN["debug"] or debug
    if quiet and RUN["verbose"]:
        bad("-q and -v ask for opposite things; pass one of them")


def safe(text: str) -> str:
    """Text for the terminal: names from traces and paths may hold escape sequences (retitle the window, clear the
    screen) and line breaks (forge a second line); each is shown as a visible escape, as the renderers show it."""
    return visible(text, newlines=False)


def err(msg: str) -> None:
    typer.echo(f"profan: error: {safe(msg)}", err=True)


def bad(msg: str) -> NoReturn:
    """A usage error: one line, exit 2."""
    err(msg)
    raise typer.Exit(EXIT_BAD_INPUT)


def say(msg: str) -> None:
    typer.echo(f"profan: {safe(msg)}", err=True)


@contextmanager
def progress(quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """Progress goes to stderr, and only to a terminal unless -v asks for it: a program reading stderr wants
    errors, not chatter. On a terminal the ranks read show as a bar (ranks, bytes, time left, counted in bytes as
    a rank's read costs about its bytes); piped with -v, every message is a line."""
    if quiet or not (RUN["verbose"] or sys.stderr.isatty()):
        yield None
    elif not sys.stderr.isatty():
        yield say
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
            self.console.print(f"profan: {safe(msg)}", markup=False, soft_wrap=True)  # a line, as piped
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


def detail(report) -> None:
    """-v after a run: what the result rests on (files, rows skipped, warnings) and where the time went, so a
    surprising report or exit code can be traced without opening it."""
    if not RUN["verbose"]:
        return
    src = report.source
    sizes = src.get("file_bytes") or {}
    ranks = src.get("ranks") or []
    if src.get("kind") == "compare":
        of = "rank(s) " + " and ".join(f"{src[s]['ranks']} ({s.upper()})" for s in ("a", "b") if s in src)
    else:
        of = f"{len(ranks)} rank(s)"
    say(f"read {len(sizes)} file(s), {sum(sizes.values()) / 1e6:.1f} MB, of {of} under {src['root']}")
    for rank in ranks:
        if skipped := {key: value for key, value in (rank.get("rows_skipped") or {}).items() if value}:
            say(f"rank {rank['rank']}: rows skipped: " + ", ".join(f"{key} {value}" for key, value in skipped.items()))
    for warning in report.warnings:
        say(f"warning: {warning}")
    timings = report.meta.get("timings_s") or {}
    if timings:
        say("time: " + ", ".join(f"{key} {v:.2f} s" for key, v in timings.items()))
    say(f"{len(report.causes)} cause(s), {len(report.findings)} finding(s), {len(report.warnings)} warning(s)")


def print_text(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def print_brief(report, report_file: str | None, drill: str | None = None) -> None:
    """The compact JSON (profan.brief/2) on stdout; `report_file` is the full JSON report when one was written."""
    from profan.render.brief import brief
    from profan.render.byte_cap import dumps

    sys.stdout.write(dumps(brief(report, report_file=report_file, drill=drill)) + "\n")
