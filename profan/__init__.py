"""profan — profiling analysis for Ascend NPU and NVIDIA GPU jobs, every claim backed by source rows.

>>> import profan
>>> report = profan.analyze("path/to/profiler_output")
>>> report.breakdown            # polars DataFrame: rank, step, bucket, time_us, share, kernels
>>> report.findings[0].evidence # the exact source rows behind the first finding
"""

from profan.model.errors import ProfanError, ProfanInputError
from profan.model.report import Report
from profan.pipeline import analyze

__version__ = "0.1.0"
__all__ = ["ProfanError", "ProfanInputError", "Report", "__version__", "analyze"]
