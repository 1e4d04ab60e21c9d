"""Writing the one output the user named (``-o``): never over a file the analysis read, never half a file, never
in place of something that is not a file.

Why here and not in each renderer: the guard needs what the analysis read (the report's ``file_bytes``, the rule
and hardware files), and the same rules hold for every format, for ``--tables`` and for `analyze` and `compare`
alike: every renderer writes through `write`.

* Before the analysis, `check_target` refuses what cannot work (a missing or non-folder parent, a folder, a name
  too long, a target inside profan's cache, a block device or a socket, a symbolic link to a file), so a long
  analysis does not end in a write error.
* `write` refuses a target that is, or is a link to, a file the analysis read — the profiler data or a rules
  file — and any file already in the analysed folder that is not a profan report (a profiler file profan did not
  need, the user's notes: data all the same). A regular file (or none) is replaced whole: the report is rendered
  into a temporary file made beside the target with a random name (``O_CREAT|O_EXCL``: a link planted there is
  never followed) and renamed into place, so a failed render leaves the old file. A stream — a FIFO, a terminal,
  a character device such as ``/dev/null``, or a link to one such as ``/dev/stdout`` — is written into, never
  renamed over: replacing a device node or a FIFO with a regular file would lose what it is.
* A symbolic link to a regular file (or to nothing) is refused rather than followed or replaced: following it
  would write wherever a link planted at the output's name points, replacing it would turn ``/dev/stdout`` (a
  link to ``/proc/self/fd/1``) into a regular file when stdout is one.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profan.model.errors import ProfanInputError
from profan.sources.common.cache import cache_dir
from profan.sources.discovery.discover import base_dir
from profan.trust import inside

if TYPE_CHECKING:
    from profan.model.report import Report


def check_target(out: Path) -> None:
    """One line for a target that cannot be written, before any work is done."""
    try:
        if out.is_dir():
            raise ProfanInputError(out, "is a folder; name the report file to write")
        parent = out.parent
        if not parent.exists():
            raise ProfanInputError(out, f"cannot write: the folder {parent} does not exist")
        if not parent.is_dir():
            raise ProfanInputError(out, f"cannot write: {parent} is not a folder")
    except OSError as exc:
        raise ProfanInputError(out, f"cannot write: {exc.strerror or exc}") from None
    cache = cache_dir()
    if cache is not None and cache.exists() and inside(out.parent, cache):
        raise ProfanInputError(out, "lies inside profan's cache; write the report elsewhere")
    target_kind(out)


ABSENT, FILE, STREAM = "absent", "file", "stream"


def target_kind(out: Path) -> str:
    """What ``out`` is to a writer: `ABSENT` or `FILE` (a regular file: replaced whole, through a temporary file)
    or `STREAM` (a FIFO, a terminal, a character device, or a link to one: written into, never renamed over).
    Anything else is one line: a block device, a socket, a link to a regular file or to nothing."""
    try:
        mode = os.lstat(out).st_mode
        if stat.S_ISLNK(mode):
            mode = _link_target_mode(out)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        raise ProfanInputError(out, f"cannot write: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return STREAM
    if stat.S_ISDIR(mode):
        raise ProfanInputError(out, "is a folder; name the report file to write")
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "no regular file"
    raise ProfanInputError(
        out, f"is {what}; a report is written only to a regular file, a FIFO, a terminal or a character device"
    )


def _link_target_mode(link: Path) -> int:
    """The mode of what a symbolic link at the output points to, when that is a stream or a folder; a link to a
    regular file or to nothing is refused: following it writes wherever a planted link points, and replacing it
    would turn ``/dev/stdout`` into a regular file when stdout is one."""
    try:
        mode = os.stat(link).st_mode
    except OSError:
        mode = None
    if mode is None or stat.S_ISREG(mode):
        to = os.readlink(link)
        what = "the file" if mode is not None else "nothing:"
        raise ProfanInputError(
            link,
            f"is a symbolic link to {what} {to}; a link is neither written through nor replaced "
            "(name the file itself, or remove the link)",
        )
    return mode


@dataclass(frozen=True)
class Inputs:
    """What an output must never replace: the files the analysis read, and the folder it analysed (``data``)."""

    files: list[Path]
    data: Path | None = None


def read_files(report: Report, extra: Iterable[Path] = ()) -> Inputs:
    """Every file the analysis behind ``report`` read — its data files and the rule/hardware files named — and
    the folder it analysed."""
    src = report.source
    base = base_dir(Path(src["root_abs"])) if src.get("root_abs") else None
    data = [base / f for f in src.get("file_bytes") or {}] if base is not None else []
    return Inputs([*data, *extra], base)


REPORT_MARK = b"profan"  # in the first `SNIFF_BYTES` of every text report profan writes (title, schema, heading)
SNIFF_BYTES = 4096
WORKBOOK_SHEETS = (b'<sheet name="Summary"', b'<sheet name="Causes"')  # the first sheets of profan's xlsx report
TABLE_MARK = {"writer": "profan"}  # key-value metadata of every `--tables` file, in the parquet footer


def is_report(path: Path) -> bool:
    """Whether an existing file is one profan wrote (a report or table a second run may replace): a text report
    names profan at its top; a workbook is a zip whose first sheets are profan's; a table's parquet footer holds
    `TABLE_MARK`. Reads a few kB at most."""
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
            if head.startswith(b"PAR1"):
                handle.seek(max(0, path.stat().st_size - SNIFF_BYTES))
                return b"\x06writer\x18\x06profan" in handle.read()
        if not head.startswith(b"PK"):
            return REPORT_MARK in head
        with zipfile.ZipFile(path) as book, book.open("xl/workbook.xml") as xml:
            sheets = xml.read(SNIFF_BYTES)
        return all(s in sheets for s in WORKBOOK_SHEETS)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def write(out: Path, inputs: Inputs, render: Callable[[Path], object], option: str = "-o") -> None:
    """Render into ``out`` — a regular file through a temporary file renamed into place, a stream by writing into
    it — unless ``out`` is one of the files read, or a file in the analysed folder that profan did not write.
    ``option``: what the user names the target with, for the error."""
    check_target(out)
    _refuse_an_input(out, inputs, option)
    try:
        if target_kind(out) == STREAM:
            _write_stream(out, render)
        else:
            _write_file(out, render)
    except OSError as exc:
        raise ProfanInputError(out, f"cannot write: {exc.strerror or exc}") from None


def _refuse_an_input(out: Path, inputs: Inputs, option: str) -> None:
    target = out.resolve()
    for file in inputs.files:
        try:
            same = file.resolve() == target or (out.exists() and os.path.samefile(file, out))
        except OSError:
            same = False
        if same:
            raise ProfanInputError(
                out, f"is a file the analysis read; refusing to overwrite it (name another {option})"
            )
    if (
        inputs.data is not None
        and out.is_file()
        and inside(out.parent, inputs.data)
        and not os.path.islink(out)
        and not is_report(out)
    ):
        raise ProfanInputError(
            out,
            f"is in the analysed folder and is not a profan report; refusing to replace it (name another {option})",
        )


TEMP_PREFIX = ".profan-"  # the temporary file beside -o: ``.profan-<random>.<name>.tmp``


def _write_file(out: Path, render: Callable[[Path], object]) -> None:
    """Render into a new file beside ``out`` (a random name made with O_CREAT|O_EXCL: a link planted beside the
    target is never opened) and rename it over ``out`` only if ``out`` is still a regular file or absent."""
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=TEMP_PREFIX, suffix=f".{out.name[:64]}.tmp")
    tmp = Path(name)
    try:
        os.close(fd)
        render(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report gets the mode any new file would
        if target_kind(out) == STREAM:  # it became a FIFO or a device while the report was rendered
            raise ProfanInputError(out, "is no longer a regular file; refusing to replace it")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_stream(out: Path, render: Callable[[Path], object]) -> None:
    """Write the report into a FIFO, terminal or character device (or a link to one), as ``> out`` would: it is
    opened first (a FIFO nobody reads is one line, not a wait), the report rendered into a private temporary
    folder, then copied in. The node itself is never replaced."""
    try:
        handle = os.open(out, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise ProfanInputError(out, "is a FIFO that no process is reading; start its reader first") from None
        raise
    with os.fdopen(handle, "wb") as sink:
        mode = os.fstat(handle).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):  # swapped for a file since it was looked at
            raise ProfanInputError(out, "is no longer a FIFO or device; refusing to write into it")
        os.set_blocking(handle, True)
        with tempfile.TemporaryDirectory(prefix="profan-") as private:
            tmp = Path(private) / out.name[:64]
            render(tmp)
            with tmp.open("rb") as src:
                shutil.copyfileobj(src, sink, 1 << 20)


def check_tables_folder(folder: Path) -> None:
    """``--tables DIR`` before any work: DIR is a folder or can be made in one that exists, outside the cache."""
    if folder.exists() and not folder.is_dir():
        raise ProfanInputError(folder, "--tables takes a folder; this is a file")
    if not folder.exists():
        check_target(folder)  # its parent must be a folder, and not the cache
    elif (cache := cache_dir()) is not None and cache.exists() and inside(folder, cache):
        raise ProfanInputError(folder, "lies inside profan's cache; write the tables elsewhere")


def write_tables(folder: Path, report: Report, inputs: Inputs) -> list[Path]:
    """Every table of ``report``, in full, as ``folder/<name>.parquet``: what the JSON report cuts at scale.
    Each file is written as `write` writes ``-o``: never over a file the analysis read, never half a file."""
    check_tables_folder(folder)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ProfanInputError(folder, f"cannot write: {exc.strerror or exc}") from None
    written = []
    for name, value in report.tables.items():
        target = folder / f"{name}.parquet"
        write(target, inputs, lambda tmp, value=value: value.write_parquet(tmp, metadata=TABLE_MARK), "--tables")
        written.append(target)
    return written
