"""Bounds on what one input may cost (memory, time, walking), as data in ``rules/limits.toml``.

Why a process-wide setting: the bounds are checked deep inside the readers (a gzip stream, a CSV line count, a
folder walk), in this process, in its reading threads and in the worker processes of the per-rank map. An analysis
holds its rule pack's bounds for as long as it runs (`scoped`), and a worker the ones it was handed; readers ask
`active()`. Scoped, not set: once the call ends the bounds in force before it are back, so one analysis's rules
file never reaches a later render or read-back in the same library process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import tomllib

from profan.model.errors import ProfanInputError
from profan.rulepack.paths import rules_dir


@dataclass(frozen=True)
class Limits:
    max_inflated_bytes: int
    max_inflate_ratio: int
    max_line_bytes: int
    max_duration_us: int
    max_ranks: int
    max_depth: int
    max_entries: int
    max_trace_bytes: int
    max_csv_bytes: int
    max_side_file_bytes: int
    max_db_bytes: int
    max_rules_bytes: int
    max_report_bytes: int
    max_string_bytes: int

    def override(self, table: dict[str, Any], source: str | Path) -> Limits:
        """These limits with a rules file's ``[limits]`` on top; an unknown name or a value that is no positive
        whole number is one line naming the file (a misspelled bound must not be silently ignored)."""
        known = {f.name for f in fields(self)}
        for name, value in table.items():
            if name not in known:
                raise ProfanInputError(source, f"[limits] has no setting {name!r}; known: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProfanInputError(source, f"[limits] {name} must be a whole number above 0, not {value!r}")
        return replace(self, **table)


@functools.lru_cache(maxsize=1)
def defaults() -> Limits:
    path = rules_dir() / "limits.toml"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("limits", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfanInputError(path, f"cannot read the shipped limits: {exc}") from None
    missing = {f.name for f in fields(Limits)} - set(table)
    if missing:
        raise ProfanInputError(path, f"[limits] lacks {', '.join(sorted(missing))}")
    return Limits(**{f.name: table[f.name] for f in fields(Limits)})


_active: Limits | None = None


def active() -> Limits:
    """The limits of the analysis running in this process (the rule pack's defaults before any was set)."""
    return _active or defaults()


def check_size(path: str | Path, size: int, name: str, what: str, bounds: Limits | None = None) -> None:
    """Refuse, in one line naming the bound and how to raise it, a file of ``size`` bytes (its ``os.stat`` size,
    known before any byte is read) past the bound ``name`` of the active limits (or ``bounds``)."""
    most = getattr(bounds or active(), name)
    if size > most:
        raise ProfanInputError(
            path,
            f"is {size:,} bytes, more than {what} may be ({name} = {most:,}); if it is real, raise the bound "
            "under [limits] in a rules file (--rules FILE)",
        )


@contextlib.contextmanager
def scoped(bounds: Limits) -> Iterator[Limits]:
    """``bounds`` in force for the ``with`` block (its threads too), and what was in force before restored after it,
    however it ends."""
    global _active
    before, _active = _active, bounds
    try:
        yield bounds
    finally:
        _active = before
