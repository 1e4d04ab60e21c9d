"""Per rank: where one rank's step goes — bucket breakdown, steps and their split, attention, boundness,
elementwise chains, memory, and the reconciliation of totals against the profiler's own."""
