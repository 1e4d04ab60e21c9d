"""Where the per-rank map runs: an `Executor` maps a function over batches of ranks and yields the small results.

Processes, because a rank's read is polars work plus Python glue that holds the GIL; ``spawn``, because forking a
process that runs polars' threads can deadlock. `RayTasks` runs the same map as Ray tasks on a cluster (the
optional extra ``profan[ray]``; nothing else imports Ray). What `ProcessPool` does besides handing the batches to a
pool, each thing measured: bench/README.md.
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
    """The batches over ``jobs`` processes, ``fn`` and its results pickled. ``jobs - 1`` spawned workers take
    batches from the front, each with its next one at hand; this process, ready while they start, takes them from
    the back — and the last few, as it looks for a free worker only between its own batches. A worker writes each
    result to a file (`_spooled`): through the pool's pipe, it would wait for this process's result thread, which
    needs the GIL for every chunk while the main thread reads ranks too."""

    def __init__(self, jobs: int) -> None:
        self.workers = jobs - 1
        self.width = jobs

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


class RayTasks:
    """The batches as Ray tasks: one task per batch, ``fn`` shipped to the cluster once, the results (each rank's
    small tables) fetched in order. ``address``: ``auto`` joins the cluster Ray finds (``RAY_ADDRESS``, else one
    started on this machine by ``ray start``), else starts a local instance for this run and stops it after;
    anything else is a cluster's address. The files are read on the nodes at the paths this process sees them
    (a shared filesystem), and each task runs in this process's folder so relative paths name the same files."""

    def __init__(self, address: str = "auto") -> None:
        self.address = address
        self._started = False

    @property
    def width(self) -> int:
        """The cluster's CPUs: the map cuts the ranks into about four batches each."""
        return max(1, int(_connect(self).cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        ray = _connect(self)
        task = ray.remote(_in_folder)
        fn_ref, cwd = ray.put(fn), os.getcwd()
        refs = [task.remote(fn_ref, cwd, b) for b in batches]
        done = 0
        try:
            for ref in refs:
                yield ray.get(ref)
                done += 1
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError):
            raise ProfanError(
                "a Ray worker died while reading ranks (out of memory?); run again without --executor ray"
            ) from None
        finally:
            for ref in refs[done + 1 :]:  # stopping early (an input error) abandons what has not run
                ray.cancel(ref)
            if self._started:
                ray.shutdown()
                self._started = False


def _connect(ex: RayTasks):
    """Ray, joined to ``ex.address`` (once per run): a one-line error without Ray or without the cluster."""
    try:
        import ray
    except ImportError:
        raise ProfanError("--executor ray needs Ray: pip install 'profan[ray]'") from None
    if not ray.is_initialized():
        import logging

        address = None if ex.address == "auto" else ex.address
        if address is not None:
            _reachable(address)
        try:
            # stderr carries errors only (Ray's start-up notices are not)
            ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ProfanError(f"--ray-address {ex.address}: cannot join the Ray cluster ({exc})") from None
        ex._started = True
    return ray


def _reachable(address: str) -> None:
    """A cluster address that does not answer is one line now: Ray itself retries for minutes, logging each try."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise ProfanError(f"--ray-address {address}: no Ray cluster answers there ({exc})") from None


def _in_folder(fn: Callable[[T], R], cwd: str, batch: T) -> R:
    """In a Ray worker: ``fn(batch)`` from the caller's folder."""
    os.chdir(cwd)
    return fn(batch)
