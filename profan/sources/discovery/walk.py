"""The walk of the analysed folder: `os.walk` within the bounds of `profan.rulepack.limits` (entries, depth), never
following a link out of the folder, with what it passed over (links outside, entries that are no regular file,
folders too deep or that could not be listed) counted and said afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from profan import trust
from profan.model.errors import ProfanInputError
from profan.rulepack.limits import Limits
from profan.sources.discovery.names import DERIVED_DIRS, short_list


class Walk:
    """`os.walk` of the analysed folder within the bounds, never following a link out of it.

    Said afterwards, with counts: links to folders or files outside, entries that are no regular file, folders
    too deep to walk, and folders that could not be listed — nothing is dropped without a word."""

    def __init__(self, root: Path, bounds: Limits, rel: Callable[[Path], str]) -> None:
        self.root = root
        self.rel = rel  # a path as the report names it (`profan.sources.discovery.discover.relpath` under the root)
        self.real = root.resolve()
        self.limits = bounds
        self.entries = 0
        self.notes: list[str] = []
        self.outside: list[str] = []  # links leading out of the folder
        self.irregular: list[str] = []  # FIFOs, sockets, devices named like profiler files
        self.too_deep: list[str] = []
        self.unlisted: list[str] = []
        self.undecodable: list[str] = []  # names that are no UTF-8: no reader, report or JSON can carry them

    def __iter__(self):
        for dirpath, dirnames, filenames in os.walk(self.root, onerror=self._unlisted):
            path = Path(dirpath)
            dirnames.sort()
            self.entries += len(dirnames) + len(filenames)
            if self.entries > self.limits.max_entries:
                raise ProfanInputError(
                    self.root,
                    f"holds more than {self.limits.max_entries:,} files and folders; "
                    "is it the profiler output folder? (max_entries under [limits] "
                    "in a rules file raises the bound)",
                )
            keep = []
            filenames[:] = [dirname for dirname in filenames if self._decodable(path, dirname)]
            for dirname in dirnames:
                if not self._decodable(path, dirname):
                    continue
                if dirname in DERIVED_DIRS:
                    self.notes.append(
                        f"skipped {self.rel(path / dirname)}/: derived output of another tool, not profiler data"
                    )
                elif dirname.startswith("."):
                    continue
                elif (path / dirname).is_symlink() and not trust.inside(path / dirname, self.real):
                    self.outside.append(self.rel(path / dirname))
                else:
                    keep.append(
                        dirname
                    )  # a link to a folder inside is not followed (os.walk): it is read where it lies
            dirnames[:] = keep
            yield path, dirnames, filenames  # the caller sees every name, and clears them under a rank folder
            if len(path.relative_to(self.root).parts) >= self.limits.max_depth and dirnames:
                self.too_deep += [self.rel(path / dirname) for dirname in dirnames]
                dirnames[:] = []

    def _decodable(self, path: Path, name: str) -> bool:
        """Whether a name is UTF-8 (the walk hands non-UTF-8 bytes over as surrogates, which polars cannot open
        and no output can hold); one that is not is remembered, escaped, to be said."""
        if is_utf8(name):
            return True
        self.undecodable.append(escaped(f"{self.rel(path)}/{name}" if is_utf8(self.rel(path)) else name))
        return False

    def _unlisted(self, exc: OSError) -> None:
        self.unlisted.append(f"{self.rel(Path(exc.filename)) if exc.filename else '?'} ({exc.strerror or exc})")

    def readable(self, path: Path) -> bool:
        """A regular file inside the folder (links resolved); what is not is remembered and said."""
        try:
            if not path.is_file():
                if path.exists() and not path.is_dir():
                    self.irregular.append(self.rel(path))
                return False
        except OSError:
            return False
        if not trust.inside(path, self.real):
            self.outside.append(self.rel(path))
            return False
        return True

    def said(self) -> list[str]:
        out = []
        if self.outside:
            out.append(
                f"skipped {len(self.outside)} link(s) to files or folders outside the analysed folder "
                f"(profan reads only inside it): {short_list(self.outside)}"
            )
        if self.irregular:
            out.append(
                f"skipped {len(self.irregular)} entr(ies) that are not regular files: {short_list(self.irregular)}"
            )
        if self.too_deep:
            out.append(
                f"did not walk {len(self.too_deep)} folder(s) more than {self.limits.max_depth} levels down "
                f"(max_depth under [limits] in a rules file): {short_list(self.too_deep)}"
            )
        if self.undecodable:
            out.append(
                f"skipped {len(self.undecodable)} file(s) or folder(s) whose name is not valid UTF-8 (rename them to "
                f"analyse them): {short_list(self.undecodable)}"
            )
        if self.unlisted:
            out.append(f"could not list {len(self.unlisted)} folder(s): {short_list(self.unlisted)}")
        return out


def is_utf8(text: str) -> bool:
    """Whether a path or name decoded by the OS holds no undecodable byte (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped(text: str) -> str:
    """A name with its undecodable bytes shown as ``\\xff`` (what the OS holds, and printable in any output)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
