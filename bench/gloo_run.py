"""Run a profiled job as N local processes over gloo and keep their traces: what `gloo_moe.py` and
`memory_trace.py` share (needs PyTorch, like them).

Each script brings its ``worker(rank, args, port, tmp)``, which writes ``tmp/rank{R}.pt.trace.json``, and its
ground truth; `run` spawns the ranks, copies the traces to ``args.out`` (gzip, fixed mtime, so a rerun writes the
same bytes) with ``ground_truth.toml`` beside them, and prints what it wrote.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


def join(rank: int, world: int, port: int, pin: bool = True) -> None:
    """Join the gloo group as ``rank``: one thread (N processes share the machine's cores), pinned to core
    rank mod cores unless ``pin`` is off."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    dist.init_process_group("gloo", rank=rank, world_size=world)


def cpu_profile(path: Path, steps: int, **options) -> profile:
    """The profiler every generator runs: CPU activity with shapes, 1 wait and 1 warm-up step, then ``steps``
    profiled steps (ProfilerStep#2 on), the trace exported to ``path``; ``options`` add to torch.profiler's."""
    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        **options,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_trace(src: Path, out: Path, plain: bool = False) -> Path:
    if plain:
        return Path(shutil.copyfile(src, out / src.name))
    dst = out / (src.name + ".gz")
    with open(src, "rb") as fh, gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as gz:
        shutil.copyfileobj(fh, gz)
    return dst


def run(worker: Callable, args, ground_truth: str, plain: bool = False, collect: Callable | None = None) -> float:
    """Spawn ``args.ranks`` workers, write their traces and ``ground_truth`` (TOML; not .json, which a folder's
    reader would take for a trace) to ``args.out``; the seconds it took. ``collect(tmp)``: more ground truth the
    workers left in their folder (e.g. what they counted), appended."""
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("rank*.pt.trace.json*"):
        old.unlink()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, free_port(), tmp), nprocs=args.ranks, join=True)
        written = [write_trace(p, args.out, plain) for p in sorted(Path(tmp).glob("rank*.pt.trace.json"))]
        ground_truth += collect(Path(tmp)) if collect else ""
    truth = args.out / "ground_truth.toml"
    truth.write_text(ground_truth, encoding="utf-8")
    for p in [*written, truth]:
        print(f"{p}  {p.stat().st_size:,} bytes")
    return round(time.perf_counter() - t0, 1)
