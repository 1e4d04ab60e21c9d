"""Serving (LLM inference) captures: the model iterations of every rank (`iterations`), the per-phase view —
prefill, decode, mixed — of their time, device use and tokens (`phases`), and the section that puts both in the
report (`section`)."""
