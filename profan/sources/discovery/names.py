"""The names discovery looks for: the folders and files the Ascend profiler, msprof and torch_npu's DB export
write (and the ones profan refuses or skips), and how a list of found names is said in a warning."""

from __future__ import annotations

import re

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


DERIVED_DIRS = {"cluster_analysis_output"}


PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9A-Za-z]+$")


INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")


OP_SUMMARY = re.compile(r"^op_summary_.*\.csv$")


ASCEND_DB = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")


ANALYSIS_DB = "analysis.db"


MSPROF_DB = re.compile(r"^msprof_.*\.db$")


# msprof's sample-based collection writes these instead of op_summary: device-wide samples, no per-kernel rows
MSPROF_SAMPLED = re.compile(r"^(task_time|ai_core_utilization|ai_vector_core_utilization)_.*\.csv$")


TRACE_SUFFIXES = (".json", ".json.gz")


# logical name -> file name inside ASCEND_PROFILER_OUTPUT
ASCEND_FILES = {
    "kernel_details": "kernel_details.csv",
    "step_trace_time": "step_trace_time.csv",
    "op_statistic": "op_statistic.csv",
    "communication": "communication.json",
    "communication_matrix": "communication_matrix.json",
    "trace_view": "trace_view.json",
    "memory_record": "memory_record.csv",
    "operator_memory": "operator_memory.csv",
    "npu_module_mem": "npu_module_mem.csv",
}


# a rank is analysed when it holds one of these (op_statistic only cross-checks kernel rows: not enough alone)
READ_KINDS = (*(k for k in ASCEND_FILES if k != "op_statistic"), "ascend_db", "kineto_trace")


def profiler_file_name(name: str) -> bool:
    """Whether a file name is one a profiler writes and profan reads: the only files a report that does not vouch
    for its list of files read (`profan.render.evidence_doc.evidence_doc`) may make `profan evidence` print."""
    return (
        name in ASCEND_FILES.values()
        or name in ("profiler_metadata.json", ANALYSIS_DB)
        or any(p.match(name) for p in (INFO_FILE, OP_SUMMARY, ASCEND_DB, MSPROF_DB))
        or name.endswith(TRACE_SUFFIXES)
    )


def short_list(names, shown: int = 5) -> str:
    names = list(names)
    return ", ".join(names[:shown]) + (f", … ({len(names) - shown} more)" if len(names) > shown else "")
