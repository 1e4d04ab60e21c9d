"""The trust boundary: which folders profan may read, and which data root a report may make it read.

A report is data too: it may arrive with someone's profile, or be written by a hostile party, and an agent may be
steered into handing one to `profan evidence`. So the folder a report's evidence is read from is never taken from
the report's text alone. It is one of:

* a folder the user names (``--root`` on the command line; the MCP server's ``--root`` folders);
* the report's own folder, or a folder inside it (a report shipped beside its data);
* the root recorded in a report that this user's profan wrote: `analyze` and `compare` seal the root and the list
  of files they read with an HMAC under a key kept in the user's config folder, and a report whose seal checks out
  may send `evidence` to those files and no others.

Whatever the root, a cited file is read only when, with every symlink resolved, it still lies inside the root and
is a regular file (`sources.common.readback.source_path`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from profan.model.errors import ProfanInputError

if TYPE_CHECKING:
    from profan.model.report import Report

KEY_FILE = "report.key"


def config_dir() -> Path:
    """``$PROFAN_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/profan``, else ``~/.config/profan``."""
    env = os.environ.get("PROFAN_CONFIG_DIR", "").strip()
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "profan"


def _key() -> bytes | None:
    """The user's sealing key, made on first use (32 random bytes, readable by the user only). None when the
    config folder cannot hold it: reports are then unsealed, and `evidence` needs --root or the report's folder."""
    path = config_dir() / KEY_FILE
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(32))
    except FileExistsError:
        pass  # another process made it first: read theirs
    except OSError:
        return None
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _message(root_abs: str, files: Iterable[str]) -> bytes:
    return "\n".join(["profan-root/1", root_abs, *sorted(files)]).encode("utf-8", "surrogatepass")


def seal(root_abs: str, files: Iterable[str]) -> str | None:
    """The seal a report carries for its root and the files it read (None without a usable key)."""
    key = _key()
    return None if key is None else hmac.new(key, _message(root_abs, files), hashlib.sha256).hexdigest()


def sealed(root_abs: object, files: object, mark: object) -> bool:
    """Whether ``mark`` is this user's seal of ``root_abs`` and ``files`` (values straight from a report: any type)."""
    if not (isinstance(root_abs, str) and isinstance(mark, str) and isinstance(files, (list, dict))):
        return False
    if not all(isinstance(file, str) for file in files):
        return False
    good = seal(root_abs, files)
    return good is not None and hmac.compare_digest(good, mark)


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path``, every symlink resolved, is ``folder`` or lies below it (``folder`` resolved too)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long
        return False


def vouched(report: Report) -> bool:
    """Whether the report's list of files read is this user's profan's own: analysed in this process, or sealed."""
    src = report.source if isinstance(report.source, dict) else {}
    return report.read_root is not None or sealed(src.get("root_abs"), src.get("file_bytes"), src.get("root_seal"))


def report_root(report: Report, report_path: Path | None = None, given: Path | None = None) -> Path:
    """The folder a report's evidence may be read from (see the module docstring), or one line saying what to pass.

    ``given``: a folder the user named. ``report_path``: where the report was loaded from (None for a report
    analysed in this process, whose root is `Report.read_root`)."""
    if given is not None:
        return given
    if report.read_root is not None:
        return report.read_root
    src = report.source if isinstance(report.source, dict) else {}
    recorded = [c for c in (src.get("root_abs"), src.get("root")) if isinstance(c, str) and c]
    if report_path is not None:
        home = report_path.resolve().parent
        for c in recorded:
            for p in (Path(c), home / c):
                if p.exists() and inside(p, home):
                    return p
    root_abs = src.get("root_abs")
    if sealed(root_abs, src.get("file_bytes"), src.get("root_seal")) and Path(root_abs).exists():
        return Path(root_abs)
    where = f" ({recorded[0]})" if recorded else ""
    if root_abs and Path(str(root_abs)).exists():
        raise ProfanInputError(
            report_path,
            f"the report's data{where} lies outside the report's folder and the "
            "report was not written by this user's profan; pass --root DIR to read it",
        )
    raise ProfanInputError(report_path, f"the analysed data{where} is not here any more; pass --root DIR")
