"""The RL step ledger as the report's ``rl_ledger`` field, the brief's and MCP's: per step its time and each
phase's in the traces beside the framework's timer, and per role and rank its busy share of the step. Made from
the report's tables (rl_phases, rl_steps, rl_ledger), so a report read back from JSON gives the same."""

from __future__ import annotations

from typing import Any

import polars as pl


def ledger_summary(tables: dict[str, pl.DataFrame]) -> dict[str, Any] | None:
    """None for a job that is no RL job (no rl_phases table)."""
    phases, steps, ranks = (tables.get(n) for n in ("rl_phases", "rl_steps", "rl_ledger"))
    if phases is None or phases.is_empty() or steps is None or ranks is None:
        return None
    cols = ["phase", "phase_us", "timer", "timer_us", "diff_pct", "measured"]
    per_step = [
        {**row, "phases": phases.filter(pl.col("step") == row["step"]).select(cols).to_dicts()}
        for row in steps.select("step", "step_us", "timer_us", "diff_pct").to_dicts()
    ]
    busy = (
        ranks.group_by("rank", "role", "role_rank")
        .agg((pl.col("busy_us").sum() / pl.col("window_us").sum()).alias("busy_share"))
        .sort("rank")
    )
    return {"steps": per_step, "ranks": busy.to_dicts()}


def ledger_brief(tables: dict[str, pl.DataFrame]) -> dict[str, Any] | None:
    """The ledger as the brief carries it, small beside the causes: each phase's mean over the steps (ms, one
    decimal) beside its timer's and the difference, the step's, and each role and rank's busy share."""
    full = ledger_summary(tables)
    if full is None:
        return None
    phases = (
        tables["rl_phases"]
        .group_by("phase", maintain_order=True)
        .agg(
            (pl.col("phase_us").mean() / 1000).round(1).alias("ms"),
            (pl.col("timer_us").mean() / 1000).round(1).alias("timer_ms"),
            pl.col("diff_pct").abs().max().round(1).alias("max_diff_pct"),
        )
    )
    steps = tables["rl_steps"]
    return {
        "steps": steps["step"].to_list(),
        "step_ms": round(float(steps["step_us"].mean()) / 1000, 1),
        "phases": phases.to_dicts(),
        "busy_share": {f"{k['role']} {k['role_rank']}": round(k["busy_share"], 3) for k in full["ranks"]},
    }
