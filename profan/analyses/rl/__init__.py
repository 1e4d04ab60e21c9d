"""An RL job's step, read across its roles' traces: the phases' windows (`phases`), the step ledger per role and
rank (`ledger`), the rollout's long tail (`long_tail`), and the findings on them (`section`)."""
