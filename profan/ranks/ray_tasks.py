"""The per-rank map as Ray tasks, for jobs one machine cannot read in time (the optional extra ``profan[ray]``;
nothing else imports Ray). It is an `profan.ranks.executor.Executor`: the same map, the same report."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TypeVar

from profan.model.errors import ProfanError

T = TypeVar("T")
R = TypeVar("R")


class RayTasks:
    """The batches as Ray tasks: one task per batch, ``fn`` shipped to the cluster once, the results (each rank's
    small tables) fetched in order. ``address``: ``auto`` joins the cluster Ray finds (``RAY_ADDRESS``, else one
    started on this machine by ``ray start``), else starts a local instance for this run and stops it after;
    anything else is a cluster's address. The files are read on the nodes at the paths this process sees them
    (a shared filesystem), and each task runs in this process's folder so relative paths name the same files."""

    def __init__(self, address: str = "auto") -> None:
        self.address = address
        self._started = False
        self.placed: Counter[str] = Counter()  # per node that ran tasks: the items (ranks) of its batches

    @property
    def width(self) -> int:
        """The cluster's CPUs: the map cuts the ranks into about four batches each."""
        return max(1, int(_connect(self).cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[T], R], batches: Iterable[T]) -> Iterator[R]:
        ray = _connect(self)
        task = ray.remote(_in_folder)
        fn_ref, cwd = ray.put(fn), os.getcwd()
        refs = [task.remote(fn_ref, cwd, batch) for batch in batches]
        done = 0
        try:
            for ref in refs:
                node, result = ray.get(ref)
                self.placed[node] += len(result) if isinstance(result, Sized) else 1
                yield result
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


def _in_folder(fn: Callable[[T], R], cwd: str, batch: T) -> tuple[str, R]:
    """In a Ray worker: ``fn(batch)`` from the caller's folder, with the node that ran it (its address and the
    start of its id: two nodes on one host share the address)."""
    import ray

    os.chdir(cwd)
    node = f"{ray.util.get_node_ip_address()} ({ray.get_runtime_context().get_node_id()[:8]})"
    return node, fn(batch)
