"""What one rank's read leaves for the analyses (`RankData`) and the job's parallel layout it carries
(`Metadata`, `ParallelGroup` from profiler_metadata.json).

Why in the model: every analysis, the comparison and the pipeline take these values, while only `ranks.rankmap`
fills them (from the sources' readers); kept here, the analyses depend on the shape of a rank's data, not on
the machinery that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass
class ParallelGroup:
    hccl_name: str  # the HCCL group name (key of parallel_group_info); its double_hash is the op '@' suffix
    group_name: str  # the framework's name: 'pp', 'dp', 'tp', 'exp', …
    global_ranks: list[int]

    def local_to_global(self, local: int) -> int | None:
        ranks = sorted(self.global_ranks)
        return ranks[local] if 0 <= local < len(ranks) else None


@dataclass
class Metadata:
    distributed_args: dict[str, Any] = field(default_factory=dict)
    groups: list[ParallelGroup] = field(default_factory=list)

    def group(self, name: str, rank: int) -> ParallelGroup | None:
        """The group of framework name `name` ('pp', 'dp', …) that contains global `rank`."""
        for group in self.groups:
            if group.group_name == name and rank in group.global_ranks:
                return group
        return None


@dataclass
class RankData:
    rank: int
    path: str  # rank directory relative to the root
    kind: str
    rank_origin: str
    files: dict[str, str] = field(default_factory=dict)  # logical -> path relative to root
    info: dict = field(default_factory=dict)  # profiler level, versions, aic metrics
    kernel_variant: str = ""
    has_pipe_ratios: bool = False
    groups: pl.DataFrame | None = None  # one row per (step, op, name, type, core, input_shapes)
    steps: pl.DataFrame | None = None  # step_trace_time rows
    comm_ops: pl.DataFrame | None = None
    comm_bw: pl.DataFrame | None = None
    comm_packets: pl.DataFrame | None = None  # communication.json Size Distribution rows
    # communication_matrix.json per-link totals (ascend_matrix.link_totals), group-local ranks mapped to global
    comm_links: pl.DataFrame | None = None
    metadata: Metadata | None = None
    collectives: pl.DataFrame | None = None  # communication ops in order, with group/seq (profan.ranks.collectives)
    windows: pl.DataFrame | None = None  # kernels in each op's pre-collective window (profan.ranks.collectives)
    op_stats: pl.DataFrame | None = None  # op_statistic.csv rows, for cross-checking kernel rows
    # Where `groups.lines` point: "lines" (CSV line numbers of files[kernel_file]) or "events" (chrome-trace event
    # indexes, for Kineto traces). Analyses cite kernel evidence through analyses.common.cite_kernels.
    kernel_locator: str = "lines"
    kernel_file: str = "kernel_details"
    trace_steps: pl.DataFrame | None = None  # per-step Computing/Communication/Free from trace device lanes
    trace_comm: pl.DataFrame | None = None  # Kineto communication events (NCCL kernels, c10d ops, annotations)
    trace_links: pl.DataFrame | None = None  # trace_view HCCL plane tasks per plane / transport / link type
    trace_tasks: pl.DataFrame | None = None  # trace_view HCCL plane task events (Notify_Wait per peer)
    fusible: pl.DataFrame | None = None  # per step, the runs of elementwise kernels one kernel would do
    # each step's compute / exposed communication / idle blocks in time, at most intervals.STEP_BLOCKS per step
    # (profan.sources.common.intervals), from the trace's device lanes, else the kernel file's timed rows
    step_blocks: pl.DataFrame | None = None
    # an MoE layer's token events: all-to-alls with their split sizes, expert ranges, expert inputs, each with its
    # step (profan.sources.trace.kineto_moe); None where the trace shows no MoE layer
    moe_tokens: pl.DataFrame | None = None
    # per step, an MoE layer's EP dispatch / combine / all-to-all time, busy, hidden behind compute and exposed
    # (profan.sources.trace.kineto_ep); None where the trace has no such event
    ep_time: pl.DataFrame | None = None
    # a serving capture's model iterations, one row each (profan.sources.trace.kineto_iterations); None where the
    # capture is no serving capture (no iteration marker, or a training op)
    iterations: pl.DataFrame | None = None
    # the same iterations' device time per bucket (iteration, bucket, time_us), what the per-phase split sums
    iteration_buckets: pl.DataFrame | None = None
    # memory: the allocated/reserved curve (bounded), the peak row and what is live at the peak
    # (profan.ranks.memory_pass; keys curve, peak, holders, and modules for Ascend npu_module_mem.csv)
    memory: dict[str, pl.DataFrame] | None = None
    # an RL job's trace (info role): its annotations (event_idx, name, start_us, end_us), its busy spans (device
    # activity, or the host's top-level ops in a CPU-only trace: event_idx, start_us, end_us) and the starts of
    # its forwards (event_idx, ts_us), read by `analyses.rl`
    rl_spans: pl.DataFrame | None = None
    rl_busy: pl.DataFrame | None = None
    rl_forwards: pl.DataFrame | None = None
    rows_read: dict[str, int] = field(default_factory=dict)
    rows_skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def count(self, logical: str, read: int, skipped: int, what: str, empty: str | None = None) -> None:
        """Record how many rows of a file were read and skipped; skipped rows are also said as a warning, and
        so is a file with no rows at all when ``empty`` says what that means."""
        self.rows_read[logical] = read
        if skipped:
            self.rows_skipped[logical] = skipped
            self.warnings.append(f"{self.files[logical]}: skipped {skipped} of {read} {what}")
        if read == 0 and empty is not None:
            self.warnings.append(f"{self.files[logical]}: {empty}")
