"""The step a report's causes are measured against: one for the whole verdict.

Why one: each cause estimates its gain against the step it looked at — a step window, or the period from one
step's start to the next where the device idles between steps. Shares of different denominators cannot be read
side by side, and gains capped against different steps can add up to more than any of them. The verdict states
this step, and every cause's share and cap is of it (`denominator`): the period where the trace has one (it holds
the windows and the idle time between them), else the step.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from profan.analyses.common import step_periods
from profan.model.causes import Cause


def step_summary(tables: dict[str, pl.DataFrame], causes: list[Cause]) -> dict[str, Any] | None:
    """The step the causes are measured against: per step, the slowest rank's step time (every rank waits for it),
    averaged over the steps. From step_trace_time.csv, else the traces' step windows; None without either."""
    named = (
        ("rl_steps", "the RL step ledger"),
        ("steps", "step_trace_time.csv"),
        ("trace_steps", "the trace's step windows"),
    )
    for name, source in named:
        frame = tables.get(name)
        if frame is None or frame.is_empty() or not {"step", "step_us"} <= set(frame.columns):
            continue
        if "scope" in frame.columns:
            frame = frame.filter(pl.col("scope") == "step")
        per = frame.drop_nulls(["step", "step_us"]).group_by("step").agg(pl.col("step_us").max()).sort("step")
        if per.is_empty():
            continue
        if name == "steps" and "file" in frame.columns and frame["file"].str.ends_with("#STEP_TIME").all():
            source = "the DB export's STEP_TIME table"
        return {"step_us": per["step_us"].mean(), "steps": per["step"].to_list(), "source": source, **_period(frame)}
    of_step = [cause for cause in causes if cause.step_us and not own_step(cause)]
    if of_step:
        measured = [cause.step_us for cause in of_step if cause.step_us]
        steps = sorted({step for cause in of_step for step in cause.steps})
        return {"step_us": max(measured), "steps": steps, "source": "the causes' steps"}
    return None


def own_step(cause: Cause) -> bool:
    """Whether a cause's step is its own reference, not the verdict's: a serving cause's gain is a share of the
    iterations it is spread over (a decode iteration, any iteration: its metric ``share_of`` says which), not of
    the capture's step. Such a cause neither sets the verdict's step nor is measured against it."""
    return bool(cause.metrics.get("share_of"))


def _period(windows: pl.DataFrame) -> dict[str, Any]:
    """``period_us``: a trace's steps from one's start to the next's (`step_periods`), averaged over the steps that
    have a step before them (``period_steps``), where that is at least 1% more than their windows (else nothing:
    the windows are the period)."""
    per = step_periods(windows)
    if per.is_empty() or per["period_us"].mean() < 1.01 * per["step_us"].mean():
        return {}
    return {"period_us": per["period_us"].mean(), "period_steps": per["step"].to_list()}


def denominator(step: dict[str, Any] | None) -> float | None:
    """What every cause's share is of (see the module docstring), or None without a step."""
    if step is None:
        return None
    return step.get("period_us") or step["step_us"]
