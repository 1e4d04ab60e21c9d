"""MoE / expert parallelism: tokens per expert and rank counted from the capture (`tokens`), their balance across
ranks and experts against the noise floor in ``rules/checks.toml`` (`token_balance`), and the time-based fallback
when no token counts were recorded (`balance`)."""
