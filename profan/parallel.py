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
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing import get_context
from pathlib import Path

from profan.discover import RankSource
from profan.errors import ProfanError, ProfanInputError
from profan.rankmap import RankData, load_rank, load_ranks_batch
from profan.rulepack import RulePack

AUTO_MIN_RANKS = 16  # below this, worker start-up costs more than it saves


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def resolve_jobs(jobs: int | None, n_ranks: int) -> int:
    """``jobs``: 1 = sequential, N = N processes, 0 = automatic (one per core from AUTO_MIN_RANKS ranks up).
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
        jobs = cores if n_ranks >= AUTO_MIN_RANKS else 1
    return max(1, min(jobs, n_ranks))


BATCH = 4  # ranks per task: small kernel files of a batch are reduced by one query (rankmap.load_ranks_batch)

Failure = tuple[str, str | None, str]  # ("input-error", path, problem): ProfanInputError's signature does not pickle


def _load(batch: list[RankSource], root: Path, pack: RulePack, peers: bool) -> list[RankData | Failure]:
    """Worker entry: a batch of ranks, input errors as plain values (and only those).

    Should the batch fail as a whole — a fault the batched steps did not expect, in some rank — its ranks are
    read again one at a time, in order, up to the first failing one: that rank's own error is the one reported,
    as a sequential read of one rank after the other reports it."""
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
    jobs = resolve_jobs(jobs, n)
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
        try:
            _run(pool, jobs - 1, sources, got, load, say)
        finally:
            # every result is in: the workers wind down (~0.1 s) while this process goes on to the reduce
            pool.shutdown(wait=False, cancel_futures=True)
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
    return [g for g in got if isinstance(g, RankData)]


LOOKAHEAD = 2  # batches handed to each worker ahead of time, so none idles while this process reads a batch


def _next_batch(lo: int, hi: int, jobs: int) -> int:
    """Size of the next batch out of ranks ``lo..hi``: `BATCH` while many are left, smaller towards the end, so
    that no process is left with queued batches while the others have nothing to do (guided scheduling)."""
    return max(1, min(BATCH, (hi - lo + 1) // (2 * jobs)))


def _run(pool: ProcessPoolExecutor, workers: int, sources: list[RankSource], got: list,
         load: Callable[[list[RankSource]], list[RankData | Failure]], say: Callable[[str], None]) -> None:
    """Fill ``got``: the workers take batches from the front of the list, this process reads from the end (it
    is ready at once, while each worker first spends ~0.3 s starting)."""
    n = len(sources)
    front, back = 0, n - 1
    running: dict[Future, range] = {}
    done = 0

    def take(idx: range, results: list) -> None:
        nonlocal done
        got[idx.start:idx.start + len(results)] = results
        done = _said(say, sources, done, idx)

    while front <= back or running:
        # the last rank left stays with this process, which is ready now: the workers are still starting
        while front < back and len(running) < workers * LOOKAHEAD:
            idx = range(front, front + _next_batch(front, back, workers + 1))
            running[pool.submit(load, [sources[i] for i in idx])] = idx
            front = idx.stop
        if front <= back:
            idx = range(back + 1 - _next_batch(front, back, workers + 1), back + 1)
            take(idx, load([sources[i] for i in idx]))
            back = idx.start - 1
            finished = [f for f in running if f.done()]
        else:
            finished = list(wait(running, return_when=FIRST_COMPLETED).done)
        for f in finished:
            take(running.pop(f), f.result())
