"""Run a profiled job as N local processes over gloo and keep their traces: what `gloo_moe.py` and
`memory_trace.py` share (needs PyTorch, like them).

Each script brings its ``worker(rank, args, port, tmp)``, which writes ``tmp/rank{R}.pt.trace.json``, and its
ground truth; `run` spawns the ranks, copies the traces to ``args.out`` (gzip, fixed mtime, so a rerun writes the
same bytes) with ``ground_truth.toml`` beside them, and prints what it wrote.
"""

from __future__ import annotations

import gzip
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch.multiprocessing as mp


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
