"""Per-rank work: read ranks' sources and reduce each rank to small tables.

This is the *map* of the pipeline. Its result (`RankData`) is small — distinct kernels per step, the rank's
step_trace rows, its communication ops — so ranks can be reduced in other processes (or on other machines, behind
`profan.ranks.executor.Executor`) and only these results travel. There is one path: ranks are read in batches
(`read_ranks`; one rank is a batch of one), as the steps that cost mostly per-query overhead on a small rank — the
kernel pass, the link totals, the collectives — then run once for the batch. Nothing here formats text for a
report; analyses work on `RankData` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.rank import RankData
from profan.ranks import executor as parallel
from profan.ranks import memory_pass
from profan.ranks.collectives import AscendRank, ascend_collectives, kineto_collectives
from profan.ranks.kernel_pass import (
    KernelPass,
    KernelRequest,
    is_comm_row,
    reduce_kernel_files,
    reduce_table,
    streamed_blocks,
)
from profan.rulepack import limits
from profan.rulepack.pack import RulePack
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.ascend_text import device as ascend_device
from profan.sources.ascend_text import kernels as ascend_kernels
from profan.sources.ascend_text import matrix as ascend_matrix
from profan.sources.ascend_text import meta as ascend_meta
from profan.sources.ascend_text import opstat as ascend_opstat
from profan.sources.ascend_text import packets as ascend_packets
from profan.sources.ascend_text import steps as ascend_steps
from profan.sources.common import intervals
from profan.sources.discovery.discover import RankSource, relpath

R = TypeVar("R")

BATCH = 16  # ranks read as one batch at most: the steps that cost mostly per-query overhead run once for them


class RankProgress(str):
    """A progress message that also carries the counts a progress bar shows: ranks read of all, and their bytes
    to parse (`source_bytes`). It is the message text everywhere else."""

    done: int
    total: int
    done_bytes: int
    total_bytes: int

    def __new__(cls, text: str, done: int, total: int, done_bytes: int, total_bytes: int) -> RankProgress:
        msg = super().__new__(cls, text)
        msg.done, msg.total, msg.done_bytes, msg.total_bytes = done, total, done_bytes, total_bytes
        return msg


def load_ranks(
    sources: list[RankSource],
    root: Path,
    pack: RulePack,
    jobs: int | parallel.Executor | None = None,
    say: Callable[[str], None] | None = None,
) -> list[RankData]:
    """RankData of every rank source, in the given order: batches of ranks mapped by an executor
    (`profan.ranks.executor`) in this process, over ``jobs`` processes (`resolve_jobs`), or by the executor
    ``jobs`` is. Either way the error reported is the first failing rank's in order, as reading one rank after the
    other reports it."""
    say = say or (lambda _m: None)
    n = len(sources)
    sizes = [source_bytes(source) for source in sources]
    threads = 1
    if isinstance(jobs, int | None):
        asked = _asked_jobs(jobs)
        jobs = resolve_jobs(asked, n, sum(sizes))
        ex, width = parallel.executor(jobs), jobs
        if jobs > 1:
            say(f"reading {n} ranks in {jobs} processes")
        elif asked <= 0:  # automatic, and too small a job for processes: this process's cores, as threads
            threads = _cores()
    else:
        ex, width = jobs, jobs.width
        say(f"reading {n} ranks, {width} at a time")
    # over processes, about four batches each: enough for them to share the ranks out as they go
    size = BATCH if width == 1 else max(1, min(BATCH, n // (4 * width)))
    batches = _batches(sources, sizes, size)
    read = partial(read_batch, root=root, pack=pack, peers=n > 1, threads=threads)
    out: list[RankData] = []
    done_bytes, total_bytes = 0, sum(sizes)
    say(RankProgress(f"reading {n} rank(s), {total_bytes / 1e6:,.1f} MB", 0, n, 0, total_bytes))
    with closing(ex.map(read, batches)) as results:
        for got in results:
            for r in got:
                if isinstance(r, Failure):
                    raise ProfanInputError(r.path, r.problem)
                done_bytes += sizes[len(out)]
                out.append(r)
                say(RankProgress(f"[{len(out)}/{n}] read rank {r.rank}", len(out), n, done_bytes, total_bytes))
    placed = getattr(ex, "placed", None)  # an executor over several machines says which read what
    if placed:
        say("ranks read per node: " + ", ".join(f"{node} {count}" for node, count in sorted(placed.items())))
    return out


BATCH_BYTES = 8 << 20  # … and at most this many bytes to parse (unless one rank holds more): a batch's side files
# are decoded at once, so its working memory grows with its bytes (16 ranks of 2 MB peaked at 0.7-0.8 GB, batches
# of 4 at 0.35 GB, and ran faster; bench/README.md)


def _batches(sources: list[RankSource], sizes: list[int], most: int) -> list[list[RankSource]]:
    """The ranks in order, cut into batches of at most ``most`` ranks and `BATCH_BYTES` bytes."""
    out: list[list[RankSource]] = []
    held = 0
    for source, size in zip(sources, sizes, strict=True):
        if not out or len(out[-1]) == most or held + size > BATCH_BYTES:
            out.append([])
            held = 0
        out[-1].append(source)
        held += size
    return out


AUTO_MIN_RANKS = 4  # the automatic choice: processes for at least this many ranks …
AUTO_MIN_BYTES = 32 << 20  # … holding at least this much to parse: below, a worker's start costs what it saves


def resolve_jobs(jobs: int | None, n_ranks: int, n_bytes: int = 0) -> int:
    """``jobs``: 1 = in this process, N = N processes, 0 = automatic: one per core for `AUTO_MIN_RANKS` ranks or
    more holding `AUTO_MIN_BYTES` (``n_bytes``, `work_bytes`) or more (bench/README.md has the measurements);
    below that, one process (`load_ranks` then reads a batch's ranks over the cores as threads)
    ``None`` takes ``PROFAN_JOBS`` from the environment, else 1: spawned workers re-import the caller's main
    module, so a library call must not start processes unless asked (a script without a ``__main__`` guard
    would run its analysis again in every worker)."""
    jobs = _asked_jobs(jobs)
    if jobs <= 0:
        jobs = _cores() if n_ranks >= AUTO_MIN_RANKS and n_bytes >= AUTO_MIN_BYTES else 1
    return max(1, min(jobs, n_ranks))


def _asked_jobs(jobs: int | None) -> int:
    """``jobs``, or for None ``PROFAN_JOBS`` from the environment, else 1."""
    if jobs is not None:
        return jobs
    try:
        return int(os.environ.get("PROFAN_JOBS", "1"))
    except ValueError:
        return 1


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


GZ_FACTOR = 8  # a .gz trace parses as about this many bytes of JSON per byte on disk


def work_bytes(sources: list[RankSource]) -> int:
    """The bytes the rank sources' files hold to parse (a .gz file counted `GZ_FACTOR` times): what the automatic
    choice of processes weighs, as a rank's read costs about its bytes."""
    return sum(source_bytes(source) for source in sources)


def source_bytes(rs: RankSource) -> int:
    """One rank's share of `work_bytes`."""
    total = 0
    for file in rs.files.values():
        try:
            size = os.stat(file).st_size
        except (OSError, TypeError, ValueError):
            continue
        total += size * GZ_FACTOR if str(file).endswith(".gz") else size
    return total


@dataclass
class Failure:
    """A rank's input error as a value that crosses a process boundary (`ProfanInputError` does not pickle)."""

    path: str | None
    problem: str


def read_batch(
    sources: list[RankSource], root: Path, pack: RulePack, peers: bool, threads: int = 1
) -> list[RankData | Failure]:
    """The executor's task: `read_ranks` of a batch, input errors as `Failure`, up to the first failing rank.

    Should the batch fail as a whole — a fault a step computed for the batch did not expect, in some rank — its
    ranks are read again one at a time, in order, up to the first failing one: that rank's own error is the one
    reported, as reading one rank after the other reports it."""
    with limits.scoped(pack.limits):  # a spawned worker starts with the defaults; a thread restores its caller's
        return _read_batch(sources, root, pack, peers, threads)


def _read_batch(
    sources: list[RankSource], root: Path, pack: RulePack, peers: bool, threads: int
) -> list[RankData | Failure]:
    try:
        got = read_ranks(sources, root, pack, peers=peers, threads=threads)
    except Exception:
        if len(sources) == 1:
            raise
        got = []
        for source in sources:  # a rank that causes it again raises it here, in order
            try:
                got += read_ranks([source], root, pack, peers=peers)
            except ProfanInputError as exc:
                got.append(exc)
            if isinstance(got[-1], ProfanInputError):
                break
    out: list[RankData | Failure] = []
    for r in got:
        if isinstance(r, ProfanInputError):
            return [*out, Failure(r.path, r.problem)]
        out.append(r)
    return out


def read_ranks(
    sources: list[RankSource], root: Path, pack: RulePack, *, peers: bool = True, threads: int = 1
) -> list[RankData | ProfanInputError]:
    """Read everything profan uses from each rank (one rank is a batch of one). A rank's input error is its
    entry in the list: the other ranks are still read, and the caller decides which error to report.

    The steps that cost mostly per-query overhead on a small rank run for the batch at once: the kernel pass
    (`reduce_kernel_files`), the link totals (`ascend_matrix.rank_link_totals`) and the Ascend collectives with
    their windows (`ascend_collectives`). ``peers``: other ranks are analysed with these. Only then are the
    collectives and their pre-collective windows read — they serve cross-rank alignment alone, and on a big
    kernel file the windows cost a second pass.

    ``threads``: the ranks' own reads at once. A small rank's read is hundreds of short polars queries, which
    release the GIL while they run, so two threads keep two cores busy without a second process's start-up."""
    kernels = _kernel_passes(sources, pack, peers)

    def one(with_link: int) -> tuple[RankData, _Later] | ProfanInputError:
        try:
            return _read_rank(sources[with_link], root, pack, peers, kernels[with_link])
        except ProfanInputError as exc:
            return exc

    out: list[RankData | ProfanInputError] = []
    later: dict[int, _Later] = {}
    for with_link, got in enumerate(_each(one, range(len(sources)), threads)):
        if isinstance(got, ProfanInputError):
            out.append(got)
        else:
            out.append(got[0])
            later[with_link] = got[1]
    with_links = [with_link for with_link in later if later[with_link].links is not None]
    totals = ascend_matrix.rank_link_totals(
        [(later[with_link].links, out[with_link].metadata) for with_link in with_links]
    )
    for with_link, total in zip(with_links, totals, strict=True):
        out[with_link].comm_links = total
    due = [with_link for with_link in later if later[with_link].collectives_due]
    found = ascend_collectives(
        [_ascend_rank(out[with_link], sources[with_link], later[with_link].timed) for with_link in due], pack
    )
    for with_link, (colls, windows) in zip(due, found, strict=True):
        out[with_link].collectives, out[with_link].windows = colls, windows
    return out


def _each(fn: Callable[[int], R], items: range, threads: int) -> list[R]:
    """``fn`` of each item in order, over ``threads`` threads when there are several items. Interrupted or
    failed, the items not begun are dropped: only those in flight finish (a thread cannot be stopped)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(min(threads, len(items)))
    try:
        return [_result(f) for f in [pool.submit(fn, item) for item in items]]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _result(fut: Future[R]) -> R:
    """A future's result, waited for in slices: a Ctrl-C reaches the waiting thread between two of them, where a
    wait without a timeout takes it only once the item is done."""
    while True:
        try:
            return fut.result(timeout=0.1)
        except FutureTimeout:
            continue


def _kernel_passes(
    sources: list[RankSource], pack: RulePack, peers: bool
) -> list[KernelPass | ProfanInputError | None]:
    """The kernel pass of each rank that has a kernel file. Its timed rows are kept for an Ascend rank's
    collectives' windows (when other ranks are analysed with it) and, in memory, for its steps' blocks in time
    (`intervals.kernel_blocks`); a streamed file has its blocks cut by the pass itself when no trace_view.json is
    to give them. Without communication.json the collectives take the HCCL rows' starts from the groups, so a
    streamed file keeps each group's first start."""
    asked = [index for index, source in enumerate(sources) if "kernel_details" in source.files]
    made = reduce_kernel_files(
        [
            KernelRequest(
                sources[index].files["kernel_details"],
                starts=peers and "communication" not in sources[index].files,
                timed=peers and sources[index].kind == "ascend",  # the collectives' windows
                blocks=sources[index].kind == "ascend" and "trace_view" not in sources[index].files,
            )
            for index in asked
        ],
        pack,
    )
    passes: list[KernelPass | ProfanInputError | None] = [None] * len(sources)
    for index, kp in zip(asked, made, strict=True):
        passes[index] = kp
    return passes


def _ascend_rank(rank_data: RankData, rs: RankSource, timed: pl.DataFrame | None) -> AscendRank:
    return AscendRank(
        rank_data.comm_ops,
        rank_data.files.get("communication"),
        rs.files.get("kernel_details") or rs.files.get("ascend_db"),
        rank_data.files.get("kernel_details"),
        rank_data.rows_read.get("kernel_details"),
        rank_data.groups,
        timed,
    )


@dataclass
class _Later:
    """What `_read_rank` read for the steps that run over a batch of ranks: the kernel file's timed rows (when the
    pass kept them) for the collectives, whether those are still to be read (an Ascend rank's, when other ranks
    are analysed with it, that has a kernel file or communication.json), and communication_matrix.json's links,
    for their totals."""

    timed: pl.DataFrame | None = None
    links: pl.DataFrame | None = None
    collectives_due: bool = False


def _read_rank(
    rs: RankSource, root: Path, pack: RulePack, peers: bool, kernels: KernelPass | ProfanInputError | None
) -> tuple[RankData, _Later]:
    """One rank's files, but for the steps a batch computes together (`_Later`)."""
    rd = RankData(
        rank=int(rs.rank or 0),
        path=relpath(rs.path, root) or ".",
        kind=rs.kind,
        rank_origin=rs.rank_origin,
        files={key: relpath(value, root) for key, value in rs.files.items()},
    )
    _read_meta(rd, rs)
    if rs.role is not None:  # an RL job's trace: the program it profiled, read by the RL ledger
        rd.info.update(role=rs.role, role_rank=rs.role_rank)
    later = _Later(
        collectives_due=peers and rs.kind == "ascend" and bool({"kernel_details", "communication"} & set(rs.files))
    )
    if "ascend_db" in rs.files:
        later.timed, later.collectives_due = _read_db(rd, rs, pack, peers), peers
    if isinstance(kernels, ProfanInputError):
        raise kernels
    if kernels is not None:
        rd.groups, rd.kernel_variant, rd.has_pipe_ratios = kernels.groups, kernels.variant, kernels.has_pipe_ratios
        later.timed = kernels.timed
        rd.count(
            "kernel_details",
            kernels.counts["rows"],
            kernels.counts["skipped"],
            "rows whose duration is not a number from 0 to max_duration_us, whose block dim is text (truncated or "
            "misaligned rows), or whose Step Id is no step number",
        )
        if replaced := ascend_kernels.not_utf8_rows(kernels.groups):
            rd.warnings.append(
                f"{rd.files['kernel_details']}: read the text of {replaced} row(s) that is not UTF-8 with the "
                "replacement character U+FFFD in place of the bad bytes"
            )
    _read_tables(rd, rs)
    if "communication_matrix" in rs.files:
        later.links, n_read, skipped = ascend_matrix.read_for_totals(rs.files["communication_matrix"])
        rd.count(
            "communication_matrix",
            n_read + skipped,
            skipped,
            "entries of unexpected shape or holding NaN/Infinity or a time past max_duration_us",
        )
    _read_traces(rd, rs, pack, peers)
    memory_pass.read_rank(rd, rs, pack)
    timed_rows = later.timed is not None or "kernel_details" in rs.files  # a kernel file, or the DB's task rows
    if rd.step_blocks is None and rd.groups is not None and rs.kind == "ascend" and timed_rows:
        _kernel_blocks(rd, rs, kernels, later.timed, pack)
    return rd, later


def _kernel_blocks(
    rank_data: RankData, rs: RankSource, kernels: KernelPass | None, timed: pl.DataFrame | None, pack: RulePack
) -> None:
    """An Ascend rank's steps in time from its kernel file (no trace_view.json): the blocks the kernel pass cut
    from a file it streamed, else from the rows it kept, or (a file whose rank was to take them from
    trace_view.json) a pass of their own (cached). Rows whose start is no number have no place in time: they are
    left out of the blocks, counted and said (their durations still count in every total)."""
    if kernels is not None and kernels.blocks is not None:
        blocks, unplaced = kernels.blocks
    elif timed is not None:
        blocks, unplaced = intervals.kernel_blocks(timed, is_comm_row(timed, pack.roles)), intervals.unplaced(timed)
    else:
        blocks, unplaced = streamed_blocks(rs.files["kernel_details"], pack.roles)
    source = "ascend_db" if "ascend_db" in rs.files else "kernel_details"
    rank_data.step_blocks = blocks.with_columns(pl.lit(source).alias("source"))
    if unplaced:
        rank_data.warnings.append(
            f"{rank_data.files['kernel_details']}: {unplaced} rows have no start time (not a number): left out of the "
            "timeline's blocks in time, their durations still count"
        )


def _read_db(rank_data: RankData, rs: RankSource, pack: RulePack, peers: bool) -> pl.DataFrame | None:
    """torch_npu's DB export (`profan.sources.ascend_db.reader`): the tables the text files give, reduced as they are,
    cited as rows of the DB (``<db>#TASK``, ``<db>#STEP_TIME``, ``/TABLE/ROWID`` pointers). Returns the timed
    kernel rows: the steps' blocks in time, and the collectives' windows when other ranks are analysed with it."""
    from profan.sources.ascend_db import reader as ascend_db
    from profan.sources.ascend_db import tasks as ascend_db_tasks

    got = ascend_db.read(rs.files["ascend_db"], rs.files.get("analysis_db"), pack.roles.comm_cores[0])
    db = rank_data.files["ascend_db"]
    rank_data.files["kernel_details"], rank_data.files["step_trace_time"] = f"{db}#TASK", f"{db}#STEP_TIME"
    rank_data.files["communication"] = (
        rank_data.files["analysis_db"] if got.comm_file == rs.files.get("analysis_db") else db
    )
    # the timed rows are kept for every rank: the steps' blocks in time (and the collectives' windows) need them
    kp = reduce_table(got.kernel_rows, got.keyed, got.pipes, pack.rules_for("ascend"), got.variant, True)
    rank_data.groups, rank_data.kernel_variant, rank_data.has_pipe_ratios = kp.groups, kp.variant, kp.has_pipe_ratios
    rank_data.count(
        "kernel_details",
        kp.counts["rows"] + got.uncited_ops,
        kp.counts["skipped"] + got.uncited_ops,
        "task rows whose duration is not a number from 0 to max_duration_us, or communication ops with no "
        "device task to cite",
        empty="holds no compute task or communication op",
    )
    if not got.steps.is_empty():
        rank_data.steps = got.steps
    rank_data.count(
        "step_trace_time", got.steps.height, 0, "steps", empty="holds no STEP_TIME rows; no step times from it"
    )
    rank_data.comm_ops, rank_data.comm_bw, rank_data.comm_packets = got.comm_ops, got.comm_bw, got.comm_packets
    rank_data.count("communication", got.comm_ops.height, 0, "communication ops")
    rank_data.warnings += [f"{db}: {note}" for note in got.notes]
    try:  # trace_view's HCCL plane tasks, from the DB: what the waited-for peer is read from
        tasks = ascend_db_tasks.plane_tasks(rs.files["ascend_db"])
    except ProfanInputError as exc:
        tasks = pl.DataFrame()
        rank_data.warnings.append(f"{db}: {exc.problem}; the peers the collectives wait for are not analysed")
    if not tasks.is_empty():
        rank_data.trace_tasks, rank_data.files["hccl_tasks"] = tasks, f"{db}#{ascend_db_tasks.TABLE}"
    return kp.timed


def _read_meta(rd: RankData, rs: RankSource) -> None:
    """profiler_info and profiler_metadata: a file that cannot be read is a warning, not the rank's error."""
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


def _read_tables(rank_data: RankData, rs: RankSource) -> None:
    """op_statistic.csv, step_trace_time.csv and communication.json, with the rows each skipped."""
    if "op_statistic" in rs.files:
        rank_data.op_stats, skipped = ascend_opstat.read(rs.files["op_statistic"])
        rank_data.count(
            "op_statistic",
            rank_data.op_stats.height + skipped,
            skipped,
            "unreadable rows (text, NaN, ids past 64 bits or times past max_duration_us)",
            empty="no data rows (header only); kernel rows not cross-checked",
        )
    if "step_trace_time" in rs.files:
        rank_data.steps, why = ascend_steps.read(rs.files["step_trace_time"])
        skipped = sum(why.values())
        rank_data.count(
            "step_trace_time",
            rank_data.steps.height + skipped,
            skipped,
            ascend_steps.skipped_what(why),
            empty="no data rows (header only); no step times from it",
        )
    if "communication" in rs.files:
        items, bad = ascend_comm.entries(rs.files["communication"])
        rank_data.comm_ops, rank_data.comm_bw, skipped = ascend_comm.tables(items, bad)
        rank_data.count(
            "communication",
            rank_data.comm_ops.height + skipped,
            skipped,
            ascend_comm.SKIPPED_WHAT,
            empty="holds no communication ops",
        )
        rank_data.comm_packets, bad_sizes = ascend_packets.read(items)
        if bad_sizes:
            rank_data.warnings.append(
                f"{rank_data.files['communication']}: skipped {bad_sizes} packet-size entries that are not "
                "[count, ms] pairs of numbers"
            )


def _read_traces(rank_data: RankData, rs: RankSource, pack: RulePack, peers: bool) -> None:
    """A Kineto trace (with its collectives when other ranks are analysed with it: they serve cross-rank alignment
    alone), or an Ascend trace_view.json with its HCCL plane tasks; and the device's platform. Each trace is
    parsed once and its device events classified once, for all of these."""
    if "kineto_trace" in rs.files:
        from profan.sources.trace import kineto_rank

        path = rs.files["kineto_trace"]
        kt, hit = kineto_rank.load_cached(path, pack.roles, pack.iterations)
        captures = [
            value for key, value in rs.files.items() if key.startswith("graph_capture")
        ]  # `discover._graph_captures`
        dev = kineto_rank.device_events(rank_data, kt, path, pack, captures)
        if peers:
            rank_data.collectives, rank_data.windows = kineto_collectives(
                kt, dev, rank_data.files["kineto_trace"], pack
            )
        kineto_rank.load_rank_trace(rank_data, kt, hit, dev, pack)
    if "trace_view" in rs.files:
        from profan.sources.trace import ascend_view as trace_view
        from profan.sources.trace import hccl_tasks

        rank_data.trace_tasks = hccl_tasks.plane_tasks(
            trace_view.load_rank_trace(rank_data, rs.files["trace_view"], pack.roles)
        )
    platform = ascend_device.platform_version(rs.path)
    if platform is not None:
        rank_data.info["platform_version"] = platform
