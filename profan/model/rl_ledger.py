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
    return {"steps": per_step, "ranks": busy.to_dicts(), "pools": pool_idle(ranks)}


def pool_idle(ranks: pl.DataFrame) -> list[dict[str, Any]]:
    """Per role (its pool of ranks), the time per step a rank of it idles while a rank of another role is busy
    (mean over its ranks and the steps), and that as a share of the step: separate pools wait for each other by
    design, and this is what each pays. Empty for a job of one role (colocated: its switches say the cost)."""
    if ranks.is_empty() or ranks["role"].n_unique() < 2:
        return []
    busy_by = ranks.group_by("step", "phase", "role").agg((pl.col("busy_us") > 0).any().alias("_busy"))
    others = busy_by.join(busy_by, on=["step", "phase"], suffix="_other").filter(
        (pl.col("role") != pl.col("role_other")) & pl.col("_busy_other")
    )
    waiting = others.select("step", "phase", "role").unique()
    idle = ranks.join(waiting, on=["step", "phase", "role"])
    idle = idle.group_by("role", "rank", "step").agg(pl.col("idle_us").sum())
    step = ranks.group_by("rank", "step").agg(pl.col("window_us").sum())
    per = (
        idle.join(step, on=["rank", "step"])
        .group_by("role")
        .agg(
            pl.col("rank").min().alias("_first"),
            pl.col("rank").n_unique().alias("ranks"),
            (pl.col("idle_us").sum() / pl.len()).alias("idle_us"),
            (pl.col("idle_us").sum() / pl.col("window_us").sum()).alias("idle_share"),
        )
    )
    return per.sort("_first").drop("_first").to_dicts()  # in the ranks' order, the same on every call


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
        "pool_idle_share": {pool["role"]: round(pool["idle_share"], 3) for pool in full["pools"]},
    }


GRID_TIME = "time"  # the grid's column saying what a row measures


def ledger_grid(tables: dict[str, pl.DataFrame]) -> pl.DataFrame | None:
    """The ledger as a reader of an RL step reads it, one column per phase in step order (µs) and their sum (a
    colocated job's engine switches beside generation, which holds them, and out of the sum): per
    step the phase's window in the traces (its sum the step) and the framework's timer for it, then per role and
    rank its busy and idle time in each phase (a pool idles while the other works). The HTML page's and the
    workbook's RL ledger; None for a job that is no RL job."""
    phases, ranks = tables.get("rl_phases"), tables.get("rl_ledger")
    if phases is None or phases.is_empty() or ranks is None or ranks.is_empty():
        return None
    order = list(dict.fromkeys(phases["phase"].to_list()))
    keys = ["step", "role", "role_rank", "rank", GRID_TIME]
    window = phases.select(
        "step",
        pl.lit("all roles").alias("role"),
        pl.lit(None, pl.Int64).alias("role_rank"),
        pl.lit(None, pl.Int64).alias("rank"),
        pl.lit("phase in the traces").alias(GRID_TIME),
        "phase",
        pl.col("phase_us").alias("value"),
    )
    timer = window.with_columns(pl.lit("framework's timer").alias(GRID_TIME), value=phases["timer_us"])
    per_rank = ranks.unpivot(["busy_us", "idle_us"], index=["step", "role", "role_rank", "rank", "phase"])
    per_rank = per_rank.select(
        "step",
        "role",
        pl.col("role_rank").cast(pl.Int64),
        pl.col("rank").cast(pl.Int64),
        pl.col("variable").replace_strict({"busy_us": "busy", "idle_us": "idle"}).alias(GRID_TIME),
        "phase",
        "value",
    )
    long = pl.concat([window, timer, per_rank])
    wide = long.pivot(on="phase", index=keys, values="value", aggregate_function="first", sort_columns=False)
    cols = [name for name in order if name in wide.columns]
    inside = set(phases.filter(pl.col("measured").str.starts_with("trace ("))["phase"])  # inside another phase
    summed = [name for name in cols if name not in inside]
    row_order = {"phase in the traces": 0, "framework's timer": 1, "busy": 2, "idle": 3}
    wide = wide.with_columns(
        pl.sum_horizontal(summed).alias("sum"),
        pl.col(GRID_TIME).replace_strict(row_order, return_dtype=pl.Int64).alias("_o"),
    )
    wide = wide.sort(["step", pl.col("rank").fill_null(-1), "_o"]).drop("_o")
    return wide.rename({name: f"{name}_us" for name in [*cols, "sum"]}).select(
        *keys, *[f"{name}_us" for name in [*cols, "sum"]]
    )
