"""Where the rule pack and templates live, in a source checkout and in an installed wheel.

The product card puts `rules/` and `templates/` at the top of the repository; the wheel carries copies under
`profan/_pack/`. Looking in both keeps `pip install .`, editable installs and a bare checkout working alike.
Reading one of the pack's TOML files lives here too: the checks, limits, roles and hardware readers all use it,
and none of them needs the whole pack to do so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from profan.model.errors import ProfanInputError

_PKG = Path(__file__).resolve().parent.parent  # the profan package


def _find(name: str) -> Path:
    for candidate in (_PKG / "_pack" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"profan installation is incomplete: no '{name}' directory next to {_PKG}")


def rules_dir() -> Path:
    return _find("rules")


def templates_dir() -> Path:
    return _find("templates")


def load_toml(path: Path, what: str = "rules file") -> dict[str, Any]:
    """A TOML file of the rule pack (rules, checks, hardware priors); unreadable or invalid -> one-line error."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfanInputError(path, f"invalid TOML: {exc}") from None
