"""Generate CPU serving captures that bench/serving_capture.py's generate() cannot express, with their truth.

* ``serving_llama_cpu_interference``: a serving loop over a KV cache in which a long prompt arrives while a batch
  decodes: the batch's prefill, three decode iterations, the new request's prefill (a separate forward, as a
  scheduler without chunked prefill runs it: the running decodes wait for it), three more decode iterations.
* ``serving_mixtral_cpu_moe``: generate() on a tiny randomly initialised Mixtral (MoE: 4 experts, top-2).

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
from transformers import DynamicCache, MixtralConfig, MixtralForCausalLM

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


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "serving_out")
    interference(root / "serving_llama_cpu_interference")
    moe(root / "serving_mixtral_cpu_moe")
