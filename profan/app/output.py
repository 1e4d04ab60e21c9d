"""Writing the one output the user named (``-o``): never over a file the analysis read, never half a file.

Why here and not in each renderer: the guard needs what the analysis read (the report's ``file_bytes``, the rule
and hardware files), and the same rules hold for every format and for `analyze` and `compare` alike.

* Before the analysis, `check_target` refuses what cannot work (a missing or non-folder parent, a folder, a name
  too long, a target inside profan's cache), so a long analysis does not end in a write error.
* `write` refuses a target that is, or is a link to, a file the analysis read — the profiler data or a rules
  file — and any file already in the analysed folder that is not a profan report (a profiler file profan did not
  need, the user's notes: data all the same), then renders into a temporary file beside the target and renames
  it into place: a failed render leaves the old file, and a symlink at the target is replaced, never written
  through.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profan.model.errors import ProfanInputError
from profan.sources.cache import cache_dir
from profan.sources.discover import base_dir
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
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
            if head.startswith(b"PAR1"):
                fh.seek(max(0, path.stat().st_size - SNIFF_BYTES))
                return b"\x06writer\x18\x06profan" in fh.read()
        if not head.startswith(b"PK"):
            return REPORT_MARK in head
        with zipfile.ZipFile(path) as book, book.open("xl/workbook.xml") as xml:
            sheets = xml.read(SNIFF_BYTES)
        return all(s in sheets for s in WORKBOOK_SHEETS)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def write(out: Path, inputs: Inputs, render: Callable[[Path], object], option: str = "-o") -> None:
    """Render into ``out`` through a temporary file, unless ``out`` is one of the files read, or a file in the
    analysed folder that profan did not write. ``option``: what the user names the target with, for the error."""
    check_target(out)
    target = out.resolve()
    for p in inputs.files:
        try:
            same = p.resolve() == target or (out.exists() and os.path.samefile(p, out))
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
    tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
    try:
        render(tmp)
        os.replace(tmp, out)
    except OSError as exc:
        raise ProfanInputError(out, f"cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


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
    for name, df in report.tables.items():
        target = folder / f"{name}.parquet"
        write(target, inputs, lambda tmp, df=df: df.write_parquet(tmp, metadata=TABLE_MARK), "--tables")
        written.append(target)
    return written
