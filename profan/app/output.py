"""Writing the one output the user named (``-o``): never over a file the analysis read, never half a file.

Why here and not in each renderer: the guard needs what the analysis read (the report's ``file_bytes``, the rule
and hardware files), and the same rules hold for every format and for `analyze` and `compare` alike.

* Before the analysis, `check_target` refuses what cannot work (a missing or non-folder parent, a folder, a name
  too long, a target inside profan's cache), so a long analysis does not end in a write error.
* `write` refuses a target that is, or is a link to, a file the analysis read — the profiler data or a rules
  file — then renders into a temporary file beside the target and renames it into place: a failed render leaves
  the old file, and a symlink at the target is replaced, never written through.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
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


def read_files(report: Report, extra: Iterable[Path] = ()) -> list[Path]:
    """Every file the analysis behind ``report`` read: its data files and the rule/hardware files named."""
    src = report.source
    base = base_dir(Path(src["root_abs"])) if src.get("root_abs") else None
    data = [base / f for f in src.get("file_bytes") or {}] if base is not None else []
    return [*data, *extra]


def write(out: Path, inputs: Iterable[Path], render: Callable[[Path], object]) -> None:
    """Render into ``out`` through a temporary file, unless ``out`` is one of ``inputs``."""
    check_target(out)
    target = out.resolve()
    for p in inputs:
        try:
            same = p.resolve() == target or (out.exists() and os.path.samefile(p, out))
        except OSError:
            same = False
        if same:
            raise ProfanInputError(out, "is a file the analysis read; refusing to overwrite it (name another -o)")
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


def write_tables(folder: Path, report: Report, inputs: Iterable[Path]) -> list[Path]:
    """Every table of ``report``, in full, as ``folder/<name>.parquet``: what the JSON report cuts at scale.
    Each file is written as `write` writes ``-o``: never over a file the analysis read, never half a file."""
    check_tables_folder(folder)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ProfanInputError(folder, f"cannot write: {exc.strerror or exc}") from None
    inputs = list(inputs)
    written = []
    for name, df in report.tables.items():
        target = folder / f"{name}.parquet"
        write(target, inputs, lambda tmp, df=df: df.write_parquet(tmp))
        written.append(target)
    return written
