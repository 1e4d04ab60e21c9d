"""What an RL framework writes beside its traces: its per-step timer log (`timers`)."""
