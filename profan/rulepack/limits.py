"""Bounds on what one input may cost (memory, time, walking), as data in ``rules/limits.toml``.

Why a process-wide setting: the bounds are checked deep inside the readers (a gzip stream, a CSV line count, a
folder walk), in this process and in the worker processes of the per-rank map. The pipeline sets them once per
analysis from the rule pack (`use`), and a worker sets the ones it was handed; readers ask `active()`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError


@dataclass(frozen=True)
class Limits:
    max_inflated_bytes: int
    max_inflate_ratio: int
    max_line_bytes: int
    max_duration_us: int
    max_ranks: int
    max_depth: int
    max_entries: int

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
    from profan.rulepack.paths import load_toml, rules_dir

    path = rules_dir() / "limits.toml"
    table = load_toml(path).get("limits", {})
    missing = {f.name for f in fields(Limits)} - set(table)
    if missing:
        raise ProfanInputError(path, f"[limits] lacks {', '.join(sorted(missing))}")
    return Limits(**{f.name: table[f.name] for f in fields(Limits)})


_active: Limits | None = None


def active() -> Limits:
    """The limits of the analysis running in this process (the rule pack's defaults before any was set)."""
    return _active or defaults()


def use(limits: Limits) -> None:
    global _active
    _active = limits
