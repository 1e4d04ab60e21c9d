"""An RL job's step, read across its roles' traces: the phases' windows (`phases`), the step ledger per role and
rank (`ledger`), a colocated job's engine switches (`switches`), the rollout's long tail (`long_tail`), how the
generation and log-prob passes are batched (`batching`), and the findings on them (`section`)."""
