"""B beside A per key — the bucket, or the kernel (op, name without its HCCL sequence number, shapes): time and
launches per step and rank on each side, the largest rows of the side's busiest rank to cite, the delta, and
whether the key runs on both sides, only in B (``new``) or only in A (``missing``). A kernel whose shapes differ
between the sides is one ``shape changed`` row. The report's ``compare_*`` tables are cut from these."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import top_lines_frame
from profan.comparison.sides import Side, kept
from profan.model.evidence import MAX_CITED

KEY = ["op", "kname", "input_shapes"]


def per_key(frame: pl.DataFrame, side: Side, keys: list[str]) -> pl.DataFrame:
    """Per key: time and launches per step and rank (averaged), and the largest rows of the largest rank."""
    steps_n = max(1, len(side.steps))
    ranks_n = max(1, len(side.ranks))
    frame = frame.filter(kept(side))
    if frame.is_empty():
        return pl.DataFrame()
    tot = frame.group_by(keys).agg(
        *(
            [pl.col("name").sort_by(["time_us", "name"], descending=[True, False]).first()]
            if "name" not in keys and "kname" in keys
            else []
        ),
        (pl.col("time_us").sum() / (steps_n * ranks_n)).alias("time_us"),
        (pl.col("count").sum() / (steps_n * ranks_n)).alias("count"),
        pl.col("count").sum().alias("rows"),
    )
    per_rank = frame.group_by([*keys, "rank", "file", "loc_kind"]).agg(pl.col("time_us").sum().alias("_t"))
    top = (
        per_rank.sort(["_t", "rank"], descending=[True, False])  # ties: the lower rank, every run
        .group_by(keys, maintain_order=True)
        .first()
    )
    locs = top_lines_frame(
        frame.join(top.select(*keys, "rank"), on=[*keys, "rank"], how="semi", nulls_equal=True), keys, MAX_CITED
    ).rename({"lines": "locs"})
    return tot.join(top.select(*keys, "rank", "file", "loc_kind"), on=keys, how="left", nulls_equal=True).join(
        locs, on=keys, how="left", nulls_equal=True
    )


def step_spread(frames: tuple[pl.DataFrame, pl.DataFrame], sides: tuple[Side, Side], key: str) -> dict[str, float]:
    """Per value of ``key``: the standard deviation over a side's aligned steps of its time per step (mean over
    ranks), the larger of the two sides': how much it moves from one step to the next of one run. A side of one
    step has no spread."""
    out: dict[str, float] = {}
    for frame, side in zip(frames, sides, strict=True):
        rows = frame.filter(kept(side) & pl.col("step").is_not_null())
        if rows.is_empty():
            continue
        per_step = rows.group_by(key, "step").agg((pl.col("time_us").sum() / max(1, len(side.ranks))).alias("_t"))
        for value, sd in per_step.group_by(key).agg(pl.col("_t").std().fill_null(0.0)).iter_rows():
            out[value] = max(out.get(value, 0.0), sd)
    return out


def pair(frame: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    if frame.is_empty() and b.is_empty():
        return pl.DataFrame()
    cols = ["time_us", "count", "rows", "rank", "file", "loc_kind", "locs", "name"]
    cols = [col for col in cols if (frame.is_empty() or col in frame.columns) and (b.is_empty() or col in b.columns)]
    frame = frame.rename({col: f"a_{col}" for col in cols}) if not frame.is_empty() else None
    b = b.rename({col: f"b_{col}" for col in cols}) if not b.is_empty() else None
    if frame is None or b is None:  # one order for the same input: later rankings keep it for equal deltas
        return (frame if frame is not None else b).sort(keys, nulls_last=True)
    j = frame.join(b, on=keys, how="full", coalesce=True, nulls_equal=True).sort(keys, nulls_last=True)
    j = j.with_columns(
        pl.col("a_time_us").fill_null(0.0),
        pl.col("b_time_us").fill_null(0.0),
        pl.col("a_count").fill_null(0.0),
        pl.col("b_count").fill_null(0.0),
    )
    status = (
        pl.when(pl.col("a_rows").is_null())
        .then(pl.lit("new"))
        .when(pl.col("b_rows").is_null())
        .then(pl.lit("missing"))
        .otherwise(pl.lit("both"))
    )
    j = j.with_columns((pl.col("b_time_us") - pl.col("a_time_us")).alias("delta_us"), status.alias("status"))
    if "a_name" in j.columns:
        j = j.with_columns(pl.coalesce("b_name", "a_name").alias("name")).drop("a_name", "b_name")
    return j


def fold_shapes(kernels: pl.DataFrame, frame: pl.DataFrame, kb: pl.DataFrame, sa: Side, sb: Side) -> pl.DataFrame:
    """Kernels whose name runs on both sides but whose shapes differ are compared by name ('shape changed')
    instead of being listed as new on one side and missing on the other (e.g. GroupedMatmul token counts).

    Only a name with shapes on A alone *and* shapes on B alone is folded: a shape that one side adds to shapes
    both run (or one renamed row that leaves its name's other shapes on both sides) has no counterpart, so it
    stays new or missing — flagged ``same_name_other_shape`` for the message."""
    if "status" not in kernels.columns:
        return kernels.with_columns(pl.lit(False).alias("same_name_other_shape"))
    two = ["op", "kname", "bucket"]
    on_a = pl.col("a_rows").is_not_null().any().over(two)
    on_b = pl.col("b_rows").is_not_null().any().over(two)
    kernels = kernels.with_columns(((pl.col("status") != "both") & on_a & on_b).alias("same_name_other_shape"))
    one_side = pl.col("same_name_other_shape")
    moved = kernels.filter(
        one_side
        & (one_side & (pl.col("status") == "missing")).any().over(two)
        & (one_side & (pl.col("status") == "new")).any().over(two)
    )
    if moved.is_empty():
        return kernels
    keys = [*KEY, "bucket"]
    fa = per_key(
        frame.join(moved.filter(pl.col("status") == "missing").select(keys), on=keys, how="semi", nulls_equal=True),
        sa,
        two,
    )
    fb = per_key(
        kb.join(moved.filter(pl.col("status") == "new").select(keys), on=keys, how="semi", nulls_equal=True), sb, two
    )
    shapes = moved.group_by(two).agg(
        *(pl.col("input_shapes").filter(pl.col("status") == st).sort().first().alias(st) for st in ("missing", "new"))
    )
    folded = (
        pair(fa, fb, two)
        .join(shapes, on=two, how="left", nulls_equal=True)
        .with_columns(
            (pl.lit("A: ") + pl.col("missing").fill_null("?") + pl.lit(" | B: ") + pl.col("new").fill_null("?")).alias(
                "input_shapes"
            ),
            pl.lit("shape changed").alias("status"),
            pl.lit(True).alias("same_name_other_shape"),
        )
    )
    folded = folded.drop("missing", "new")
    return pl.concat(
        [kernels.join(moved.select(keys), on=keys, how="anti", nulls_equal=True), folded], how="diagonal_relaxed"
    )


def shown(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    if frame.is_empty() or "delta_us" not in frame.columns:
        return pl.DataFrame()
    cols = [
        *keys,
        "status",
        "a_time_us",
        "b_time_us",
        "delta_us",
        "a_count",
        "b_count",
        "a_rank",
        "a_file",
        "a_locs",
        "b_rank",
        "b_file",
        "b_locs",
    ]
    return (
        frame.select([col for col in cols if col in frame.columns])
        .with_columns(pl.col("a_locs").list.head(5), pl.col("b_locs").list.head(5))
        .sort(pl.col("delta_us").abs(), descending=True, maintain_order=True)
    )


def pair_steps(frame: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    if frame.is_empty() or b.is_empty():
        return pl.DataFrame()
    cols = [
        "step",
        "step_us",
        "computing_us",
        "comm_not_overlapped_us",
        "free_us",
        "file",
        "src_line",
        "cited_rank",
        "cited_step_us",
        "ranks",
    ]
    j = frame.rename({col: f"a_{col}" for col in cols}).join(
        b.rename({col: f"b_{col}" for col in cols}), on="pair", how="inner"
    )
    return j.with_columns(
        (pl.col("b_step_us") - pl.col("a_step_us")).alias("delta_us"),
        (pl.col("b_computing_us") - pl.col("a_computing_us")).alias("delta_computing_us"),
        (pl.col("b_free_us") - pl.col("a_free_us")).alias("delta_free_us"),
    )
