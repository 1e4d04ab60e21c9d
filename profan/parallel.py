"""Per-rank map in parallel processes: read many ranks at once, keep only their small ``RankData``.

Why processes: a rank's read is polars work plus Python glue (JSON side files, small-table building); the glue
holds the GIL, so threads do not scale past one core for clusters of small files. Ranks are independent and their
results are small, so a process pool over batches of ranks (`load_ranks_batch`) is the whole parallel design.

``spawn`` (not ``fork``): the parent may already run polars' thread pool, and forking a process with live threads
can deadlock. Each worker pays one interpreter start and import (~0.2–0.3 s), so small jobs stay sequential,
and the calling process is one of the ``jobs``: it reads ranks from the end of the list while the workers start.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing import get_context
from pathlib import Path

from profan import limits
from profan.discover import RankSource
from profan.errors import ProfanError, ProfanInputError
from profan.rankmap import RankData, load_rank, load_ranks_batch
from profan.rulepack import RulePack

AUTO_MIN_RANKS = 4  # the automatic choice: processes for at least this many ranks …
AUTO_MIN_BYTES = 32 << 20  # … holding at least this much to parse: below, a worker's start costs what it saves
GZ_FACTOR = 8  # a .gz trace parses as about this many bytes of JSON per byte on disk


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def work_bytes(sources: list[RankSource]) -> int:
    """The bytes the ranks' files hold to parse (a .gz file counted as `GZ_FACTOR` times its size): what the
    automatic choice of processes weighs, as a rank's read costs about its bytes."""
    total = 0
    for rs in sources:
        for p in rs.files.values():
            try:
                size = os.stat(p).st_size
            except (OSError, TypeError, ValueError):
                continue
            total += size * GZ_FACTOR if str(p).endswith(".gz") else size
    return total


def resolve_jobs(jobs: int | None, n_ranks: int, n_bytes: int = 0) -> int:
    """``jobs``: 1 = sequential, N = N processes, 0 = automatic: one per core for `AUTO_MIN_RANKS` ranks or more
    holding `AUTO_MIN_BYTES` (``n_bytes``, `work_bytes`) or more — measured on synthetic ranks of 1 MB, two
    processes break even at about 32 ranks on two cores and are 10% faster at 64.
    ``None`` takes ``PROFAN_JOBS`` from the environment, else 1: spawned workers re-import the caller's main
    module, so a library call must not start processes unless asked (a script without a ``__main__`` guard
    would run its analysis again in every worker)."""
    cores = _cores()
    if jobs is None:
        try:
            jobs = int(os.environ.get("PROFAN_JOBS", "1"))
        except ValueError:
            jobs = 1
    if jobs <= 0:
        jobs = cores if n_ranks >= AUTO_MIN_RANKS and n_bytes >= AUTO_MIN_BYTES else 1
    return max(1, min(jobs, n_ranks))


BATCH = 16  # ranks per task: the small files of a batch are reduced by a few queries (rankmap.load_ranks_batch)
BATCH_MIN = 4  # smallest batch while more ranks are left: a batch of one costs ~3x a rank of a big batch

Failure = tuple[str, str | None, str]  # ("input-error", path, problem): ProfanInputError's signature does not pickle


def _load(batch: list[RankSource], root: Path, pack: RulePack, peers: bool) -> list[RankData | Failure]:
    """Worker entry: a batch of ranks, input errors as plain values (and only those).

    Should the batch fail as a whole — a fault the batched steps did not expect, in some rank — its ranks are
    read again one at a time, in order, up to the first failing one: that rank's own error is the one reported,
    as a sequential read of one rank after the other reports it."""
    limits.use(pack.limits)  # a spawned worker starts with the defaults
    try:
        return [r if isinstance(r, RankData) else ("input-error", r.path, r.problem)
                for r in load_ranks_batch(batch, root, pack, peers=peers)]
    except Exception:  # a rank that causes it again raises it below, in order
        out: list[RankData | Failure] = []
        for rs in batch:
            try:
                out.append(load_rank(rs, root, pack, peers=peers))
            except ProfanInputError as exc:
                out.append(("input-error", exc.path, exc.problem))
                break
        return out


def _load_spooled(batch: list[RankSource], root: Path, pack: RulePack, peers: bool, spool: str | None
                  ) -> str | list[RankData | Failure]:
    """Worker entry: `_load`, its results written to a file in ``spool`` whose path is what returns (the results
    themselves when there is no spool folder or the file cannot be written).

    A result sent back through the pool's pipe is read by the calling process's result thread, which needs the
    GIL for every 64 kB of it while the main thread reads ranks of its own: the worker sat blocked on the pipe
    for ~0.1 s per batch. A file is written at the worker's own pace and read once, when its batch is taken."""
    got = _load(batch, root, pack, peers)
    if spool is None:
        return got
    out = os.path.join(spool, f"{uuid.uuid4().hex}.pkl")
    try:
        with open(out, "wb") as fh:
            pickle.dump(got, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:  # a full or read-only temporary folder: the pipe, then
        return got
    return out


def _unspool(sent: str | list[RankData | Failure]) -> list[RankData | Failure]:
    """A worker's results from what `_load_spooled` returned."""
    if not isinstance(sent, str):
        return sent
    with open(sent, "rb") as fh:
        got = pickle.load(fh)
    os.unlink(sent)
    return got


def _spool() -> tempfile.TemporaryDirectory | None:
    """The folder the workers write their results to; None (results through the pipe) when none can be made."""
    try:
        return tempfile.TemporaryDirectory(prefix="profan-map-", ignore_cleanup_errors=True)
    except OSError:
        return None


def _batches(n: int) -> list[range]:
    return [range(i, min(i + BATCH, n)) for i in range(0, n, BATCH)]


def _said(say: Callable[[str], None], sources: list[RankSource], done: int, idx: range) -> int:
    """One progress line per rank of a batch just read, ``done`` ranks read before it; returns the new count."""
    for k, i in enumerate(idx, start=done + 1):
        say(f"[{k}/{len(sources)}] read rank {sources[i].rank}")
    return done + len(idx)


def _ranks_of(sources: list[RankSource], idx: range) -> str:
    first, last = sources[idx[0]].rank, sources[idx[-1]].rank
    return f"rank {first}" if len(idx) == 1 else f"ranks {first}–{last}"


def load_ranks(sources: list[RankSource], root: Path, pack: RulePack, jobs: int | None = None,
               say: Callable[[str], None] | None = None) -> list[RankData]:
    """RankData for every rank source, in the given order; sequential or over ``jobs`` processes. Either way
    ranks are read a batch at a time, and the first failing rank in order is the error reported."""
    say = say or (lambda _m: None)
    n = len(sources)
    jobs = resolve_jobs(jobs, n, work_bytes(sources))
    got: list[RankData | Failure | None] = [None] * n
    load = partial(_load, root=root, pack=pack, peers=n > 1)
    if jobs <= 1:
        done = 0
        for idx in _batches(n):
            say(f"reading {_ranks_of(sources, idx)}")
            part = load([sources[i] for i in idx])
            got[idx.start:idx.start + len(part)] = part
            if any(isinstance(g, tuple) for g in part):
                break
            done = _said(say, sources, done, idx)
        return _results(got)
    say(f"reading {n} ranks in {jobs} processes")
    # each worker gets its share of the cores for polars' own thread pool (set before the workers start)
    saved = os.environ.get("POLARS_MAX_THREADS")
    if saved is None:
        os.environ["POLARS_MAX_THREADS"] = str(max(1, _cores() // jobs))
    try:
        pool = ProcessPoolExecutor(max_workers=jobs - 1, mp_context=get_context("spawn"))
        spool = _spool()
        try:
            _run(pool, jobs - 1, sources, got, load,
                 partial(_load_spooled, root=root, pack=pack, peers=n > 1, spool=spool and spool.name), say)
        finally:
            # every result is in: the workers wind down (~0.1 s) while this process goes on to the reduce
            pool.shutdown(wait=False, cancel_futures=True)
            if spool is not None:
                spool.cleanup()
    except BrokenProcessPool:
        raise ProfanError("a worker process died while reading ranks (out of memory?); "
                          "run again with --jobs 1 to read them one at a time") from None
    finally:
        if saved is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
    return _results(got)


def _results(got: list[RankData | Failure | None]) -> list[RankData]:
    """The RankData, or the first failing rank's error in order, as a sequential read reports it."""
    for g in got:
        if isinstance(g, tuple):
            raise ProfanInputError(g[1], g[2])
    missing = [i for i, g in enumerate(got) if g is None]
    if missing:  # never without a failing rank before it: a rank left out would be a report that lies
        raise RuntimeError(f"{len(missing)} rank(s) were not read (first: position {missing[0]})")
    return [g for g in got if isinstance(g, RankData)]


def _next_batch(lo: int, hi: int, jobs: int) -> int:
    """Size of the next batch out of ranks ``lo..hi``: `BATCH` while many are left, smaller towards the end, so
    that no process is left with queued batches while the others have nothing to do (guided scheduling) — but
    not below `BATCH_MIN` while each of the ``jobs`` processes can still get that many: a query's fixed cost
    makes small batches dear (64 small ranks: 26 polars queries per rank in batches of 4, 10 in batches of 16),
    and a few big ranks must still be shared out."""
    left = hi - lo + 1
    return max(1, min(BATCH_MIN, left // jobs), min(BATCH, left // (2 * jobs)))


def _run(pool: ProcessPoolExecutor, workers: int, sources: list[RankSource], got: list,
         load: Callable[[list[RankSource]], list[RankData | Failure]],
         spooled: Callable[[list[RankSource]], str | list[RankData | Failure]],
         say: Callable[[str], None]) -> None:
    """Fill ``got``: the workers take batches from the front of the list, this process reads from the end (it
    is ready at once, while each worker first spends ~0.3 s starting).

    A worker is handed its next batch the moment it finishes one (from the pool's result thread), so the split
    between the processes is decided by how fast each goes, not planned ahead. Under ``lock``, a batch is taken
    off the list and either read here or put in ``running``: once the list is empty, ``running`` holds every
    batch still to come."""
    lock = threading.Lock()
    front, back = 0, len(sources) - 1
    running: dict[Future, range] = {}
    done = 0

    def take(idx: range, results: list) -> None:
        nonlocal done
        got[idx.start:idx.start + len(results)] = results
        done = _said(say, sources, done, idx)

    def feed(_finished: Future | None = None) -> None:
        nonlocal front
        with lock:
            # the last rank left stays with this process, which is ready now: the workers may still be starting
            if front >= back:
                return
            idx = range(front, front + _next_batch(front, back - 1, workers + 1))
            try:
                fut = pool.submit(spooled, [sources[i] for i in idx])
            except (BrokenProcessPool, RuntimeError):  # the pool broke or shut down: the wait below says so
                return
            front = idx.stop
            running[fut] = idx
        fut.add_done_callback(feed)

    def collect(block: bool) -> bool:
        """Take the finished batches (waiting for one when ``block``); False once none is running."""
        with lock:
            pending = list(running)
        if not pending:
            return False
        finished = wait(pending, return_when=FIRST_COMPLETED).done if block else [f for f in pending if f.done()]
        with lock:
            popped = [(f, running.pop(f)) for f in finished]
        for f, idx in popped:
            take(idx, _unspool(f.result()))
        return True

    for _ in range(workers):
        feed()
    while True:
        with lock:
            if front > back:
                break
            idx = range(back + 1 - _next_batch(front, back, workers + 1), back + 1)
            back = idx.start - 1
        take(idx, load([sources[i] for i in idx]))
        collect(block=False)
    while collect(block=True):
        pass
