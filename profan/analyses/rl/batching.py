"""How an RL step batches its model passes, from the forwards' shapes in the traces (`sources.rl.forwards`):

* the rollout's generation (``rl_generation``): per step and generating rank, its forwards, the generate passes
  they make (a pass opens with a prefill forward, whose token input holds the prompts' tokens; a decode forward
  holds one token per sequence), the sequences and the sequences per forward. Several passes on one worker are
  its prompts generated a few at a time, one batch after another.
* the log-prob passes (``rl_logprob``): per step, phase (old log-prob, reference) and the rank that runs it, its
  forwards, micro-batch (sequences per forward), sequences, and its busy and idle time in the phase's window
  (the ledger's): the host's gaps between small micro-batches and the dispatch between the two passes.

Nothing is measured where the trace recorded no shapes (the forwards' ``sequences`` are null).
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.analyses.contract import Job
from profan.model.evidence import cite_events
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.rl import RlRules

GENERATION = "generation"
LOGPROB_PHASES = ("old log-prob", "reference")


def _forwards(ranks: list[RankData]) -> pl.DataFrame:
    """Every rank's forwards with their shapes: rank, event_idx, ts_us, sequences, tokens."""
    frames = [
        rank.rl_forwards.with_columns(pl.lit(rank.rank).alias("rank"))
        for rank in ranks
        if rank.rl_forwards is not None and "sequences" in rank.rl_forwards.columns
    ]
    return pl.concat(frames) if frames else pl.DataFrame()


def _inside(spans: pl.DataFrame, forwards: pl.DataFrame) -> pl.DataFrame:
    """The shaped forwards inside each span, with the span's step, phase and rank."""
    if forwards.is_empty():
        return pl.DataFrame()
    shaped = forwards.drop_nulls("sequences").rename({"event_idx": "forward_idx"})
    joined = spans.join(shaped, on="rank")
    return joined.filter(pl.col("ts_us").is_between(pl.col("start_us"), pl.col("end_us")))


def generation(spans: pl.DataFrame, ranks: list[RankData]) -> pl.DataFrame:
    """Per step and generating rank: gen_us (its generate_sequences span), forwards, passes, sequences,
    sequences_per_forward, and the span's file and event_idx; empty where no forward's shape is known."""
    gen = spans.filter((pl.col("phase") == GENERATION) & pl.col("step").is_not_null())
    inside = _inside(gen, _forwards(ranks))
    if inside.is_empty():
        return pl.DataFrame()
    prefill = pl.col("tokens") > 1
    return (
        inside.group_by("step", "rank", "role", "role_rank", "file", "event_idx", "start_us", "end_us")
        .agg(
            pl.len().alias("forwards"),
            prefill.sum().alias("passes"),
            pl.col("sequences").filter(prefill).sum().alias("sequences"),
            pl.col("sequences").mean().alias("sequences_per_forward"),
        )
        .with_columns((pl.col("end_us") - pl.col("start_us")).alias("gen_us"))
        .drop("start_us", "end_us")
        .sort("step", "rank")
    )


def generation_gain(gen: pl.DataFrame) -> pl.DataFrame:
    """Per step: how much sooner generation would end if every worker ran its sequences in one pass at the
    per-forward time it measured (``gain_us``: the last worker's end now against the last end then), and the
    step's most passes on one worker."""
    return (
        gen.with_columns((pl.col("gen_us") / pl.col("passes").clip(lower_bound=1)).alias("_one"))
        .group_by("step")
        .agg(
            (pl.col("gen_us").max() - pl.col("_one").max()).alias("gain_us"),
            pl.col("passes").max().alias("passes"),
            pl.col("sequences_per_forward").min().alias("sequences_per_forward"),
        )
        .sort("step")
    )


def logprob(spans: pl.DataFrame, ranks: list[RankData], per_rank: pl.DataFrame, rules: RlRules) -> pl.DataFrame:
    """Per step, log-prob phase and rank that runs it: pass_us (its span), forwards, micro_batch, sequences, and
    the rank's busy_us and idle_us in the phase's window (the ledger's `ranks`); empty without shapes."""
    names = [phase.name for phase in rules.phases if phase.name in LOGPROB_PHASES]
    passes = spans.filter(pl.col("phase").is_in(names) & pl.col("step").is_not_null())
    inside = _inside(passes, _forwards(ranks))
    if inside.is_empty():
        return pl.DataFrame()
    out = (
        inside.group_by("step", "phase", "rank", "role", "role_rank", "file", "event_idx", "start_us", "end_us")
        .agg(
            pl.len().alias("forwards"),
            pl.col("sequences").mean().alias("micro_batch"),
            pl.col("sequences").sum().alias("sequences"),
        )
        .with_columns((pl.col("end_us") - pl.col("start_us")).alias("pass_us"))
        .drop("start_us", "end_us")
    )
    led = per_rank.select("step", "phase", "rank", "window_us", "busy_us", "idle_us")
    return out.join(led, on=["step", "phase", "rank"], how="left").sort("step", "rank", "phase")


def _cite(rows: pl.DataFrame, select: dict) -> list:
    """The phase annotations a batching claim rests on, per trace file."""
    return [
        cite_events(file, part["event_idx"].to_list(), part.height, select)
        for (file,), part in rows.sort("event_idx").group_by(["file"], maintain_order=True)
    ]


def generation_findings(job: Job, gen: pl.DataFrame, step_us: float) -> list[Finding]:
    """Generation in several passes of few sequences, where one pass of all of them would shorten the step by
    a large share (check rl-gen-under-batched)."""
    if gen.is_empty() or int(gen["passes"].max()) < 2:
        return []
    per = generation_gain(gen)
    gain_us = float(per["gain_us"].mean())
    level = graded(gain_us / step_us, job.pack.check("rl-gen-under-batched"))
    if level is None:
        return []
    worst = gen.sort(["passes", "gen_us"], descending=True).row(0, named=True)
    worker = f"{worst['role']} rank {worst['role_rank']}"
    return [
        Finding(
            check="rl-gen-under-batched",
            severity=level,
            title=(
                f"Generation under-batched: {worker} generates {worst['sequences']} sequences in "
                f"{worst['passes']} passes of {worst['sequences_per_forward']:.0f}"
            ),
            message=(
                f"{worker} runs {worst['forwards']} forwards in its generation, {worst['passes']} generate passes "
                f"one after another of {worst['sequences_per_forward']:.0f} sequences per forward "
                f"({worst['sequences']} sequences); in one pass of all of them the rollout would end "
                f"{ms(gain_us)} sooner per step ({pct(gain_us / step_us)} of the {ms(step_us)} step) at the "
                "time per forward measured."
            ),
            evidence=tuple(_cite(gen, {"source": "kineto_trace", "phase": GENERATION})),
            rank=int(worst["rank"]),
            metrics={
                "gain_us": gain_us,
                "step_us": step_us,
                "worker": worker,
                "passes": int(worst["passes"]),
                "forwards": int(worst["forwards"]),
                "sequences": int(worst["sequences"]),
                "sequences_per_forward": float(worst["sequences_per_forward"]),
                "steps": sorted(per["step"].to_list()),
            },
        )
    ]


def logprob_findings(job: Job, passes: pl.DataFrame, step_us: float) -> list[Finding]:
    """The old and reference log-prob passes run separately over the same sequences in small micro-batches,
    where their idle (the host's gaps between micro-batches, the dispatch between the passes) is a large share
    of the step (check rl-logprob-unfused)."""
    chk = job.pack.check("rl-logprob-unfused")
    if passes.is_empty() or passes["phase"].n_unique() < len(LOGPROB_PHASES):
        return []
    small = float(passes["micro_batch"].min())
    if small > chk.params["small_micro_batch"]:
        return []
    per = passes.group_by("step").agg(pl.col("idle_us").sum())
    gain_us = float(per["idle_us"].mean())
    level = graded(gain_us / step_us, chk)
    if level is None:
        return []
    phase_ms = passes.group_by("phase").agg(pl.col("pass_us").mean(), pl.col("forwards").max())
    said = "; ".join(f"{p} {ms(u)} in {n} forwards" for p, u, n in phase_ms.sort("phase").iter_rows())
    return [
        Finding(
            check="rl-logprob-unfused",
            severity=level,
            title=(
                f"Log-prob passes batched small: micro-batches of {small:.0f} sequences, {ms(gain_us)} idle per "
                "step in the old and reference passes"
            ),
            message=(
                f"The old log-prob and reference passes run one after the other over the same "
                f"{int(passes['sequences'].max())} sequences in micro-batches of {small:.0f} ({said}); the rank "
                f"running them idles {ms(gain_us)} per step in their windows ({pct(gain_us / step_us)} of the "
                f"{ms(step_us)} step): gaps between micro-batches and the dispatch between the passes."
            ),
            evidence=tuple(_cite(passes, {"source": "kineto_trace", "phase": "old log-prob, reference"})),
            rank=int(passes["rank"][0]),
            metrics={
                "gain_us": gain_us,
                "step_us": step_us,
                "micro_batch": small,
                "sequences": int(passes["sequences"].max()),
                "forwards": int(passes["forwards"].sum() / passes["step"].n_unique()),
                "steps": sorted(per["step"].to_list()),
            },
        )
    ]
