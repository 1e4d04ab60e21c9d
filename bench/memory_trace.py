"""Real multi-rank Kineto traces with memory events: N processes train a small MLP over gloo with
``profile_memory=True``.

Why: profan's memory analysis must find each rank's peak, what holds memory at the peak and the imbalance of peaks
across ranks on traces a real profiler wrote. ``profile_memory=True`` makes Kineto write one ``[memory]`` instant
event per allocation and free (args ``Addr``, ``Bytes``, ``Total Allocated``, ``Total Reserved``, ``Device Type``,
``Device Id``); CPU-only training over gloo is the one setting every machine can run.

The model: ``--layers`` blocks of Linear(dim, hidden) → GELU → Linear(hidden, dim), a squared-output loss,
backward, gradients averaged by ``DistributedDataParallel`` (gloo), Adam (whose state is allocated in the first
step). Rank R trains on ``--tokens × (1 + R × --skew)`` tokens per step, so the ranks' activation peaks differ on
purpose (an uneven micro-batch). torch.profiler records CPU activity with a schedule (1 wait, 1 warm-up,
``--steps`` active steps: ``ProfilerStep#2`` …), ``record_shapes=True``, ``with_stack=False``, and writes one trace
per rank: ``OUT/rank{R}.pt.trace.json.gz``. ``OUT/ground_truth.toml`` records the settings.

    python bench/memory_trace.py --out fixtures/torch/memory_gloo_2rank

It needs PyTorch, which profan does not depend on: run it with a Python that has torch (a CPU build is enough).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gloo_run
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="processes (ranks), gloo backend (2)")
    p.add_argument("--steps", type=int, default=3, help="profiled steps, after 1 wait and 1 warm-up step (3)")
    p.add_argument("--tokens", type=int, default=4096, help="tokens of rank 0 per step (4096)")
    p.add_argument("--skew", type=float, default=1.0, help="rank R trains on tokens × (1 + R × skew) (1.0)")
    p.add_argument("--dim", type=int, default=256, help="model width (256)")
    p.add_argument("--hidden", type=int, default=1024, help="MLP width (1024)")
    p.add_argument("--layers", type=int, default=3, help="MLP blocks (3)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and data (0)")
    p.add_argument("--out", type=Path, required=True, help="folder for the traces (created; old traces replaced)")
    return p.parse_args(argv)


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


def tokens_of(args: argparse.Namespace, rank: int) -> int:
    return int(args.tokens * (1 + rank * args.skew))


def worker(rank: int, args: argparse.Namespace, port: int, tmp: str) -> None:
    gloo_run.join(rank, args.ranks, port, pin=False)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(nn.Sequential(*(Block(args.dim, args.hidden) for _ in range(args.layers))))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(args.seed + rank)
    path = Path(tmp) / f"rank{rank}.pt.trace.json"
    with gloo_run.cpu_profile(path, args.steps, profile_memory=True, with_stack=False) as prof:
        for _ in range(2 + args.steps):
            x = torch.randn(tokens_of(args, rank), args.dim, generator=data)
            opt.zero_grad(set_to_none=True)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            del x, loss
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def _ground_truth(args: argparse.Namespace) -> str:
    """The settings, as TOML beside the traces (not .json: a folder's *.json files are read as traces)."""
    fields = {
        "ranks": args.ranks,
        "profiled_steps": args.steps,
        "tokens_per_rank": [tokens_of(args, r) for r in range(args.ranks)],
        "dim": args.dim,
        "hidden": args.hidden,
        "layers": args.layers,
        "optimizer": "Adam",
        "torch": torch.__version__,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = gloo_run.run(worker, args, _ground_truth(args))
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
