"""Opening an input by name: only a regular file, and never waiting to find out what it is.

Why one helper: every file profan opens was named by someone else — the user (``--rules``, ``--hardware``), a
report (`evidence`), an agent (the MCP server) or a folder walked earlier. A FIFO there blocks ``open()`` until a
writer comes, forever; a device such as ``/dev/zero`` never ends. Opening with ``O_NONBLOCK`` returns at once
whatever the file is, and ``fstat`` on the open descriptor says what was opened — not what the name pointed to a
moment before (a file swapped for a FIFO between a check and the open).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from profan.model.errors import ProfanInputError

NOT_REGULAR = "is not a regular file (a FIFO, socket or device); refused"


class NotRegularFile(ProfanInputError, OSError):
    """An input that is no regular file: a `ProfanInputError` (one line, naming it) that is an OSError too, so a
    reader that skips what it cannot open (a sniffer) skips this as well, and one that words an OSError as
    "cannot read: …" words it with the problem (``strerror``)."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(path, problem)
        self.strerror = problem


def open_regular(path: str | Path, what: str = "") -> BinaryIO:
    """``path`` opened for reading in binary, once it is sure to be a regular file; else one line naming it.
    ``what`` (e.g. "rules file") leads the problem. An OSError of the open itself is the caller's to say."""
    lead = f"{what} " if what else ""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a device with nothing behind it
            raise NotRegularFile(path, lead + NOT_REGULAR) from None
        raise
    try:
        mode = os.fstat(handle).st_mode
        if stat.S_ISDIR(mode):
            raise NotRegularFile(path, f"{lead}is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, lead + NOT_REGULAR)
        os.set_blocking(handle, True)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def check_regular(path: str | Path, what: str = "") -> None:
    """Refuse, in one line, a named input that is not a regular file, without opening it (a FIFO is not waited
    on). For readers that hand the path to a library that opens it itself (polars, sqlite)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # the reader's own open says what is wrong
    if not stat.S_ISREG(mode):
        lead = f"{what} " if what else ""
        problem = f"{lead}is a folder, not a file" if stat.S_ISDIR(mode) else lead + NOT_REGULAR
        raise NotRegularFile(path, problem)
