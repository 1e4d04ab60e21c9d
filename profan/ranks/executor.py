"""Where the per-rank map runs: an `Executor` maps a function over batches of ranks and yields the small results.

Processes, because a rank's read is polars work plus Python glue that holds the GIL; ``spawn``, because forking a
process that runs polars' threads can deadlock. A plain pool: the finer schemes tried before (this process reading
too, results through files) measured within the host's noise of it (bench/README.md). `profan.ranks.ray_tasks`
runs the same map as Ray tasks on a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Protocol, TypeVar

from profan.model.errors import ProfanError

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    width: int  # batches that run at once: the map cuts the ranks into about four batches per slot

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        """``fn`` of each batch, yielded in the batches' order; stopping early abandons the batches not begun."""
        ...


class InProcess:
    """The batches one after the other, in this process."""

    width = 1

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        yield from map(fn, batches)


class ProcessPool:
    """The batches over ``jobs`` spawned worker processes, ``fn`` and its results pickled."""

    def __init__(self, jobs: int) -> None:
        self.width = jobs

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        pool = ProcessPoolExecutor(max_workers=self.width, mp_context=get_context("spawn"))
        try:
            yield from pool.map(fn, batches)
        except BrokenProcessPool:
            raise ProfanError(
                "a worker process died while reading ranks (out of memory?); "
                "run again with --jobs 1 to read them one at a time"
            ) from None
        finally:  # the workers wind down while this process goes on
            pool.shutdown(wait=False, cancel_futures=True)


def executor(jobs: int) -> Executor:
    return InProcess() if jobs <= 1 else ProcessPool(jobs)
