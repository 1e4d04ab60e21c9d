"""profan's version, on the ground floor: the pipeline, the comparison and the front ends stamp it into what they
write, and importing it from the package root would make each of them depend on the root's public façade."""

from __future__ import annotations

__version__ = "0.1.0"  # keep equal to pyproject.toml's [project] version
