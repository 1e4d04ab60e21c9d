"""Per-rank map in parallel processes: read many ranks at once, keep only their small ``RankData``.

Why processes: a rank's read is polars work plus Python glue (JSON side files, small-table building); the glue
holds the GIL, so threads do not scale past one core for clusters of small files. Ranks are independent and their
results are small, so a process pool over ``load_rank`` is the whole parallel design.

``spawn`` (not ``fork``): the parent may already run polars' thread pool, and forking a process with live threads
can deadlock. Each worker pays one interpreter start and import (~0.5 s), so small jobs stay sequential.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from profan.analyses.rank_section import rank_section
from profan.discover import RankSource
from profan.errors import ProfanInputError
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


def _map(rs: RankSource, root: Path, pack: RulePack, peers: bool, sections: bool) -> RankData:
    """The per-rank map: read the rank, then what the analyses compute from it alone (its `RankSection`)."""
    rd = load_rank(rs, root, pack, peers=peers)
    if sections:
        rd.section = rank_section(rd, pack)
    return rd


def _load(rs: RankSource, root: Path, pack: RulePack, peers: bool, sections: bool
          ) -> RankData | tuple[str, str | None, str]:
    """Worker entry: input errors travel back as plain values (ProfanInputError's signature does not pickle)."""
    try:
        return _map(rs, root, pack, peers, sections)
    except ProfanInputError as exc:
        return ("input-error", exc.path, exc.problem)


def load_ranks(sources: list[RankSource], root: Path, pack: RulePack, jobs: int | None = None,
               say: Callable[[str], None] | None = None, *, sections: bool = True) -> list[RankData]:
    """RankData for every rank source, in the given order; sequential or over ``jobs`` processes. ``sections``:
    also compute each rank's `RankSection` in the map (the report needs it; a comparison does not)."""
    say = say or (lambda _m: None)
    n = len(sources)
    jobs = resolve_jobs(jobs, n)
    if jobs <= 1:
        out = []
        for i, rs in enumerate(sources, start=1):
            say(f"[{i}/{n}] reading rank {rs.rank}")
            out.append(_map(rs, root, pack, n > 1, sections))
        return out
    say(f"reading {n} ranks in {jobs} processes")
    results: list[RankData] = []
    # each worker gets its share of the cores for polars' own thread pool (set before the workers start)
    saved = os.environ.get("POLARS_MAX_THREADS")
    if saved is None:
        os.environ["POLARS_MAX_THREADS"] = str(max(1, _cores() // jobs))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        try:
            futures = [pool.submit(_load, rs, root, pack, n > 1, sections) for rs in sources]
        finally:
            if saved is None:
                os.environ.pop("POLARS_MAX_THREADS", None)
        for i, (rs, fut) in enumerate(zip(sources, futures, strict=True), start=1):
            got = fut.result()
            if isinstance(got, tuple):
                for f in futures:
                    f.cancel()
                raise ProfanInputError(got[1], got[2])
            say(f"[{i}/{n}] read rank {rs.rank}")
            results.append(got)
    return results
