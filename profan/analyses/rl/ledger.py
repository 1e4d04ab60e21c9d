"""The RL step ledger: per step, each phase's time (reconciled with the framework's own timer where it logged
one), and per role and rank how much of each phase it was busy or idle.

Busy is the union of the rank's device activity in the phase's window (in a CPU-only trace its host's top-level
ops, which are its device); idle is the rest of the window: a rollout worker idles while the trainer updates, and
the trainer while the rollout generates, in separate pools by design. A trace whose spans lie at another time
than the job's (profiled at another step, or copied from another run) is left out of the ledger and named.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from profan.analyses.rl import switches
from profan.analyses.rl.phases import phase_spans, windows
from profan.model.rank import RankData
from profan.rulepack.rl import RlRules
from profan.sources.common.intervals import union_runs
from profan.sources.rl.timers import SCHEMA as TIMER_SCHEMA


@dataclass(frozen=True)
class Ledger:
    spans: pl.DataFrame  # every phase annotation (`phases.phase_spans`) of the ranks in the ledger, with its step
    phases: pl.DataFrame  # step, phase, start_us, end_us, phase_us, timer_us, diff_pct, measured
    steps: pl.DataFrame  # step, step_us, timer_us, diff_pct
    ranks: pl.DataFrame  # step, phase, rank, role, role_rank, file, busy_of, window_us, busy_us, idle_us
    left_out: list[str]  # what was not read into the ledger, and why
    unannotated: pl.DataFrame  # the work in the unannotated phases' windows: step, phase, rank, file, event_idx
    switches: pl.DataFrame  # a colocated job's engine switches per step and rank (`switches.per_step`)


def rl_ranks(ranks: list[RankData]) -> list[RankData]:
    """The ranks of an RL job's traces that carry what the ledger reads."""
    return [rank for rank in ranks if "role" in rank.info and rank.rl_spans is not None and rank.rl_busy is not None]


def build(ranks: list[RankData], rules: RlRules, timers: pl.DataFrame) -> Ledger | None:
    """The ledger of the job's RL ranks; None when no rank's trace marks a phase."""
    spans = phase_spans(ranks, rules)
    if spans.is_empty():
        return None
    if "step" not in timers.columns:  # no timer log beside the traces
        timers = pl.DataFrame(schema=TIMER_SCHEMA)
    spans, left_out = _same_time(spans)
    busy = pl.concat([rank.rl_busy.with_columns(pl.lit(rank.rank).alias("rank")) for rank in ranks])
    busy = busy.filter(pl.col("rank").is_in(spans["rank"].unique().to_list()))
    win = windows(spans, busy, rules)
    step_of, said = _step_numbers(win, timers)
    left_out += said
    win = win.with_columns(pl.col("occurrence").replace_strict(step_of).alias("step"))
    spans = spans.with_columns(pl.col("occurrence").replace_strict(step_of, default=None).alias("step"))
    phases = _reconciled(win, timers, rules)
    per_rank = _per_rank(win, busy, spans).join(_busy_of(ranks), on="rank", how="left")
    kept = [rank for rank in ranks if rank.rank in set(spans["rank"])]
    swapped = switches.per_step(switches.spans(kept, rules), win)
    steps = _steps(phases, timers, rules)
    phases = _with_switches(phases, switches.phase_rows(swapped, timers, rules), rules)
    unannotated = _inside(win, busy, spans, rules)
    return Ledger(spans, phases, steps, per_rank, left_out, unannotated, swapped)


def _with_switches(phases: pl.DataFrame, rows: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """The phases with the engine switches after generation in each step (they run inside it)."""
    if rows.is_empty():
        return phases
    order = [phase.name for phase in rules.phases]
    order[1:1] = [switch.name for switch in rules.switches]
    none = pl.lit(None, pl.Float64)
    rows = rows.with_columns(none.alias("start_us"), none.alias("end_us"))
    rank_of = {name: index for index, name in enumerate(order)}
    both = pl.concat([phases, rows], how="diagonal_relaxed")
    return both.sort("step", pl.col("phase").replace_strict(rank_of)).select(phases.columns)


def _busy_of(ranks: list[RankData]) -> pl.DataFrame:
    """What each rank's busy time is of: its device, or its host where the trace has no device activity."""
    host = [rank.kernel_variant.startswith("Kineto trace, CPU-only") for rank in ranks]
    return pl.DataFrame(
        {"rank": [rank.rank for rank in ranks], "busy_of": ["host (CPU-only trace)" if h else "device" for h in host]},
        schema_overrides={"rank": pl.Int32},
    )


def _inside(win: pl.DataFrame, busy: pl.DataFrame, spans: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """The work inside each unannotated phase's window (the weight sync): what the trace shows of it."""
    names = [phase.name for phase in rules.phases if phase.unannotated]
    w = win.filter(pl.col("phase").is_in(names)).select("step", "phase", "start_us", "end_us")
    files = spans.select("rank", "file").unique()
    ops = busy.join(w.rename({"start_us": "_w0", "end_us": "_w1"}), how="cross").filter(
        (pl.col("start_us") >= pl.col("_w0")) & (pl.col("end_us") <= pl.col("_w1"))
    )
    return ops.join(files, on="rank").select("step", "phase", "rank", "file", "event_idx").sort("rank", "event_idx")


def _same_time(spans: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The spans of the ranks whose capture overlaps the job's in time: the ranks are grouped by overlapping
    extents, the largest group is the job; the others are left out, each named."""
    ext = spans.group_by("rank", "file", "role", "role_rank").agg(
        pl.col("start_us").min().alias("t0"), pl.col("end_us").max().alias("t1")
    )
    ext = ext.sort("t0").with_columns(
        (pl.col("t0") > pl.col("t1").cum_max().shift(1)).fill_null(True).cast(pl.Int64).cum_sum().alias("group")
    )
    sizes = (
        ext.group_by("group").agg(pl.len().alias("n"), pl.col("t0").min()).sort(["n", "t0"], descending=[True, False])
    )
    job = sizes["group"][0]
    out = ext.filter(pl.col("group") != job).sort("rank")
    said = [
        f"{row['file']} ({row['role']} rank {row['role_rank']}) was profiled at another time than the job's other "
        f"traces (its phases lie {_apart(row, ext.filter(pl.col('group') == job))} from theirs: another step, or "
        "another run): left out of the RL step ledger"
        for row in out.iter_rows(named=True)
    ]
    return spans.filter(~pl.col("rank").is_in(out["rank"].to_list())), said


def _apart(row: dict, job: pl.DataFrame) -> str:
    gap = max(row["t0"] - job["t1"].max(), job["t0"].min() - row["t1"])
    return f"{gap / 1e6:,.1f} s"


def _step_numbers(win: pl.DataFrame, timers: pl.DataFrame) -> tuple[dict[int, int], list[str]]:
    """Occurrence -> step: the timer log's steps where it has as many as the traces (verl numbers the profiled
    steps by global_profiler.steps), else 1, 2, …"""
    occ = sorted(set(win["occurrence"]))
    logged = sorted(set(timers["step"])) if not timers.is_empty() else []
    if len(logged) == len(occ):
        return dict(zip(occ, logged, strict=True)), []
    said = (
        [
            f"the timer log holds {len(logged)} step(s), the traces {len(occ)}: the steps are numbered 1..{len(occ)} "
            "and not reconciled with the timers"
        ]
        if logged
        else []
    )
    return {k: k for k in occ}, said


def _reconciled(win: pl.DataFrame, timers: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """Each phase's window time beside the framework's timer for it, and the difference in percent; the
    driver's phases (no trace holds them) from the timer alone."""
    timer_of = {phase.name: phase.timer for phase in rules.phases}
    measured = win.with_columns(
        (pl.col("end_us") - pl.col("start_us")).alias("phase_us"),
        pl.col("phase").replace_strict(timer_of).alias("timer"),
        pl.lit("trace").alias("measured"),
    )
    steps = measured.select("step").unique()
    driver = [phase for phase in rules.phases if phase.driver]
    if driver and not timers.is_empty():
        named = pl.DataFrame({"phase": [phase.name for phase in driver], "timer": [phase.timer for phase in driver]})
        rows = steps.join(named, how="cross").with_columns(
            pl.lit(None, pl.Float64).alias("start_us"),
            pl.lit(None, pl.Float64).alias("end_us"),
            pl.lit(None, pl.Float64).alias("phase_us"),
            pl.lit("timer only (the driver's, in no trace)").alias("measured"),
        )
        both = timers.join(rows.select("step", "timer"), on=["step", "timer"]).select("step", "timer")
        measured = pl.concat(
            [
                measured.drop("occurrence"),
                rows.join(both, on=["step", "timer"]).select(measured.drop("occurrence").columns),
            ]
        )
    else:
        measured = measured.drop("occurrence")
    out = measured.join(timers.select("step", "timer", "timer_us", "line"), on=["step", "timer"], how="left")
    order = {phase.name: index for index, phase in enumerate(rules.phases)}
    return (
        out.with_columns(
            ((pl.col("phase_us") - pl.col("timer_us")) / pl.col("timer_us") * 100).alias("diff_pct"),
            pl.col("phase").replace_strict(order).alias("_o"),
        )
        .sort("step", "_o")
        .drop("_o")
    )


def _steps(phases: pl.DataFrame, timers: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """Per step, its time in the traces (first phase's start to the weight sync's end) beside the step timer."""
    traced = phases.filter(pl.col("measured") == "trace")
    per = traced.group_by("step").agg((pl.col("end_us").max() - pl.col("start_us").min()).alias("step_us"))
    timer = timers.filter(pl.col("timer") == rules.step_timer).select("step", "timer_us", "line")
    out = (
        per.join(timer, on="step", how="left")
        if not timers.is_empty()
        else per.with_columns(pl.lit(None, pl.Float64).alias("timer_us"), pl.lit(None, pl.Int64).alias("line"))
    )
    return out.with_columns(
        ((pl.col("step_us") - pl.col("timer_us")) / pl.col("timer_us") * 100).alias("diff_pct")
    ).sort("step")


def _per_rank(win: pl.DataFrame, busy: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Per step, phase and rank: the window, the rank's busy time in it (its activity's union, clipped) and
    the rest, idle."""
    runs = union_runs(busy.rename({"start_us": "ts_us"}), ["rank"])
    who = spans.select("rank", "role", "role_rank", "file").unique()
    w = win.select("step", "phase", pl.col("start_us").alias("_w0"), pl.col("end_us").alias("_w1"))
    grid = who.join(w, how="cross")
    clipped = runs.join(grid.select("rank", "step", "phase", "_w0", "_w1"), on="rank").with_columns(
        (pl.min_horizontal("end_us", "_w1") - pl.max_horizontal("ts_us", "_w0")).clip(lower_bound=0).alias("_b")
    )
    per = clipped.group_by("rank", "step", "phase").agg(pl.col("_b").sum().alias("busy_us"))
    out = grid.join(per, on=["rank", "step", "phase"], how="left").with_columns(
        (pl.col("_w1") - pl.col("_w0")).alias("window_us"), pl.col("busy_us").fill_null(0.0)
    )
    return (
        out.with_columns((pl.col("window_us") - pl.col("busy_us")).alias("idle_us"))
        .drop("_w0", "_w1")
        .sort("step", "rank", "phase")
    )
