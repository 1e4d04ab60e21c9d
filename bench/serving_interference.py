"""Generate CPU serving captures that bench/serving_capture.py's generate() cannot express, with their truth.

* ``serving_llama_cpu_interference``: a serving loop over a KV cache in which a long prompt arrives while a batch
  decodes: the batch's prefill, three decode iterations, the new request's prefill (a separate forward, as a
  scheduler without chunked prefill runs it: the running decodes wait for it), three more decode iterations.
* ``serving_mixtral_cpu_moe``: generate() on a tiny randomly initialised Mixtral (MoE: 4 experts, top-2).
* ``serving_llama_cpu_prefill_join``: a serving loop that packs every running request's tokens into one forward,
  as vLLM's v1 model runner does (one flattened token sequence, each request attending only to its own KV through
  a block mask over one shared cache): four requests decode, and twice a long prompt (1,024, then 512 tokens)
  joins the running batch, its whole prefill in the same forward as the decodes (mixed iterations, chunked
  prefill without a budget). Each forward is labelled as vLLM's ``execute_model`` labels its batch.

Run with the generation venv: ``/work/genvenv/bin/python bench/serving_interference.py OUT``.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
from serving_capture import TINY_SHAPE, tiny_llama
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

BATCH, PROMPT, LONG_PROMPT, DECODES = 3, 8, 192, 3
torch.set_num_threads(1)  # one intra-op thread: on a shared 2-core machine more only spin against other work


def _write(prof, out_dir: Path, truth: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "trace.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(str(raw) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    (out_dir / "ground_truth.toml").write_text("\n".join([*truth, f"torch = {torch.__version__!r}"]) + "\n")


def _decode(model, cache, last: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=last, past_key_values=cache, use_cache=True)
    return out.logits[:, -1:].argmax(-1)


def interference(out_dir: Path) -> None:
    """The batch decodes; a long prompt's prefill runs between its decode iterations."""
    model = tiny_llama()
    batch = torch.randint(1, 1000, (BATCH, PROMPT))
    newcomer = torch.randint(1, 1000, (1, LONG_PROMPT))
    with (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof,
        record_function("serve"),
        torch.no_grad(),
    ):
        cache = DynamicCache()
        last = model(input_ids=batch, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        for _ in range(DECODES):
            last = _decode(model, cache, last)
        model(input_ids=newcomer, past_key_values=DynamicCache(), use_cache=True)
        for _ in range(DECODES):
            last = _decode(model, cache, last)
    phases = ["prefill", *["decode"] * DECODES, "prefill", *["decode"] * DECODES]
    _write(
        prof,
        out_dir,
        [
            f"requests = {BATCH + 1}",
            f"prompt_lengths = {[PROMPT] * BATCH + [LONG_PROMPT]}",
            f"iterations = {len(phases)}",
            "phases = [" + ", ".join(f'"{p}"' for p in phases) + "]",
            f"query_lengths = {[PROMPT, *[1] * DECODES, LONG_PROMPT, *[1] * DECODES]}",
            "interfering_iteration = 5  # the long prompt's prefill, between decode iterations 4 and 6",
        ],
    )


def moe(out_dir: Path) -> None:
    """generate() on a 2-layer Mixtral with 4 experts (top-2): 1 prefill + 3 decode forwards."""
    config = MixtralConfig(**TINY_SHAPE, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    model = MixtralForCausalLM(config).eval()
    ids = torch.randint(1, 1000, (BATCH, PROMPT))
    new_tokens = DECODES + 1
    with (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof,
        record_function("generate"),
        torch.no_grad(),
    ):
        model.generate(
            input_ids=ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0
        )
    _write(
        prof,
        out_dir,
        [
            f"requests = {BATCH}",
            f"prompt_lengths = {[PROMPT] * BATCH}",
            f"tokens_generated = {new_tokens}",
            f"iterations = {new_tokens}",
            'phases = ["prefill"' + ', "decode"' * DECODES + "]",
            "experts = 4",
            "experts_per_token = 2",
        ],
    )


JOIN_PROMPT, JOINERS, JOIN_DECODES = 16, ((4, 1024), (5, 512)), 4  # prompt of the first 4; (request, prompt)


class PackedBatch:
    """One KV cache holding every request's tokens back to back, and who owns each cached position: a forward's
    mask lets a token attend to its own request's earlier positions only (vLLM's packed layout)."""

    def __init__(self, model) -> None:
        self.model, self.cache, self.owner, self.position = model, DynamicCache(), [], []
        self.lengths: dict[int, int] = {}

    def forward(self, joining: dict[int, int]) -> str:
        """One iteration: a token of each running request plus each joining request's whole prompt; returns its
        vLLM-style label (context: the prompts, generation: the decodes; sq/sk sums of query and KV lengths)."""
        decodes = sorted(self.lengths)
        chunks = [(req, 1, self.lengths[req]) for req in decodes] + [(req, n, 0) for req, n in joining.items()]
        q_owner = [req for req, n, _ in chunks for _ in range(n)]
        q_pos = [start + i for _, n, start in chunks for i in range(n)]
        qo, ko = torch.tensor(q_owner)[:, None], torch.tensor(self.owner + q_owner)[None]
        qp, kp = torch.tensor(q_pos)[:, None], torch.tensor(self.position + q_pos)[None]
        mask = torch.zeros(qo.shape[0], ko.shape[1]).masked_fill(~((qo == ko) & (kp <= qp)), float("-inf"))
        label = _label(chunks, len(decodes))
        with record_function(label):
            ids = torch.randint(1, 1000, (1, len(q_owner)))
            self.model(
                input_ids=ids,
                attention_mask=mask[None, None],
                position_ids=torch.tensor([q_pos]),
                past_key_values=self.cache,
                use_cache=True,
            )
        self.owner += q_owner
        self.position += q_pos
        for req, n, start in chunks:
            self.lengths[req] = start + n
        return label


def _label(chunks: list[tuple[int, int, int]], decodes: int) -> str:
    """vLLM GPUModelRunner's execute label: request count, then per kind (context, generation) its count and the
    sums of query length, KV length, their squares and products."""

    def part(rows: list[tuple[int, int, int]]) -> str:
        sq, sk = [n for _, n, _ in rows], [n + start for _, n, start in rows]
        return (
            f"sq{sum(sq)}sk{sum(sk)}sqsq{sum(q * q for q in sq)}sqsk{sum(q * k for q, k in zip(sq, sk, strict=True))}"
        )

    gen, ctx = chunks[:decodes], chunks[decodes:]
    return f"execute_{len(chunks)}_context_{len(ctx)}({part(ctx)})_generation_{len(gen)}({part(gen)})"


def prefill_join(out_dir: Path) -> None:
    """Four requests decode; a 1,024-token then a 512-token prompt joins the running batch (mixed iterations)."""
    config = LlamaConfig(**{**TINY_SHAPE, "max_position_embeddings": 2048})
    torch.manual_seed(0)
    batch = PackedBatch(LlamaForCausalLM(config).eval())
    phases, queries = [], []
    with (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof,
        record_function("serve"),
        torch.no_grad(),
    ):
        schedule = [{req: JOIN_PROMPT for req in range(4)}, *[{}] * JOIN_DECODES]
        for req, prompt in JOINERS:
            schedule += [{req: prompt}, *[{}] * JOIN_DECODES]
        for joining in schedule:
            queries.append(len(batch.lengths) + sum(joining.values()))
            phases.append("prefill" if not batch.lengths else "mixed" if joining else "decode")
            batch.forward(joining)
    mixed = [index + 1 for index, phase in enumerate(phases) if phase == "mixed"]
    _write(
        prof,
        out_dir,
        [
            f"requests = {4 + len(JOINERS)}",
            f"prompt_lengths = {[JOIN_PROMPT] * 4 + [n for _, n in JOINERS]}",
            f"iterations = {len(phases)}",
            "phases = [" + ", ".join(f'"{p}"' for p in phases) + "]",
            f"tokens = {queries}  # tokens in each forward: one per decoding request plus the joining prompt",
            f"mixed_iterations = {mixed}  # a long prompt's whole prefill joins the running decodes",
            f"joining_prompts = {[n for _, n in JOINERS]}",
        ],
    )


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "serving_out")
    interference(root / "serving_llama_cpu_interference")
    moe(root / "serving_mixtral_cpu_moe")
    prefill_join(root / "serving_llama_cpu_prefill_join")
