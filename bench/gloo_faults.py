"""Faults `gloo_moe.py` does not plant, on the same model and run: a slow data loader, and communication waited on
before work that could run beside it.

Why: gain calibration holds each cause's estimated gain against what removing its fault saves, on a fault/no-fault
pair of real runs that differ only by the fault. The slow loader is the one fault of that set the MoE generator
lacks; this script trains the very same model (`gloo_moe.Model`, `gloo_moe._step`, same seeds) but takes each
step's batch from a ``torch.utils.data.DataLoader``, so the trace shows the loader as PyTorch writes it
(``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``), and ``--fault loader`` makes that loader sleep
``--loader-ms`` per batch on ``--loader-ranks`` (default: every rank — one input pipeline, the same on each).

    python bench/gloo_faults.py --fault loader --loader-ms 40 --out /tmp/gloo_loader

Options of `gloo_moe.py`'s model (``--tokens``, ``--dim``, ``--hidden``, ``--layers``) pass through to it.
``--fault none`` is the clean side of the pair: the same loader, without the sleep.

``--side-work N`` adds, every step, N products of a 256×256 matrix (``record_function("side_work")``) that do not
depend on the gradients (work a step could do while they are averaged, such as preparing the next batch): the
clean run (``--fault none``) starts the gradient all_reduce asynchronously, runs the side work beside it and then
waits; ``--fault sync-comm`` does the same work but waits for the all_reduce first (the communication exposed,
blocking compute that could hide it). The two sides of that pair are the same work, with and without the overlap:

    python bench/gloo_faults.py --fault none --side-work 40 --link-mbit 32 --out /tmp/gloo_overlap
    python bench/gloo_faults.py --fault sync-comm --side-work 40 --link-mbit 32 --out /tmp/gloo_sync_comm

On one machine a gloo collective is CPU work on the cores the side work needs (loopback copies), so nothing is
there to hide. ``--link-mbit R`` gives the gradient all_reduce a link of its own, as a data-parallel group across
nodes has: a second gloo group bound to 127.0.0.2, whose traffic Linux traffic control (an htb class on the
loopback device) holds to R Mbit/s; the expert exchange keeps the default group's unlimited loopback. The script
then runs itself in a private network namespace (``unshare -n``, needs root), so only its own traffic is held.
The transfer then takes wall time on the link, not the ranks' CPU, and running the side work beside it hides it.

Each rank also times its steps with ``time.perf_counter`` (outside the profiler's accounting) and the load average
is read before and after the run; both go into ``ground_truth.toml`` (``[step_ms]``, ``load_average``).

It needs PyTorch (run it with the torch venv's Python); the traces and ``ground_truth.toml`` are written by
`gloo_run.run`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import gloo_moe
import gloo_run
import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, IterableDataset

FAULTS = ("none", "loader", "sync-comm")
SLOW_ADDRESS, SLOW_LABEL = "127.0.0.2", "lo:slow"  # the slow link's address, on the loopback device (a label)
IN_NAMESPACE = "GLOO_FAULTS_NETNS"  # set in the re-run inside the private network namespace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fault", choices=FAULTS, default="none", help="the fault planted (none)")
    p.add_argument("--loader-ms", type=float, default=40.0, help="sleep per batch of the slow loader, ms (40)")
    p.add_argument("--loader-ranks", default="all", help="ranks whose loader is slow: 'all' or e.g. '2' / '0,2'")
    p.add_argument("--side-work", type=int, default=0, help="products per step beside the gradient all_reduce (0)")
    p.add_argument(
        "--link-mbit",
        type=float,
        default=0.0,
        help="the gradient all_reduce over a link of its own held to this many Mbit/s (0: none; needs root)",
    )
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
    if args.fault == "sync-comm" and not args.side_work:
        p.error("--fault sync-comm needs --side-work: the work the all_reduce blocks")
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


def _side_work(args: argparse.Namespace, rank: int, step: int) -> torch.Tensor:
    """Work that needs nothing of the gradients: ``--side-work`` products of a 256×256 matrix (seeded per rank and
    step, so both sides of the pair compute the same)."""
    with record_function("side_work"):
        data = torch.Generator().manual_seed(args.seed * 1000 + rank * 100 + step)
        a = torch.randn(256, 256, generator=data) / 16
        for _ in range(args.side_work):
            a = torch.tanh(a @ a)
    return a


def _step_with_side_work(model, opt, x: torch.Tensor, args: argparse.Namespace, rank: int, step: int) -> None:
    """One training step whose gradient all_reduce (over ``args.grad_group``: the slow link's group, else the
    default one) either runs beside the side work (async, then wait: the clean side) or is waited on before it
    (``--fault sync-comm``)."""
    opt.zero_grad(set_to_none=False)
    model(x).pow(2).mean().backward()
    grads = [p.grad for p in model.replicated()]
    flat = torch.cat([g.flatten() for g in grads])
    if args.fault == "sync-comm":
        dist.all_reduce(flat, group=args.grad_group)
        _side_work(args, rank, step)
    else:
        handle = dist.all_reduce(flat, group=args.grad_group, async_op=True)
        _side_work(args, rank, step)
        handle.wait()
    gloo_moe._apply(flat / args.ranks, grads)
    opt.step()


def _slow_group():
    """The slow link's gloo group: every rank's gloo device bound to the slow address (gloo reads
    GLOO_SOCKET_IFNAME when a group is made), so its pairs connect there and the htb class holds their traffic."""
    os.environ["GLOO_SOCKET_IFNAME"] = SLOW_LABEL
    try:
        return dist.new_group(backend="gloo")
    finally:
        del os.environ["GLOO_SOCKET_IFNAME"]


def worker(rank: int, args: argparse.Namespace, port: int, tmp: str) -> None:
    gloo_run.join(rank, args.ranks, port)
    args.grad_group = _slow_group() if args.link_mbit else None
    model = gloo_moe.Model(args, rank)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Batches(args, rank), batch_size=None, num_workers=0)
    path = Path(tmp) / f"rank{rank}.pt.trace.json"
    timed = []
    with gloo_run.cpu_profile(path, args.steps) as prof:
        for step, x in enumerate(loader):
            start = time.perf_counter()
            if args.side_work:
                _step_with_side_work(model, opt, x, args, rank, step)
            else:
                gloo_moe._step(model, opt, x, args, rank, None)
            if step >= 2:  # a profiled step: ProfilerStep#<step>
                timed.append(round((time.perf_counter() - start) * 1000, 2))
            prof.step()
    (Path(tmp) / f"steps{rank}.json").write_text(json.dumps(timed))
    dist.barrier()
    dist.destroy_process_group()


def step_truth(tmp: Path) -> str:
    """Each rank's profiled steps as its own clock timed them (ms), and the load average after the run."""
    ranks = sorted(tmp.glob("steps*.json"), key=lambda p: int(p.stem[5:]))
    rows = "".join(f"rank{p.stem[5:]} = {p.read_text()}\n" for p in ranks)
    after = [round(x, 2) for x in os.getloadavg()]
    return f"load_average_after = {json.dumps(after)}\n\n# the steps as each rank timed them (ms)\n[step_ms]\n{rows}"


def _ground_truth(args: argparse.Namespace) -> str:
    fields = {
        "fault": args.fault,
        "loader_ms": args.loader_ms if args.fault == "loader" else None,
        "loader_ranks": args.slow_ranks or None,
        "side_work": args.side_work or None,
        "link_mbit": args.link_mbit or None,
        "comm": ("waited before the side work" if args.fault == "sync-comm" else "beside the side work")
        if args.side_work
        else None,
        "ranks": args.ranks,
        "profiled_steps": args.steps,
        "seed": args.seed,
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items() if v is not None)


def in_namespace(argv: list[str], mbit: float) -> int:
    """Run this script again in a private network namespace whose loopback holds the slow address's traffic to
    ``mbit`` (htb: everything else in a 10 Gbit/s default class, i.e. unlimited)."""
    setup = [
        "ip link set lo up",
        f"ip addr add {SLOW_ADDRESS}/8 dev lo label {SLOW_LABEL}",
        "tc qdisc add dev lo root handle 1: htb default 10 r2q 1000",
        "tc class add dev lo parent 1: classid 1:10 htb rate 10gbit",
        f"tc class add dev lo parent 1: classid 1:20 htb rate {mbit}mbit",
        f"tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip dst {SLOW_ADDRESS}/32 flowid 1:20",
        shlex.join([sys.executable, *sys.argv[:1], *argv]),
    ]
    env = {**os.environ, IN_NAMESPACE: "1"}
    return subprocess.call(["unshare", "-n", "sh", "-ec", " && ".join(setup)], env=env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.link_mbit and not os.environ.get(IN_NAMESPACE):
        return in_namespace(argv, args.link_mbit)
    seconds = gloo_run.run(worker, args, _ground_truth(args), plain=args.no_gzip, collect=step_truth)
    print(json.dumps({"fault": args.fault, "loader_ranks": args.slow_ranks, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
