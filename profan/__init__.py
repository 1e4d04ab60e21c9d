"""profan — profiling analysis for Ascend NPU and NVIDIA GPU jobs, every claim backed by source rows.

>>> import profan
>>> report = profan.analyze("path/to/profiler_output")
>>> report.causes[0].title        # the verdict: what holds the step back, largest estimated gain first
>>> report.breakdown              # polars DataFrame: rank, step, bucket, time_us, share, kernels
>>> profan.evidence(report, "C1") # the source rows behind a cause or finding, read back from the files
>>> profan.figures.timeline(report).show()

The reference, with an example for each entry, is docs/api.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from profan.model.errors import ProfanError, ProfanInputError
from profan.model.version import __version__

if TYPE_CHECKING:
    from profan import figures
    from profan.comparison.compare import compare
    from profan.model.report import Report
    from profan.pipeline import analyze

__all__ = [
    "ProfanError",
    "ProfanInputError",
    "Report",
    "__version__",
    "analyze",
    "compare",
    "evidence",
    "figures",
]


def evidence(
    report: Report, item_id: str, *, root: str | Path | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The source rows behind a cause (``C1``), a finding (``F3``) or a member of a group (``F3.2``), read back
    verbatim from the analysed files: the document ``profan evidence REPORT ID --format json`` prints.

    ``root``: the data folder, where it is not the one the report was analysed from (a report loaded from JSON
    and moved). ``limit``: at most this many rows per evidence item. An unknown id, or data that is gone or has
    changed size since the analysis, raises `ProfanInputError` with one line saying what to do."""
    from profan.render.evidence_doc import evidence_doc
    from profan.trust import report_root

    data_root = report_root(report, None, Path(root) if root is not None else None)
    return evidence_doc(report, data_root, item_id, limit=limit)


# loaded on first use, not with every `import profan`: the pipeline brings polars, the figures Plotly, and a
# command that stops at its arguments (`profan --help`, a bad option) needs neither
_LAZY = {
    "analyze": ("profan.pipeline", "analyze"),
    "compare": ("profan.comparison.compare", "compare"),
    "Report": ("profan.model.report", "Report"),
    "figures": ("profan.figures", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'profan' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)
