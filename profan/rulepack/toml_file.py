"""Reading a TOML file of the rule pack or of the user (rules, checks, hardware priors, roles): one way, bounded.

A user's file is opened only as a regular file and held to ``max_rules_bytes`` from its size before it is
parsed; the shipped pack holds that bound, so it is not checked against itself. The limits reader parses its own
file directly, since the bound it would be checked against comes from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tomllib

from profan.model.errors import ProfanInputError
from profan.model.files import open_regular
from profan.rulepack.limits import check_size, defaults
from profan.rulepack.paths import rules_dir


def load_toml(path: Path, what: str = "rules file") -> dict[str, Any]:
    """A TOML file of the rule pack (rules, checks, hardware priors); unreadable or invalid -> one-line error."""
    try:
        with open_regular(path) as handle:
            if not Path(path).resolve().is_relative_to(rules_dir().resolve()):  # the shipped pack holds the bounds
                size = os.fstat(handle.fileno()).st_size
                check_size(path, size, "max_rules_bytes", f"a {what}", bounds=defaults())
            return tomllib.load(handle)
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfanInputError(path, f"invalid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables by recursion
        raise ProfanInputError(
            path, f"invalid {what}: arrays or tables nested deeper than the TOML reader takes (real files nest a few)"
        ) from None
