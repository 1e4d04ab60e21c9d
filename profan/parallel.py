"""Per-rank map in parallel processes: read many ranks at once, keep only their small ``RankData``.

Why processes: a rank's read is polars work plus Python glue (JSON side files, small-table building); the glue
holds the GIL, so threads do not scale past one core for clusters of small files. Ranks are independent and their
results are small, so a process pool over ``load_rank`` is the whole parallel design.

``spawn`` (not ``fork``): the parent may already run polars' thread pool, and forking a process with live threads
can deadlock. Each worker pays one interpreter start and import (~0.5 s), so small jobs stay sequential, and
the calling process is one of the ``jobs``: it reads ranks from the end of the list while the workers start.
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
from profan.rankmap import RankData, load_rank
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


def _load(rs: RankSource, root: Path, pack: RulePack, peers: bool) -> RankData | tuple[str, str | None, str]:
    """Worker entry: input errors travel back as plain values (ProfanInputError's signature does not pickle)."""
    try:
        return load_rank(rs, root, pack, peers=peers)
    except ProfanInputError as exc:
        return ("input-error", exc.path, exc.problem)


def load_ranks(sources: list[RankSource], root: Path, pack: RulePack, jobs: int | None = None,
               say: Callable[[str], None] | None = None) -> list[RankData]:
    """RankData for every rank source, in the given order; sequential or over ``jobs`` processes."""
    say = say or (lambda _m: None)
    n = len(sources)
    jobs = resolve_jobs(jobs, n)
    if jobs <= 1:
        out = []
        for i, rs in enumerate(sources, start=1):
            say(f"[{i}/{n}] reading rank {rs.rank}")
            out.append(load_rank(rs, root, pack, peers=n > 1))
        return out
    say(f"reading {n} ranks in {jobs} processes")
    got: list[RankData | tuple[str, str | None, str] | None] = [None] * n
    # each worker gets its share of the cores for polars' own thread pool (set before the workers start)
    saved = os.environ.get("POLARS_MAX_THREADS")
    if saved is None:
        os.environ["POLARS_MAX_THREADS"] = str(max(1, _cores() // jobs))
    try:
        pool = ProcessPoolExecutor(max_workers=jobs - 1, mp_context=get_context("spawn"))
        try:
            _run(pool, jobs - 1, sources, got, partial(_load, root=root, pack=pack, peers=n > 1),
                 say)
        finally:
            # every result is in: the workers wind down (~0.1 s) while this process goes on to the reduce
            pool.shutdown(wait=False, cancel_futures=True)
    except BrokenProcessPool:
        raise ProfanError("a worker process died while reading ranks (out of memory?); "
                          "run again with --jobs 1 to read them one at a time") from None
    finally:
        if saved is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
    # the first failing rank in order, as a sequential read reports it
    for g in got:
        if isinstance(g, tuple):
            raise ProfanInputError(g[1], g[2])
    return [g for g in got if isinstance(g, RankData)]


LOOKAHEAD = 3  # ranks handed to each worker ahead of time, so none idles while this process reads a rank


def _run(pool: ProcessPoolExecutor, workers: int, sources: list[RankSource], got: list,
         load: Callable[[RankSource], RankData | tuple[str, str | None, str]], say: Callable[[str], None]) -> None:
    """Fill ``got``: the workers take ranks from the front of the list, this process reads from the end (it is
    ready at once, while each worker first spends ~0.5 s starting). Work is handed out a few ranks at a time."""
    n = len(sources)
    front, back = 0, n - 1
    running: dict[Future, int] = {}

    def done(i: int) -> None:
        say(f"[{i + 1}/{n}] read rank {sources[i].rank}")

    while front <= back or running:
        while front <= back and len(running) < workers * LOOKAHEAD:
            running[pool.submit(load, sources[front])] = front
            front += 1
        if front <= back:
            got[back] = load(sources[back])
            done(back)
            back -= 1
            finished = [f for f in running if f.done()]
        else:
            finished = list(wait(running, return_when=FIRST_COMPLETED).done)
        for f in finished:
            i = running.pop(f)
            got[i] = f.result()
            done(i)
