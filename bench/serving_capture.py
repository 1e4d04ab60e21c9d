"""Generate small CPU serving captures (prefill + decode with a KV cache) and their truth.

Why: serving analyses need real traces where the number of iterations and each
iteration's phase are known; a tiny randomly initialised decoder run with
``model.generate()`` under torch.profiler gives exactly that on CPU.
Run with the generation venv: ``/work/genvenv/bin/python bench/serving_capture.py OUT``.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import LlamaConfig, LlamaForCausalLM

NEW_TOKENS = 4


# the decoder's size, shared by every tiny model the serving captures use (dense Llama, MoE Mixtral)
TINY_SHAPE = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


def tiny_llama() -> LlamaForCausalLM:
    """A 2-layer Llama small enough to keep the trace to a few MB."""
    config = LlamaConfig(**TINY_SHAPE)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def capture(out_dir: Path, prompt_lengths: list[int]) -> None:
    """Profile one generate() over a padded batch and write trace + truth."""
    model = tiny_llama()
    width = max(prompt_lengths)
    ids = torch.randint(1, 1000, (len(prompt_lengths), width))
    mask = torch.zeros_like(ids)
    for row, length in enumerate(prompt_lengths):
        mask[row, width - length :] = 1
    out_dir.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    with (
        profile(activities=activities, record_shapes=True, with_stack=True) as prof,
        record_function("generate"),
        torch.no_grad(),
    ):
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    raw = out_dir / "trace.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(str(raw) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    lines = [
        f"requests = {len(prompt_lengths)}",
        f"prompt_lengths = {prompt_lengths}",
        f"tokens_generated = {NEW_TOKENS}",
        f"iterations = {NEW_TOKENS}",
        'phases = ["prefill"' + ', "decode"' * (NEW_TOKENS - 1) + "]",
        f"torch = {torch.__version__!r}",
    ]
    (out_dir / "ground_truth.toml").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "serving_out")
    capture(root / "serving_llama_cpu_uniform", [8, 8, 8])
    capture(root / "serving_llama_cpu_mixed", [3, 9, 16])
