"""Per-rank work: read one rank's sources and reduce them to small tables.

This is the *map* of the pipeline. Its result (`RankData`) is small — distinct kernels per step, the rank's
step_trace rows, its communication ops — so ranks can be reduced in parallel processes (or on other machines) and
only these results travel. Nothing here formats text for a report; analyses work on `RankData` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.discover import RankSource, relpath
from profan.errors import ProfanInputError
from profan.kernel_pass import KernelPass, reduce_kernel_batch, reduce_kernels
from profan.rulepack import RulePack
from profan.sources import (
    ascend_comm,
    ascend_device,
    ascend_matrix,
    ascend_meta,
    ascend_opstat,
    ascend_packets,
    ascend_steps,
)


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
    metadata: ascend_meta.Metadata | None = None
    collectives: pl.DataFrame | None = None  # communication ops in order, with group/seq (profan.collectives)
    windows: pl.DataFrame | None = None  # kernels in each op's pre-collective window (profan.collectives)
    op_stats: pl.DataFrame | None = None  # op_statistic.csv rows, for cross-checking kernel rows
    # Where `groups.lines` point: "lines" (CSV line numbers of files[kernel_file]) or "events" (chrome-trace event
    # indexes, for Kineto traces). Analyses cite kernel evidence through analyses.common.cite_kernels.
    kernel_locator: str = "lines"
    kernel_file: str = "kernel_details"
    trace_steps: pl.DataFrame | None = None  # per-step Computing/Communication/Free from trace device lanes
    trace_comm: pl.DataFrame | None = None  # Kineto communication events (NCCL kernels, c10d ops, annotations)
    trace_links: pl.DataFrame | None = None  # trace_view HCCL plane tasks per plane / transport / link type
    trace_tasks: pl.DataFrame | None = None  # trace_view HCCL plane task events (Notify_Wait per peer)
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


def load_ranks_batch(sources: list[RankSource], root: Path, pack: RulePack, *, peers: bool = True
                     ) -> list[RankData | ProfanInputError]:
    """`load_rank` of each source, with the steps that cost mostly per-query overhead on a small rank computed for
    the batch at once: the kernel pass of small kernel files (`reduce_kernel_batch`), the collectives and their
    windows (`ascend_collectives_batch`) and the link totals (`ascend_matrix.rank_link_totals`). Each rank's
    result equals `load_rank` on it alone. A rank's input error is its entry in the list: the other ranks are
    still read, and the caller decides which error to report."""
    with_kernels = [i for i, rs in enumerate(sources) if "kernel_details" in rs.files]
    passes: list[KernelPass | None] = [None] * len(sources)
    for want_timed in (True, False):  # a pass keeps the timed rows or not: one batch for each
        same = [i for i in with_kernels if _wants_timed(sources[i], peers) == want_timed]
        if len(same) > 1:
            made = reduce_kernel_batch([sources[i].files["kernel_details"] for i in same], pack, timed=want_timed)
            for i, kp in zip(same, made, strict=True):
                passes[i] = kp
    out: list[RankData | ProfanInputError] = []
    later: dict[int, _Later] = {}
    for i, (rs, kp) in enumerate(zip(sources, passes, strict=True)):
        try:
            rd, later[i] = _read_rank(rs, root, pack, peers, kp)
            out.append(rd)
        except ProfanInputError as exc:
            out.append(exc)
    with_links = [i for i in later if later[i].links is not None]
    totals = ascend_matrix.rank_link_totals([(later[i].links, out[i].metadata) for i in with_links])
    for i, t in zip(with_links, totals, strict=True):
        out[i].comm_links = t
    if not peers:
        return out
    together = [i for i in later if _collectives_batchable(out[i], sources[i], later[i].timed)]
    if len(together) > 1:
        from profan.collectives import AscendRank, ascend_collectives_batch

        found = ascend_collectives_batch([AscendRank(later[i].timed, out[i].comm_ops, out[i].files["communication"],
                                                     out[i].files["kernel_details"], out[i].groups)
                                          for i in together], pack)
        for i, (colls, windows) in zip(together, found, strict=True):
            out[i].collectives, out[i].windows = colls, windows
    for i in later:
        if later[i].collectives_due and (i not in together or len(together) == 1):
            _load_collectives(out[i], sources[i], pack, later[i].timed)
    return out


def _collectives_batchable(rd: RankData, rs: RankSource, timed: pl.DataFrame | None) -> bool:
    """The ranks `ascend_collectives_batch` takes: ops from communication.json, kernel rows in memory and few
    enough to be one slice of the windows' pass (as `ascend_collectives` reads them alone)."""
    from profan.collectives import BATCH_ROWS

    return (rs.kind == "ascend" and timed is not None and timed.height <= BATCH_ROWS
            and rd.comm_ops is not None and not rd.comm_ops.is_empty() and "communication" in rd.files
            and "kernel_details" in rd.files)


def _wants_timed(rs: RankSource, peers: bool) -> bool:
    """Whether the kernel pass keeps the file's timed rows: the collectives' windows of an Ascend rank read them."""
    return peers and rs.kind == "ascend"


def load_rank(rs: RankSource, root: Path, pack: RulePack, *, peers: bool = True,
              kernels: KernelPass | None = None) -> RankData:
    """Read everything profan uses from one rank. Input errors propagate as ProfanInputError.

    ``peers``: other ranks are analysed with this one. Only then are the collectives and their pre-collective
    windows read — they serve cross-rank alignment alone, and on a big kernel file the windows cost a second
    pass. ``kernels``: the kernel file's pass, already made (`load_ranks_batch`)."""
    rd, later = _read_rank(rs, root, pack, peers, kernels)
    if later.links is not None:
        rd.comm_links = ascend_matrix.rank_link_totals([(later.links, rd.metadata)])[0]
    if later.collectives_due:
        _load_collectives(rd, rs, pack, later.timed)
    return rd


@dataclass
class _Later:
    """What `_read_rank` read for the steps that run over a batch of ranks: the kernel file's timed rows (when the
    pass kept them) for the collectives, whether those are still to be read (an Ascend rank's, when other ranks
    are analysed with it), and communication_matrix.json's links, for their totals."""

    timed: pl.DataFrame | None = None
    links: pl.DataFrame | None = None
    collectives_due: bool = False


def _read_rank(rs: RankSource, root: Path, pack: RulePack, peers: bool, kernels: KernelPass | None
               ) -> tuple[RankData, _Later]:
    """`load_rank` without the steps a batch computes together (`_Later`)."""
    rd = RankData(rank=int(rs.rank or 0), path=relpath(rs.path, root) or ".", kind=rs.kind,
                  rank_origin=rs.rank_origin, files={k: relpath(p, root) for k, p in rs.files.items()})
    if "profiler_info" in rs.files:
        try:
            info = ascend_meta.read_info(rs.files["profiler_info"])
            rd.info = {k: v for k, v in vars(info).items() if v is not None}
        except ProfanInputError as exc:
            rd.warnings.append(f"ignored {rd.files['profiler_info']}: {exc.problem}")
    if "profiler_metadata" in rs.files:
        try:
            rd.metadata = ascend_meta.read_metadata(rs.files["profiler_metadata"])
        except ProfanInputError as exc:
            rd.warnings.append(f"ignored {rd.files['profiler_metadata']}: {exc.problem}")
    later = _Later()
    if "kernel_details" in rs.files:
        try:
            # without communication.json the collectives take the HCCL rows' starts from the groups
            starts = peers and "communication" not in rs.files
            kp = kernels or reduce_kernels(rs.files["kernel_details"], pack, starts=starts,
                                           timed=_wants_timed(rs, peers))
        except pl.exceptions.PolarsError as exc:  # malformed beyond what the tolerant reader accepts
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ProfanInputError(rs.files["kernel_details"], f"cannot be parsed as CSV ({first})") from None
        rd.groups, rd.kernel_variant, rd.has_pipe_ratios = kp.groups, kp.variant, kp.has_pipe_ratios
        later.timed = kp.timed
        rd.count("kernel_details", kp.counts["rows"], kp.counts["skipped"],
                 "rows whose duration is not a number from 0 to max_duration_us, or whose block dim is text "
                 "(truncated or misaligned rows)")
    if "op_statistic" in rs.files:
        rd.op_stats, skipped = ascend_opstat.read(rs.files["op_statistic"])
        rd.count("op_statistic", rd.op_stats.height + skipped, skipped,
                 "unreadable rows (text, NaN, ids past 64 bits or times past max_duration_us)",
                 empty="no data rows (header only); kernel rows not cross-checked")
    if "step_trace_time" in rs.files:
        rd.steps, skipped = ascend_steps.read(rs.files["step_trace_time"])
        rd.count("step_trace_time", rd.steps.height + skipped, skipped,
                 "unreadable rows (text, NaN, ids past 64 bits or times past max_duration_us)",
                 empty="no data rows (header only); no step times from it")
    if "communication" in rs.files:
        items, bad = ascend_comm.entries(rs.files["communication"])
        rd.comm_ops, rd.comm_bw, skipped = ascend_comm.tables(items, bad)
        rd.count("communication", rd.comm_ops.height + skipped, skipped,
                 "entries of unexpected shape or holding NaN/Infinity or a time past max_duration_us",
                 empty="holds no communication ops")
        rd.comm_packets, bad_sizes = ascend_packets.read(items)
        if bad_sizes:
            rd.warnings.append(f"{rd.files['communication']}: skipped {bad_sizes} packet-size entries that are not "
                               "[count, ms] pairs of numbers")
    if "communication_matrix" in rs.files:
        later.links, n_read, skipped = ascend_matrix.read_for_totals(rs.files["communication_matrix"])
        rd.count("communication_matrix", n_read + skipped, skipped,
                 "entries of unexpected shape or holding NaN/Infinity or a time past max_duration_us")
    if peers and rs.kind == "ascend":
        later.collectives_due = True  # after the batch's kernel passes (`load_ranks_batch`)
    elif peers:
        # before the trace's own read: the collectives parse and cache the trace, which that read then reports
        _load_collectives(rd, rs, pack)
    if "kineto_trace" in rs.files:
        from profan.sources import kineto

        kineto.load_rank_trace(rd, rs.files["kineto_trace"], pack)
    if "trace_view" in rs.files:
        from profan.sources import trace_view

        trace_view.load_rank_trace(rd, rs.files["trace_view"])
        from profan.sources import hccl_tasks

        rd.trace_tasks = hccl_tasks.plane_tasks(rs.files["trace_view"])
    platform = ascend_device.platform_version(rs.path)
    if platform is not None:
        rd.info["platform_version"] = platform
    return rd, later

def _load_collectives(rd: RankData, rs: RankSource, pack: RulePack, timed: pl.DataFrame | None = None) -> None:
    """The rank's communication ops and their pre-collective windows, for cross-rank alignment and stragglers.
    ``timed``: the kernel file's timed rows when the kernel pass kept them (`KernelPass.timed`)."""
    from profan.collectives import ascend_collectives

    if rs.kind == "kineto" and "kineto_trace" in rs.files:
        from profan.collectives import kineto_collectives

        rd.collectives, rd.windows = kineto_collectives(rs.files["kineto_trace"], rd.files["kineto_trace"], pack)
        return
    if rs.kind != "ascend" or not ({"kernel_details", "communication"} & set(rs.files)):
        return
    rd.collectives, rd.windows = ascend_collectives(
        rs.files.get("kernel_details"), rd.files.get("kernel_details"), rd.rows_read.get("kernel_details"),
        rd.comm_ops, rd.files.get("communication"), pack, rd.groups, timed)
