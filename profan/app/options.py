"""The options several commands share (-o, --rules, -q, -v, --debug, -j, --executor, --ray-address) and what
they decide before any work: the output format from -f and -o, and what reads the ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from profan.app.console import bad
from profan.model.errors import ProfanInputError

# the format an -o file's extension names; -f may only agree with it
EXTENSIONS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html", ".xlsx": "xlsx"}

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


def output_format(fmt: str | None, out: Path | None, default: str, what: str) -> str:
    """The format to write: -f, else the -o file's extension, else ``default`` (also for a stream such as
    ``/dev/stdout``, whose name has none). A -f that contradicts a known
    extension, or an -o whose extension names no format, is refused before any work (a report.xlsx holding
    Markdown is worse than an error); html and xlsx are files, so without -o nothing is written unasked."""
    from profan.render import FORMATS

    if fmt is not None and fmt not in FORMATS:
        bad(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    implied = EXTENSIONS.get(out.suffix.lower()) if out is not None else None
    if out is not None and fmt is None and implied is None and not _is_stream(out):
        ext = f"its extension {out.suffix!r}" if out.suffix else "a name without an extension"
        bad(f"-o {out}: cannot tell the format from {ext}; name the file {', '.join(EXTENSIONS)}, or pass -f")
    if fmt is not None and implied is not None and fmt != implied:
        bad(f"-f {fmt} disagrees with -o {out} (a {out.suffix} file is {implied}); drop -f or rename the file")
    fmt = fmt or implied or default
    if fmt in ("html", "xlsx") and out is None:
        bad(f"the {fmt} {what} is a file: name it with -o, e.g. -o {what}.{fmt} (nothing is written unasked)")
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


def rank_reader(executor: str, address: str, jobs: int | None):
    """What reads the ranks: ``jobs`` for local processes, or a Ray executor. Asking for Ray without it installed
    is refused before any work."""
    if executor == "local":
        return _cli_jobs(jobs)
    if executor != "ray":
        bad(f"unknown executor {executor!r}; use local or ray")
    if jobs is not None:
        bad("-j sets local processes; with --executor ray the cluster's CPUs read the ranks (drop -j)")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        bad("--executor ray needs Ray: pip install 'profan[ray]'")
    from profan.ranks.ray_tasks import RayTasks

    return RayTasks(address)
