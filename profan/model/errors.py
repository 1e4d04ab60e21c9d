"""Errors that reach the user as one line, and the exit codes the CLI maps them to.

Every problem with *input* is a `ProfanInputError` that names the file and what is wrong, so the CLI can print
one line and exit 2 instead of a traceback. Anything else escaping the library is a bug (exit 3).
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0  # ran, nothing at warning or critical severity
EXIT_FINDINGS = 1  # ran, at least one warning/critical finding
EXIT_BAD_INPUT = 2  # the input could not be analysed (message names file and problem)
EXIT_INTERNAL = 3  # a bug in profan


class ProfanError(Exception):
    """Base class of errors profan raises on purpose."""


class ProfanInputError(ProfanError):
    """Input that cannot be analysed: missing, empty, truncated, unknown layout or missing columns."""

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


TOO_DEEP = "nests JSON values more deeply than the reader takes (about 1,000 levels)"  # RecursionError, said
