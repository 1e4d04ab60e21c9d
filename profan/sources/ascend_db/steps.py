"""Steps of torch_npu's DB export: the ``STEP_TIME`` spans, the span each row starts in, and step_trace_time.csv's
split rebuilt from the tasks — Computing / Communication(Not Overlapped) / Free as the interval unions of the
compute tasks and the communication ops of each step, as the profiler's own overlap analysis computes them
(``OVERLAP_ANALYSIS`` is not in every level's DB).
"""

from __future__ import annotations

import polars as pl

from profan.sources.ascend_db.sqlite import Db, frame
from profan.sources.ascend_text import steps as ascend_steps


def step_spans(db: Db) -> pl.DataFrame:
    """STEP_TIME rows: rowid (the locator), step id, start and end in ns; empty without the table."""
    sch = {"src_line": pl.Int64, "step": pl.Int64, "s0": pl.Int64, "s1": pl.Int64}
    if not db.has("STEP_TIME", "id", "startNs", "endNs"):
        return pl.DataFrame(schema=sch)
    return frame(db.conn, "SELECT rowid, id, startNs, endNs FROM STEP_TIME ORDER BY startNs", sch)


def with_steps(rows: pl.LazyFrame, spans: pl.DataFrame, keep_index: bool = False) -> pl.LazyFrame:
    """``step``: the STEP_TIME span a row starts in (null outside every span, as kernel_details.csv leaves it);
    ``_i`` (with ``keep_index``): that span's index in time order. A binary search of each start in the sorted
    span starts and a gather of the span's id and end: the rows are never sorted nor joined (either copies every
    column of millions of rows)."""
    if spans.is_empty():
        got = rows.with_columns(pl.lit(None, pl.Int64).alias("step"), pl.lit(None, pl.Int64).alias("_i"))
        return got if keep_index else got.drop("_i")
    sp = spans.sort("s0")
    at = pl.lit(sp["s0"]).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64) - 1
    got = rows.with_columns(at.alias("_i")).with_columns(
        pl.when((pl.col("_i") >= 0) & (pl.col("start_ns") <= pl.lit(sp["s1"]).gather(pl.col("_i").clip(0))))
        .then(pl.col("_i"))
        .alias("_i")
    )
    got = got.with_columns(pl.lit(sp["step"]).gather(pl.col("_i").fill_null(0)).alias("step")).with_columns(
        pl.when(pl.col("_i").is_not_null()).then(pl.col("step")).alias("step")
    )
    return got if keep_index else got.drop("_i")


def steps_table(spans: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame, device: int | None) -> pl.DataFrame:
    """step_trace_time.csv's rows from the DB: per STEP_TIME span, the interval unions of the compute tasks and
    of the communication ops that start in it. Computing = |compute|, Communication = |comm|, Not Overlapped =
    |compute ∪ comm| − |compute|, Stage = the span from the step's first device task to its last, Free = Stage −
    |compute ∪ comm|, Preparing = the first task's start − the step's start (the profiler's own definitions;
    tests/sources/test_ascend_db.py checks them against OVERLAP_ANALYSIS and analysis.db). ``compute``/``comm``: columns
    ``s``, ``e`` (ns)."""
    if spans.is_empty():
        return pl.DataFrame(schema={**ascend_steps.SCHEMA, "step_us": pl.Float64})

    # each step's intervals shifted past the previous step's (by its index in time order): one running maximum
    # over all rows then never reaches across a step, so no per-step window is needed (it held several copies
    # of every column at once)
    base = int(spans["s0"].min())
    off = max(int(spans["s1"].max()) - base, int(pl.concat([compute["e"], comm["e"]]).max() or base) - base) + 1

    def in_steps(iv: pl.DataFrame) -> pl.LazyFrame:
        lazy = with_steps(iv.lazy().rename({"s": "start_ns"}), spans, keep_index=True).rename({"start_ns": "s"})
        shift = pl.col("_i") * off - base
        lazy = lazy.filter(pl.col("step").is_not_null()).select("step", "_i", pl.col("s") + shift, pl.col("e") + shift)
        return lazy.select("step", "_i", "s", pl.max_horizontal("s", "e").alias("e"))

    cp, cm = in_steps(compute).collect(), in_steps(comm).collect()
    both = pl.concat([cp, cm])
    ends = both.group_by("step").agg(
        (pl.col("s").min() - pl.col("_i").first() * off + base).alias("first"),
        (pl.col("e").max() - pl.col("_i").first() * off + base).alias("last"),
    )
    lanes = (
        _covered(both.lazy(), "busy")
        .join(_covered(cp.lazy(), "computing"), on="step", how="left")
        .join(_covered(cm.lazy(), "communication"), on="step", how="left")
        .join(ends.lazy(), on="step", how="left")
        .collect()
    )
    got = spans.join(lanes, on="step", how="left").sort("s0")
    zero = {c: pl.col(c).fill_null(0.0) for c in ("busy", "computing", "communication")}
    stage = ((pl.col("last") - pl.col("first")) / 1000).fill_null(0.0)
    return got.select(
        pl.col("src_line"),
        "step",
        pl.lit(device, pl.Int64).alias("device_id"),
        zero["computing"].alias("computing_us"),
        (zero["busy"] - zero["computing"]).alias("comm_not_overlapped_us"),
        (zero["communication"] - (zero["busy"] - zero["computing"])).alias("overlapped_us"),
        zero["communication"].alias("communication_us"),
        (stage - zero["busy"]).alias("free_us"),
        stage.alias("stage_us"),
        pl.lit(0.0, pl.Float64).alias("bubble_us"),
        pl.lit(None, pl.Float64).alias("comm_not_overlapped_excl_recv_us"),
        ((pl.col("first") - pl.col("s0")) / 1000).alias("preparing_us"),
    ).with_columns((pl.col("stage_us") + pl.col("bubble_us")).alias("step_us"))


def _covered(lazy: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """Per step, the µs the union of intervals ``s``..``e`` (ns) covers: in start order, each interval adds what
    it takes the running end past both its start and the end before it (steps are apart: see `steps_table`).
    One sort and a sum, where building the union's intervals would group millions of rows."""
    end = pl.col("e").cum_max()
    gain = (end - pl.max_horizontal("s", end.shift(1))).clip(lower_bound=0)
    return lazy.sort("s").with_columns(gain.alias("_g")).group_by("step").agg((pl.col("_g").sum() / 1000).alias(name))
