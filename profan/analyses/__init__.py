"""Analyses: each answers one question of the rank tables and returns its findings, through the one contract in
`contract`. The rooms, by question:

- `per_rank`: where one rank's step goes (buckets, steps, attention, boundness, memory, reconciliation);
- `communication`: what its collectives cost and what the links allow (op time, bandwidth, HCCL planes, NCCL);
- `across_ranks`: ranks against each other (alignment, imbalance, stragglers);
- `moe`: expert parallelism (expert load from token counts, its balance across ranks and experts).
"""
