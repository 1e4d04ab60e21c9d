"""A small GRPO loop on CPU with Ray actors, profiled the way verl's torch profiler writes it (needs PyTorch,
transformers and ray; run with the generation venv).

Two pools, as verl's separate-pool placement: rollout workers (ranks 0..R-1) generate with a KV cache from a small
randomly initialised decoder; one trainer worker holds the actor, the reference model and a reward model, and runs
`compute_rm_score`, `compute_log_prob`, `compute_ref_log_prob` and `update_actor`. The driver computes the GRPO
advantage and syncs the actor's weights to every rollout worker through Ray (`ray.put` of the state dict), which
carries no annotation, as verl's `update_weights`.

Layout (verl `verl/utils/profiler/torch_profile.py`, continuous mode with a file prefix per worker group):
``OUT/e2e/<group>_prof_rank-<rank>.json.gz``, phases as ``record_function(<verl method name>)``. Beside it the
driver's per-step timers in verl's file-logger form (``metrics.jsonl``: ``{"step": N, "data": {"timing_s/gen": ...}}``,
`verl/utils/tracking.py`) and ``ground_truth.toml``.

    python bench/rl_loop.py --out fixtures/torch/rl_grpo_cpu/normal
    python bench/rl_loop.py --long-tail-rank 1 --out fixtures/torch/rl_grpo_cpu/long_tail
    python bench/rl_loop.py --sync-delay 0.6 --out fixtures/torch/rl_grpo_cpu/slow_sync
    python bench/rl_loop.py --record-shapes --rollout-ranks 1 --prompts 24 --response-len 8 --gen-batch 8 \
        --paired 3 --out fixtures/torch/rl_grpo_cpu/under_batched
    python bench/rl_loop.py --record-shapes --rollout-ranks 1 --prompts 24 --logprob-micro-batch 2 \
        --paired 3 --out fixtures/torch/rl_grpo_cpu/logprob_small
    python bench/rl_loop.py --prompts 24 --update-epochs 4 --paired 3 --out fixtures/torch/rl_grpo_cpu/update_heavy
    python bench/rl_loop.py --record-shapes --colocate --rollout-ranks 1 --out fixtures/torch/rl_grpo_cpu/colocated

`--colocate` runs verl's hybrid engine instead: one worker group (``actor_rollout``) whose workers hold the rollout
engine beside the actor and take turns; ``generate_sequences`` enters the sharding manager as verl does
(``wake_up``: the rollout weights onloaded and resharded from the actor, timed as ``reshard``) and leaves it
(``sleep``: the rollout weights offloaded), each under its own ``record_function``; no separate weight sync.
`--record-shapes` is the profiler's ``record_shapes`` (verl's torch tool ``contents: [shapes]``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import ray
import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(
    vocab_size=500,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=1024,
)


def tiny_model(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()


class Profiled:
    """A worker's continuous ("e2e") torch profiler, written where verl writes it."""

    def start_profile(self, save_path: str, prefix: str, rank: int, shapes: bool = False) -> None:
        torch.set_num_threads(1)
        self.trace = Path(save_path) / "e2e" / f"{prefix}_prof_rank-{rank}.json"
        self.trace.parent.mkdir(parents=True, exist_ok=True)
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=shapes)
        self.prof.start()

    def stop_profile(self) -> str:
        self.prof.stop()
        self.prof.export_chrome_trace(str(self.trace))
        dst = self.trace.with_name(self.trace.name + ".gz")
        with open(self.trace, "rb") as fh, gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as gz:
            shutil.copyfileobj(fh, gz)
        self.trace.unlink()
        return str(dst)


class Rollout(Profiled):
    def __init__(self, rank: int, response_len: int, gen_batch: int = 0) -> None:
        self.rank, self.response_len, self.model = rank, response_len, tiny_model(0)
        self.gen_batch = gen_batch

    def _generate(self, prompts: torch.Tensor) -> torch.Tensor:
        """The prompts in passes of ``gen_batch`` sequences one after another (all at once where 0)."""
        outs = []
        for chunk in prompts.split(self.gen_batch or len(prompts)):
            outs.append(
                self.model.generate(
                    chunk,
                    attention_mask=torch.ones_like(chunk),
                    max_new_tokens=self.response_len,
                    min_new_tokens=self.response_len,
                    do_sample=True,
                    use_cache=True,
                    pad_token_id=0,
                )
            )
        return torch.cat(outs)

    def generate_sequences(self, prompts: torch.Tensor) -> tuple[torch.Tensor, int]:
        with torch.profiler.record_function("generate_sequences"), torch.no_grad():
            out = self._generate(prompts)
        return out, self.response_len

    def configure(self, gen_batch: int) -> None:
        """The paired steps' setting (`--paired`): the planted batching or none."""
        self.gen_batch = gen_batch

    def update_weights(self, state: dict, delay_s: float) -> None:
        """No annotation (verl's `update_weights` has none): the weights land, then the engine reloads."""
        time.sleep(delay_s)
        self.model.load_state_dict(state)


class Trainer(Profiled):
    def __init__(self, micro_batch: int, logprob_micro_batch: int = 0, update_epochs: int = 1) -> None:
        self.actor, self.ref, self.rm = tiny_model(0), tiny_model(0), tiny_model(1)
        self.actor.train()
        self.micro_batch, self.update_epochs = micro_batch, update_epochs
        self.logprob_micro_batch = logprob_micro_batch or micro_batch  # verl's log_prob_micro_batch_size
        self.optim = torch.optim.AdamW(self.actor.parameters(), lr=1e-4)

    def _log_probs(self, model, seqs: torch.Tensor, micro_batch: int = 0) -> torch.Tensor:
        parts = []
        for chunk in seqs.split(micro_batch or self.micro_batch):
            logits = model(chunk).logits[:, :-1]
            parts.append(torch.log_softmax(logits, -1).gather(-1, chunk[:, 1:, None]).squeeze(-1))
        return torch.cat(parts)

    def compute_rm_score(self, seqs: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("compute_rm_score"), torch.no_grad():
            return torch.cat([self.rm(c).logits[:, -1, :2].sum(-1) for c in seqs.split(self.micro_batch)])

    def compute_log_prob(self, seqs: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("compute_log_prob"), torch.no_grad():
            return self._log_probs(self.actor, seqs, self.logprob_micro_batch)

    def compute_ref_log_prob(self, seqs: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("compute_ref_log_prob"), torch.no_grad():
            return self._log_probs(self.ref, seqs, self.logprob_micro_batch)

    def update_actor(self, seqs: torch.Tensor, old: torch.Tensor, ref: torch.Tensor, adv: torch.Tensor) -> float:
        with torch.profiler.record_function("update_actor"):
            for _ in range(self.update_epochs):  # verl's actor.ppo_epochs
                self.optim.zero_grad()
                new = self._log_probs(self.actor, seqs)
                ratio = torch.exp(new - old)
                loss = -(ratio * adv[:, None]).mean() + 0.001 * (new - ref).pow(2).mean()
                loss.backward()
                self.optim.step()
            return float(loss.detach())

    def configure(self, logprob_micro_batch: int, update_epochs: int) -> None:
        """The paired steps' setting (`--paired`): the planted micro-batch and epochs, or the defaults."""
        self.logprob_micro_batch, self.update_epochs = logprob_micro_batch or self.micro_batch, update_epochs

    def state_for_sync(self) -> dict:
        """No annotation: the state dict copied out for the rollout engines."""
        return {k: v.detach().clone() for k, v in self.actor.state_dict().items()}


class Colocated(Trainer):
    """verl's hybrid engine: the rollout engine beside the actor in one worker, switched in and out around each
    generation by the sharding manager (`verl/workers/sharding_manager/*`: ``__enter__`` wakes the engine up and
    reshards the actor's weights into it under ``simple_timer("reshard")``, ``__exit__`` puts it to sleep)."""

    def __init__(self, micro_batch: int, response_len: int, gen_batch: int = 0) -> None:
        super().__init__(micro_batch)
        self.rollout = Rollout(0, response_len, gen_batch)
        self.response_len = response_len
        self.offloaded = {k: v.detach().clone() for k, v in self.rollout.model.state_dict().items()}

    def generate_sequences(self, prompts: torch.Tensor) -> tuple[torch.Tensor, int, float, float]:
        with torch.profiler.record_function("generate_sequences"), torch.no_grad():
            t0 = time.perf_counter()
            with torch.profiler.record_function("wake_up"):  # onload the engine's weights, then reshard
                self.rollout.model.load_state_dict(self.offloaded)
                self.rollout.model.load_state_dict(self.actor.state_dict())
            t1 = time.perf_counter()
            out = self.rollout._generate(prompts)
            t2 = time.perf_counter()
            with torch.profiler.record_function("sleep"):  # offload the engine's weights, free its cache
                self.offloaded = {k: v.detach().clone() for k, v in self.rollout.model.state_dict().items()}
            t3 = time.perf_counter()
        return out, self.response_len, t1 - t0, t3 - t2


RolloutWorker = ray.remote(num_cpus=0.5)(Rollout)
TrainerWorker = ray.remote(num_cpus=1)(Trainer)
ColocatedWorker = ray.remote(num_cpus=1)(Colocated)


def grpo_advantage(scores: torch.Tensor, group: int) -> torch.Tensor:
    grouped = scores.view(-1, group)
    return ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)


@contextmanager
def timer(timing: dict, name: str):
    t0 = time.perf_counter()
    yield
    timing[f"timing_s/{name}"] = round(time.perf_counter() - t0, 6)


def one_step(args, rollout: list, trainer, step: int) -> dict:
    timing: dict = {}
    torch.manual_seed(step)
    prompts = [torch.randint(1, 500, (args.prompts, args.prompt_len)) for _ in rollout]
    with timer(timing, "step"):
        with timer(timing, "gen"):
            outs = ray.get([w.generate_sequences.remote(p) for w, p in zip(rollout, prompts, strict=True)])
        extra = {}
        if args.colocate:  # the worker's own reshard timer, returned as verl returns meta_info["timing"]
            timing["timing_s/reshard"] = round(max(o[2] for o in outs), 6)
            extra["sleep_s"] = round(max(o[3] for o in outs), 6)
            outs = [o[:2] for o in outs]
        width = args.prompt_len + args.max_response_len  # padded as verl pads to data.max_response_length
        seqs = torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1])) for o, _ in outs])
        with timer(timing, "reward"):
            scores = ray.get(trainer.compute_rm_score.remote(seqs))
        with timer(timing, "old_log_prob"):
            old = ray.get(trainer.compute_log_prob.remote(seqs))
        with timer(timing, "ref"):
            ref = ray.get(trainer.compute_ref_log_prob.remote(seqs))
        with timer(timing, "adv"):
            adv = grpo_advantage(scores, args.group)
        with timer(timing, "update_actor"):
            ray.get(trainer.update_actor.remote(seqs, old, ref, adv))
        if not args.colocate:  # colocated, the weights reach the engine in the next wake_up (reshard)
            with timer(timing, "update_weights"):
                state = ray.put(ray.get(trainer.state_for_sync.remote()))
                ray.get([w.update_weights.remote(state, args.sync_delay) for w in rollout])
    return {"timing": timing, "extra": extra, "response_len": [n for _, n in outs]}


def paired(args, rollout: list, trainer) -> dict:
    """``--paired N``: after the profiled steps, N unprofiled rounds of one step as planted and one with the
    planted batching undone (one generate pass, the trainer's micro-batch, one update epoch), adjacent in time so
    the machine's load is alike: the step-time difference a batching cause's gain is held against."""
    out: dict = {"planted": [], "unplanted": []}
    if args.colocate or not args.paired:
        return out
    settings = {
        "planted": (args.gen_batch, args.logprob_micro_batch, args.update_epochs),
        "unplanted": (0, 0, 1),
    }
    for n in range(args.paired):
        for name, (gen_batch, micro, epochs) in settings.items():
            ray.get([w.configure.remote(gen_batch) for w in rollout] + [trainer.configure.remote(micro, epochs)])
            out[name].append(one_step(args, rollout, trainer, 100 + n)["timing"])
    return out


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def run(args) -> dict:
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False)
    try:
        lens = [args.response_len * (4 if r == args.long_tail_rank else 1) for r in range(args.rollout_ranks)]
        save = str(args.tmp)
        if args.colocate:
            trainer = ColocatedWorker.remote(args.micro_batch, args.response_len, args.gen_batch)
            rollout, workers = [trainer], [trainer]
        else:
            rollout = [RolloutWorker.remote(r, n, args.gen_batch) for r, n in enumerate(lens)]
            trainer = TrainerWorker.remote(args.micro_batch, args.logprob_micro_batch, args.update_epochs)
            workers = [*rollout, trainer]
        one_step(args, rollout, trainer, 0)  # warm-up, not profiled (verl profiles global_profiler.steps)
        if args.colocate:
            ray.get(trainer.start_profile.remote(save, "actor_rollout", 0, args.record_shapes))
        else:
            ray.get([w.start_profile.remote(save, "rollout", r, args.record_shapes) for r, w in enumerate(rollout)])
            ray.get(trainer.start_profile.remote(save, "actor", 0, args.record_shapes))
        steps = [one_step(args, rollout, trainer, s) for s in range(1, args.steps + 1)]
        ray.get([w.stop_profile.remote() for w in workers])
        return {"steps": steps, "response_len": lens, "paired": paired(args, rollout, trainer)}
    finally:
        ray.shutdown()


def truth_toml(args, result: dict, load: dict) -> str:
    lines = [
        "# written by bench/rl_loop.py: the driver's own timers (also in metrics.jsonl) and what was planted",
        f"rollout_ranks = {args.rollout_ranks}",
        "trainer_ranks = 1",
        f"prompts_per_rank = {args.prompts}",
        f"prompt_len = {args.prompt_len}",
        f"response_len = {result['response_len']}",
        f"max_response_len = {args.max_response_len}",
        f"micro_batch = {args.micro_batch}",
        f"long_tail_rank = {args.long_tail_rank}",
        f"sync_delay_s = {args.sync_delay}",
        f"gen_batch = {args.gen_batch or args.prompts}",
        f"logprob_micro_batch = {args.logprob_micro_batch or args.micro_batch}",
        f"update_epochs = {args.update_epochs}",
        f"colocated = {str(args.colocate).lower()}",
        f"record_shapes = {str(args.record_shapes).lower()}",
        f"profiled_steps = {list(range(1, args.steps + 1))}",
        f"loadavg_1min_start = {load['start']}",
        f"loadavg_1min_end = {load['end']}",
        f"machine_cpu_busy_share = {load['busy']}",
    ]
    for n, step in enumerate(result["steps"], 1):
        lines += ["", f"[step.{n}]"] + [f'"{k}" = {v}' for k, v in {**step["timing"], **step["extra"]}.items()]
    for name, rounds in result["paired"].items():  # unprofiled, alternating: planted, unplanted, planted, ...
        for n, timing in enumerate(rounds, 1):
            lines += ["", f"[paired.{name}.{n}]"] + [f'"{k}" = {v}' for k, v in timing.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rollout-ranks", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--response-len", type=int, default=16)
    parser.add_argument("--max-response-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--long-tail-rank", type=int, default=-1)
    parser.add_argument("--sync-delay", type=float, default=0.0)
    parser.add_argument("--gen-batch", type=int, default=0, help="sequences per generate pass (0: all at once)")
    parser.add_argument("--logprob-micro-batch", type=int, default=0, help="log-prob passes' micro-batch")
    parser.add_argument("--update-epochs", type=int, default=1, help="passes of update_actor over the batch")
    parser.add_argument("--colocate", action="store_true", help="rollout engine beside the actor, switched")
    parser.add_argument("--record-shapes", action="store_true", help="the profiler's record_shapes")
    parser.add_argument("--paired", type=int, default=0, help="unprofiled rounds of planted and undone steps")
    args = parser.parse_args()
    args.tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(args.tmp, ignore_errors=True)
    busy0, total0, load0 = *cpu_busy(), os.getloadavg()[0]
    result = run(args)
    busy1, total1 = cpu_busy()
    load = {"start": load0, "end": os.getloadavg()[0], "busy": round((busy1 - busy0) / (total1 - total0), 3)}
    with open(args.tmp / "metrics.jsonl", "w", encoding="utf-8") as fh:
        for n, step in enumerate(result["steps"], 1):
            fh.write(json.dumps({"step": n, "data": step["timing"]}) + "\n")
    (args.tmp / "ground_truth.toml").write_text(truth_toml(args, result, load), encoding="utf-8")
    shutil.rmtree(args.out, ignore_errors=True)
    args.tmp.rename(args.out)
    for p in sorted(args.out.rglob("*.*")):
        print(f"{p}  {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
