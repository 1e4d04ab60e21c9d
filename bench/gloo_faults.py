"""Faults `gloo_moe.py` does not plant, on the same model and run: a slow data loader.

Why: gain calibration holds each cause's estimated gain against what removing its fault saves, on a fault/no-fault
pair of real runs that differ only by the fault. The slow loader is the one fault of that set the MoE generator
lacks; this script trains the very same model (`gloo_moe.Model`, `gloo_moe._step`, same seeds) but takes each
step's batch from a ``torch.utils.data.DataLoader``, so the trace shows the loader as PyTorch writes it
(``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``), and ``--fault loader`` makes that loader sleep
``--loader-ms`` per batch on ``--loader-ranks`` (default: every rank — one input pipeline, the same on each).

    python bench/gloo_faults.py --fault loader --loader-ms 40 --out /tmp/gloo_loader

Options of `gloo_moe.py`'s model (``--tokens``, ``--dim``, ``--hidden``, ``--layers``) pass through to it.
``--fault none`` is the clean side of the pair: the same loader, without the sleep. It needs PyTorch (run it with
the torch venv's Python); the traces and ``ground_truth.toml`` are written by `gloo_run.run`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gloo_moe
import gloo_run
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

FAULTS = ("none", "loader")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fault", choices=FAULTS, default="none", help="the fault planted (none)")
    p.add_argument("--loader-ms", type=float, default=40.0, help="sleep per batch of the slow loader, ms (40)")
    p.add_argument("--loader-ranks", default="all", help="ranks whose loader is slow: 'all' or e.g. '2' / '0,2'")
    p.add_argument("--ranks", type=int, default=4, help="processes (ranks) to spawn, gloo backend (4)")
    p.add_argument("--steps", type=int, default=3, help="profiled training steps, after 1 wait and 1 warm-up (3)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and data (0)")
    p.add_argument("--no-gzip", action="store_true", help="write plain .json traces instead of .json.gz")
    p.add_argument("--out", type=Path, required=True, help="folder for the traces (created; old traces replaced)")
    args, model_options = p.parse_known_args(argv)
    slow = range(args.ranks) if args.loader_ranks == "all" else [int(r) for r in args.loader_ranks.split(",")]
    args.slow_ranks = sorted(set(slow)) if args.fault == "loader" else []
    # the MoE generator's settings (its defaults, or its options given here: --tokens, --dim, ...): the same model
    # and step as its clean run
    own = ["--ranks", str(args.ranks), "--seed", str(args.seed), "--out", str(args.out), "--fault-rank", "0"]
    base = gloo_moe.parse_args([*own, *model_options])
    for key, value in vars(base).items():
        if not hasattr(args, key):
            setattr(args, key, value)
    args.async_grad = False
    return args


class Batches(IterableDataset):
    """This rank's batches, the same as gloo_moe's (its generator and seed); slow on the loader's ranks."""

    def __init__(self, args: argparse.Namespace, rank: int):
        self.args, self.rank = args, rank

    def __iter__(self):
        data = torch.Generator().manual_seed(self.args.seed + self.rank)
        for _ in range(2 + self.args.steps):
            if self.rank in self.args.slow_ranks:
                time.sleep(self.args.loader_ms / 1000)
            yield torch.randn(self.args.tokens, self.args.dim, generator=data)


def worker(rank: int, args: argparse.Namespace, port: int, tmp: str) -> None:
    gloo_run.join(rank, args.ranks, port)
    model = gloo_moe.Model(args, rank)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Batches(args, rank), batch_size=None, num_workers=0)
    path = Path(tmp) / f"rank{rank}.pt.trace.json"
    with gloo_run.cpu_profile(path, args.steps) as prof:
        for x in loader:
            gloo_moe._step(model, opt, x, args, rank, None)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def _ground_truth(args: argparse.Namespace) -> str:
    fields = {
        "fault": args.fault,
        "loader_ms": args.loader_ms if args.fault == "loader" else None,
        "loader_ranks": args.slow_ranks or None,
        "ranks": args.ranks,
        "profiled_steps": args.steps,
        "seed": args.seed,
        "torch": torch.__version__,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items() if v is not None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = gloo_run.run(worker, args, _ground_truth(args), plain=args.no_gzip)
    print(json.dumps({"fault": args.fault, "loader_ranks": args.slow_ranks, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
