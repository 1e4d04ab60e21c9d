"""Where the rule pack and templates live, in a source checkout and in an installed wheel.

The product card puts `rules/` and `templates/` at the top of the repository; the wheel carries copies under
`profan/_pack/`. Looking in both keeps `pip install .`, editable installs and a bare checkout working alike.
"""

from __future__ import annotations

from pathlib import Path

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
