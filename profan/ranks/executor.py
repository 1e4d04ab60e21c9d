"""Where the per-rank map runs: an `Executor` maps a function over batches of ranks and yields the small results.

Processes, because a rank's read is polars work plus Python glue that holds the GIL; ``spawn``, because forking a
process that runs polars' threads can deadlock. Another executor (a cluster's) only has to provide `Executor.map`.
What `ProcessPool` does besides handing the batches to a pool, each thing measured: bench/README.md.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from multiprocessing import get_context
from typing import NamedTuple, Protocol, TypeVar

from profan.model.errors import ProfanError

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        """``fn`` of each batch, yielded in the batches' order; stopping early abandons the batches not begun."""
        ...


class InProcess:
    """The batches one after the other, in this process."""

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        yield from map(fn, batches)


class ProcessPool:
    """The batches over ``jobs`` processes, ``fn`` and its results pickled. ``jobs - 1`` spawned workers take
    batches from the front, each with its next one at hand; this process, ready while they start, takes them from
    the back — and the last few, as it looks for a free worker only between its own batches. A worker writes each
    result to a file (`_spooled`): through the pool's pipe, it would wait for this process's result thread, which
    needs the GIL for every chunk while the main thread reads ranks too."""

    def __init__(self, jobs: int) -> None:
        self.workers = jobs - 1

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        batches = list(batches)
        with _spool() as folder:
            pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"))
            try:
                sent: list[Future] = []  # the batches from the front, in order
                here: list[R] = []  # the results of the batches from the back, last first
                while (left := len(batches) - len(sent) - len(here)) > 0:
                    if left > self.workers and sum(not f.done() for f in sent) < 2 * self.workers:
                        sent.append(pool.submit(_spooled, fn, folder, batches[len(sent)]))
                    else:
                        here.append(fn(batches[len(batches) - 1 - len(here)]))
                yield from (_unspool(f.result()) for f in sent)
                yield from reversed(here)
            except BrokenProcessPool:
                raise ProfanError(
                    "a worker process died while reading ranks (out of memory?); "
                    "run again with --jobs 1 to read them one at a time"
                ) from None
            finally:  # the workers wind down while this process goes on
                pool.shutdown(wait=False, cancel_futures=True)


def executor(jobs: int) -> Executor:
    return InProcess() if jobs <= 1 else ProcessPool(jobs)


class _File(NamedTuple):
    path: str


def _spool() -> tempfile.TemporaryDirectory | nullcontext[None]:
    """The folder workers write their results to; none (results through the pipe) when none can be made."""
    try:
        return tempfile.TemporaryDirectory(prefix="profan-map-", ignore_cleanup_errors=True)
    except OSError:
        return nullcontext(None)


def _spooled(fn: Callable[[T], R], folder: str | None, batch: T) -> R | _File:
    """In a worker: ``fn(batch)`` written to a file in ``folder``, whose name returns (the result itself when it
    cannot be written)."""
    got = fn(batch)
    if folder is not None:
        path = os.path.join(folder, uuid.uuid4().hex)
        try:
            with open(path, "xb") as fh:
                pickle.dump(got, fh, protocol=pickle.HIGHEST_PROTOCOL)
            return _File(path)
        except OSError:
            pass
    return got


def _unspool(sent: R | _File) -> R:
    if not isinstance(sent, _File):
        return sent
    with open(sent.path, "rb") as fh:
        got = pickle.load(fh)
    os.unlink(sent.path)
    return got
