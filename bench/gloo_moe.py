"""Real multi-rank CPU traces with a fault planted on purpose: N processes train a small MoE model over gloo.

Why: the cross-rank analyses (straggler, compute imbalance, expert imbalance) must name the rank at fault on
traces a real profiler wrote, not only on synthetic tables. CPU-only multi-process training is the one setting
every machine can run, and there collectives are CPU ops (``c10d::*``, ``record_param_comms``, ``gloo:*``) and
waiting for a peer is time inside them, which is exactly what a CPU-only trace makes hard to read.

The model: a dense layer, then ``--layers`` MoE layers (a linear router picking the top-1 of ``2 × ranks``
experts, two experts per rank: expert parallelism, tokens sent to their expert's rank and back with
``all_to_all_single``), a squared-output loss, backward, and an ``all_reduce`` of the replicated (dense and
router) gradients. torch.profiler records CPU activity with a schedule (1 wait, 1 warm-up, ``--steps`` active
steps), so every profiled step is a ``ProfilerStep#N``, and writes one Kineto trace per rank:
``OUT/rank{R}.pt.trace.json.gz``.

Faults (``--fault``, on ``--fault-rank``):

* ``sleep``: the rank sleeps ``--fault-ms`` each step before the gradient all_reduce (a host-side stall: a slow
  data loader, a checkpoint write);
* ``compute``: the rank multiplies extra matrices each step before the gradient all_reduce (a slower device, a
  bigger shard);
* ``hot-expert``: every rank's router is biased towards one expert of the fault rank (``--hot-local``: its first by
  default), which so receives most tokens and computes for them while the other ranks wait in the combining
  all_to_all;
* ``capacity``: every expert takes at most ``--capacity-factor`` × (its fair share) tokens from each source rank
  (GShard / Switch capacity); the tokens over it skip the expert (their MoE output is 0), with the hot-expert bias
  on, so the drop is real.

``OUT/ground_truth.toml`` also holds the token truth: per profiled step (``ProfilerStep#N``), the tokens each expert
received per layer and the tokens each rank received (summed over layers), counted by the generator itself.

Each expert's work runs under ``record_function("expert_<id>")``, so expert routing is visible in the trace.
``--async-grad`` lets each step's gradient all_reduce run during the next step, so consecutive steps overlap.
Rank R is pinned to core R mod (cores) unless ``--no-pin``. ``OUT/ground_truth.toml`` records what was planted.

    python bench/gloo_moe.py --fault sleep --fault-rank 2 --out /tmp/gloo_sleep

It needs PyTorch, which profan does not depend on: run it with a Python that has torch (a CPU build is enough;
fixtures/torch/gloo_moe_cpu_4rank was written with torch 2.13.0+cpu).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import gloo_run
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

FAULTS = ("none", "sleep", "compute", "hot-expert", "capacity")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ranks", type=int, default=4, help="processes (ranks) to spawn, gloo backend (default 4)")
    p.add_argument("--steps", type=int, default=3, help="profiled training steps, after 1 wait and 1 warm-up step (3)")
    p.add_argument("--fault", choices=FAULTS, default="none", help="the fault planted on --fault-rank (none)")
    p.add_argument("--fault-rank", type=int, default=2, help="the rank that carries the fault (2)")
    p.add_argument("--fault-ms", type=float, default=70.0, help="sleep per step of the sleep fault, ms (70)")
    p.add_argument(
        "--fault-matmuls", type=int, default=12, help="extra 512x512 matmuls per step of the compute fault (12)"
    )
    p.add_argument("--hot-bias", type=float, default=4.0, help="router logit bias of the hot expert (4.0)")
    p.add_argument("--hot-local", type=int, default=0, help="which of the fault rank's experts is hot, 0 or 1 (0)")
    p.add_argument(
        "--capacity-factor", type=float, default=1.25, help="expert capacity of the capacity fault, × fair share (1.25)"
    )
    p.add_argument("--tokens", type=int, default=512, help="tokens per rank per step (512)")
    p.add_argument("--dim", type=int, default=128, help="model width (128)")
    p.add_argument("--hidden", type=int, default=512, help="expert MLP width (512)")
    p.add_argument("--layers", type=int, default=2, help="MoE layers (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and data (0)")
    p.add_argument(
        "--async-grad",
        action="store_true",
        help="all_reduce each step's gradients while the next step runs (one-step-stale gradients):\n"
        "that collective spans two steps, so consecutive steps overlap on the CPU's lanes",
    )
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin rank R to core R mod (cores); pinning keeps the scheduler from moving ranks between\n"
        "cores, which on an oversubscribed machine makes per-step compute vary by tens of percent",
    )
    p.add_argument(
        "--ep-ranges",
        action="store_true",
        help="name each layer's token exchange as real MoE programs do: record_function('dispatch') around the\n"
        "count exchange and the all_to_all out, record_function('combine') around the all_to_all back",
    )
    p.add_argument(
        "--overlap-shared",
        action="store_true",
        help="a frozen shared expert computes while the dispatch all_to_all is in flight (async_op=True), as\n"
        "shared-expert overlap does: that part of the dispatch is hidden behind compute",
    )
    p.add_argument("--no-gzip", action="store_true", help="write plain .json traces instead of .json.gz")
    p.add_argument("--out", type=Path, required=True, help="folder for the traces (created; old traces replaced)")
    args = p.parse_args(argv)
    if not 0 <= args.fault_rank < args.ranks:
        p.error(f"--fault-rank must be in 0..{args.ranks - 1}")
    if args.hot_local not in (0, 1):
        p.error("--hot-local must be 0 or 1 (two experts per rank)")
    return args


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with its gradient: the backward sends the gradients back the way the tokens came."""

    @staticmethod
    def forward(ctx, x, send: list[int], recv: list[int], during=None):
        """``during``: work to run while the exchange is in flight (its forward only: autograd is off here)."""
        ctx.splits = (send, recv)
        out = x.new_empty((sum(recv), x.shape[1]))
        if during is None:
            dist.all_to_all_single(out, x.contiguous(), recv, send)
            return out
        handle = dist.all_to_all_single(out, x.contiguous(), recv, send, async_op=True)
        during()
        handle.wait()
        return out

    @staticmethod
    def backward(ctx, grad):
        send, recv = ctx.splits
        back = grad.new_empty((sum(send), grad.shape[1]))
        dist.all_to_all_single(back, grad.contiguous(), send, recv)
        return back, None, None, None


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoELayer(nn.Module):
    """Top-1 routing over ``per_rank × world`` experts, ``per_rank`` of them held by this rank."""

    def __init__(self, dim: int, hidden: int, world: int, rank: int, per_rank: int, hot: int | None, bias: float):
        super().__init__()
        self.world, self.per_rank = world, per_rank
        self.capacity: int | None = None  # tokens an expert takes from one source rank (the capacity fault)
        self.received: list[int] = []  # tokens each local expert received in the last forward (the token truth)
        self.router = nn.Linear(dim, world * per_rank)
        self.first = rank * per_rank
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(per_rank))
        self.shared: Expert | None = None  # a frozen shared expert run during the dispatch (--overlap-shared)
        self.ranges = False  # record_function("dispatch") / ("combine") around the exchanges (--ep-ranges)
        shift = torch.zeros(world * per_rank)
        if hot is not None:
            shift[hot] = bias
        self.register_buffer("shift", shift)

    def forward(self, x):
        n_exp = self.world * self.per_rank
        probs = F.softmax(self.router(x) + self.shift, dim=-1)
        gate, idx = probs.max(dim=-1)
        hot = F.one_hot(idx, n_exp)
        if self.capacity is not None:  # a token past its expert's capacity is dropped: it skips the experts
            kept = (hot.cumsum(0) * hot).sum(1) <= self.capacity
            gate = gate * kept
            idx = torch.where(kept, idx, n_exp)  # sorts last, sent nowhere
            hot = hot * kept.unsqueeze(1)
        order = torch.argsort(idx, stable=True)[: int(hot.sum())]
        counts = hot.sum(0)  # tokens this rank sends to each expert (as GShard/Switch count)
        shared: list[torch.Tensor] = []
        during = (lambda: shared.append(self.shared(x))) if self.shared is not None else None
        with _range("dispatch", self.ranges):
            got = torch.empty_like(counts)  # tokens each source rank sends to each local expert, [world × per_rank]
            dist.all_to_all_single(got, counts)
            send = counts.view(self.world, self.per_rank).sum(1).tolist()
            got = got.view(self.world, self.per_rank)
            self.received = got.sum(0).tolist()
            recv = _AllToAll.apply(x[order], send, got.sum(1).tolist(), during)
        # received tokens come grouped by source rank, then by local expert: regroup by local expert
        local = torch.arange(self.per_rank).repeat(self.world).repeat_interleave(got.flatten())
        regroup = torch.argsort(local, stable=True)
        out = torch.empty_like(recv)
        start = 0
        for j, n in enumerate(got.sum(0).tolist()):
            rows = regroup[start : start + n]
            with record_function(f"expert_{self.first + j}"):
                out = out.index_copy(0, rows, self.experts[j](recv[rows]))
            start += n
        with _range("combine", self.ranges):
            back = _AllToAll.apply(out, got.sum(1).tolist(), send)
        y = torch.zeros_like(x).index_copy(0, order, back)
        if shared:
            y = y + shared[0].detach()
        return x + y * gate.unsqueeze(1)


def _range(name: str, on: bool):
    """record_function(name) where the program names its exchanges (--ep-ranges), else nothing."""
    return record_function(name) if on else contextlib.nullcontext()


class Model(nn.Module):
    def __init__(self, args: argparse.Namespace, rank: int):
        super().__init__()
        per_rank = 2
        hot = hot_expert(args)
        torch.manual_seed(args.seed)  # replicated weights: the same on every rank
        self.dense = nn.Linear(args.dim, args.dim)
        self.layers = nn.ModuleList(
            MoELayer(args.dim, args.hidden, args.ranks, rank, per_rank, hot, args.hot_bias) for _ in range(args.layers)
        )
        torch.manual_seed(args.seed + 1000 + rank)  # expert weights: this rank's own
        for layer in self.layers:
            layer.ranges = args.ep_ranges
            if args.overlap_shared:
                layer.shared = Expert(args.dim, args.hidden).requires_grad_(False)
            if args.fault == "capacity":
                layer.capacity = math.ceil(args.capacity_factor * args.tokens / (args.ranks * per_rank))
            for expert in layer.experts:
                for m in (expert.up, expert.down):
                    m.reset_parameters()

    def replicated(self) -> list[nn.Parameter]:
        return [p for name, p in self.named_parameters() if ".experts." not in name and p.requires_grad]

    def forward(self, x):
        h = F.gelu(self.dense(x))
        for layer in self.layers:
            h = layer(h)
        return h


def hot_expert(args: argparse.Namespace) -> int | None:
    """The expert the router is biased towards: one of the fault rank's two (hot-expert and capacity faults)."""
    return args.fault_rank * 2 + args.hot_local if args.fault in ("hot-expert", "capacity") else None


def _step(model: Model, opt: torch.optim.Optimizer, x: torch.Tensor, args: argparse.Namespace, rank: int, pending):
    """One training step; returns the gradient all_reduce still in flight (``--async-grad``), else None."""
    opt.zero_grad(set_to_none=False)
    loss = model(x).pow(2).mean()
    loss.backward()
    if rank == args.fault_rank and args.fault == "sleep":
        time.sleep(args.fault_ms / 1000)
    if rank == args.fault_rank and args.fault == "compute":
        a = torch.randn(512, 512)
        for _ in range(args.fault_matmuls):
            a = torch.tanh(a @ a)
    grads = [p.grad for p in model.replicated()]
    flat = torch.cat([g.flatten() for g in grads])
    if not args.async_grad:
        dist.all_reduce(flat)
        _apply(flat / args.ranks, grads)
        opt.step()
        return None
    if pending is not None:  # the previous step's gradients, averaged while this step ran
        handle, prev = pending
        handle.wait()
        _apply(prev / args.ranks, grads)
        opt.step()
    return dist.all_reduce(flat, async_op=True), flat


def _apply(flat: torch.Tensor, grads: list[torch.Tensor]) -> None:
    """Write averaged gradients back into each ``.grad``."""
    start = 0
    for g in grads:
        g.copy_(flat[start : start + g.numel()].view_as(g))
        start += g.numel()


def worker(rank: int, args: argparse.Namespace, port: int, tmp: str) -> None:
    gloo_run.join(rank, args.ranks, port, pin=not args.no_pin)
    model = Model(args, rank)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(args.seed + rank)
    path = Path(tmp) / f"rank{rank}.pt.trace.json"
    with gloo_run.cpu_profile(path, args.steps) as prof:
        pending, received = None, {}
        for step in range(2 + args.steps):
            pending = _step(model, opt, torch.randn(args.tokens, args.dim, generator=data), args, rank, pending)
            if step >= 2:  # a profiled step: ProfilerStep#<step>
                received[step] = [layer.received for layer in model.layers]
            prof.step()
    (Path(tmp) / f"tokens{rank}.json").write_text(json.dumps(received))
    if pending is not None:
        pending[0].wait()
    dist.barrier()
    dist.destroy_process_group()


def _ground_truth(args: argparse.Namespace) -> str:
    """What was planted, as TOML beside the traces (not .json: a folder's *.json files are read as traces)."""
    hot = hot_expert(args)
    fields = {
        "fault": args.fault,
        "fault_rank": args.fault_rank if args.fault != "none" else None,
        "fault_ms": args.fault_ms if args.fault == "sleep" else None,
        "fault_matmuls": args.fault_matmuls if args.fault == "compute" else None,
        "hot_expert": hot,
        "hot_bias": args.hot_bias if hot is not None else None,
        "capacity_factor": args.capacity_factor if args.fault == "capacity" else None,
        "seed": args.seed,
        "tokens_per_rank": args.tokens,
        "experts_per_rank": 2,
        "ranks": args.ranks,
        "profiled_steps": args.steps,
        "async_grad": args.async_grad,
        "ep_ranges": args.ep_ranges,
        "overlap_shared": args.overlap_shared,
        "dim": args.dim,
        "hidden": args.hidden,
        "torch": torch.__version__,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items() if v is not None)


def token_truth(tmp: Path) -> str:
    """The tokens each expert received, per profiled step and layer, and each rank's (its two experts' over the
    layers), from what the workers counted (``tokens<R>.json``: per step, per layer, its local experts')."""
    per_rank = [json.loads(p.read_text()) for p in sorted(tmp.glob("tokens*.json"), key=lambda p: int(p.stem[6:]))]
    out = ["\n# the token truth: what the routers sent, counted by the generator (ProfilerStep#N)\n"]
    for step in sorted(per_rank[0], key=int):
        layers = [[n for rank in per_rank for n in rank[step][layer]] for layer in range(len(per_rank[0][step]))]
        ranks = [sum(sum(layer) for layer in rank[step]) for rank in per_rank]
        out.append(f"[tokens.step_{step}]\nexpert = {json.dumps(layers)}\nrank = {json.dumps(ranks)}\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = gloo_run.run(worker, args, _ground_truth(args), plain=args.no_gzip, collect=token_truth)
    print(json.dumps({"fault": args.fault, "fault_rank": args.fault_rank, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
