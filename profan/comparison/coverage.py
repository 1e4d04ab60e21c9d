"""What a comparison cannot hold, said instead of dropped: steps of one side with no counterpart in the other,
kernel rows outside any profiled step, paired steps with device work on one side only, and step rows on one side
only. Their work (launches, kernel time, ranks) is counted, so the warnings and the total finding say what the
comparison leaves out."""

from __future__ import annotations

import polars as pl

from profan.comparison.sides import Side, kept
from profan.model.textfmt import id_list, ms


def left_out(frame: pl.DataFrame, steps_tab: pl.DataFrame, side: Side) -> pl.DataFrame:
    """Per step of the side that the alignment paired with nothing (null: kernel rows outside any profiled step):
    kernel launches, kernel time and ranks. A step with a step row and no kernel rows is listed with 0 launches.
    The per-step comparison cannot hold these, so the report must say what they are worth."""
    work = (
        frame.filter(~kept(side))
        .group_by("step")
        .agg(
            pl.col("count").sum().cast(pl.Int64).alias("launches"),
            pl.col("time_us").sum().alias("kernel_us"),
            pl.col("rank").unique().sort().alias("ranks"),
        )
    )
    if not steps_tab.is_empty() and any(step is not None for step in side.steps):
        rows_only = (
            steps_tab.filter(~kept(side) & pl.col("step").is_not_null())
            .group_by("step")
            .agg(
                pl.lit(0, pl.Int64).alias("launches"),
                pl.lit(0.0).alias("kernel_us"),
                pl.col("rank").unique().sort().alias("ranks"),
            )
        )
        work = pl.concat([work, rows_only.join(work, on="step", how="anti")], how="vertical_relaxed")
    return work.sort("step", nulls_last=True)


def left_out_warnings(left: dict[str, pl.DataFrame], sa: Side, sb: Side) -> list[str]:
    """One warning per side and kind (steps without a counterpart; kernel rows outside any profiled step), each
    with its counts: their time is in no total and no delta, and a comparison of less than was given must say so."""
    out = []
    for side, other in ((sa, sb), (sb, sa)):
        t, o = left[side.label], left[other.label]
        paired = t.filter(pl.col("step").is_not_null())
        if paired.height:
            ids, n = paired["step"].to_list(), paired.height
            out.append(
                f"compare: step{'s' if n > 1 else ''} {id_list(ids)} of {side.label} {'have' if n > 1 else 'has'} "
                f"no counterpart in {other.label} ({n} step{'s' if n > 1 else ''}; {work_text(paired)}): "
                f"left out of the comparison"
            )
        outside = t.filter(pl.col("step").is_null())
        if outside.height:
            theirs = o.filter(pl.col("step").is_null())
            out.append(
                f"compare: {side.label} has kernels outside any profiled step ({work_text(outside)}; {other.label}: "
                f"{work_text(theirs) if theirs.height else 'none'}): they belong to no step, so the per-step "
                f"comparison leaves them out"
            )
    return out


def work_text(frame: pl.DataFrame) -> str:
    launches, us = int(frame["launches"].sum()), float(frame["kernel_us"].sum())
    ranks = sorted(set(frame["ranks"].explode().drop_nulls().to_list()))
    return (
        f"{launches:,} kernel launch{'es' if launches != 1 else ''}, {ms(us)} of kernel time, "
        f"rank{'s' if len(ranks) != 1 else ''} {id_list(ranks)}"
    )


def one_sided_pairs(frame: pl.DataFrame, kb: pl.DataFrame, sa: Side, sb: Side) -> list[str]:
    """Aligned steps with device work on one side and none on the other (a step row without kernel rows): they
    stay in the comparison, at 0 on the empty side, and the report says which they are."""
    if not any(step is not None for step in sa.steps) or not any(step is not None for step in sb.steps):
        return []
    pairs = pl.DataFrame({"a_step": sa.steps, "b_step": sb.steps}, schema={"a_step": pl.Int64, "b_step": pl.Int64})
    work = [
        pairs.join(
            k.filter(kept(side)).group_by("step").agg(pl.col("count").sum().alias(f"{p}_n")),
            left_on=f"{p}_step",
            right_on="step",
            how="left",
        )[f"{p}_n"].fill_null(0)
        for k, side, p in ((frame, sa, "a"), (kb, sb, "b"))
    ]
    pairs = pairs.with_columns(a_n=work[0], b_n=work[1]).filter((pl.col("a_n") == 0) != (pl.col("b_n") == 0))
    return [
        f"compare: step {row['a_step']}↔{row['b_step']} has device work in {'A' if row['a_n'] else 'B'} only "
        f"({int(row['a_n'] or row['b_n']):,} kernel launches; {'B' if row['a_n'] else 'A'} has the step but no kernel "
        f"rows in it): counted as 0 there"
        for row in pairs.iter_rows(named=True)
    ]


def step_rows_one_side(tot_a: pl.DataFrame, tot_b: pl.DataFrame, sa: Side, sb: Side) -> list[str]:
    """Aligned steps with a step_trace_time.csv row on one side only: the step-time comparison (an inner pairing)
    cannot hold them, so each is named with its step time, and a side without any step rows is said once."""
    if tot_a.is_empty() and tot_b.is_empty():
        return []
    if tot_a.is_empty() or tot_b.is_empty():
        has, hasnt = (sa, sb) if tot_b.is_empty() else (sb, sa)
        return [
            f"compare: only {has.label} has step_trace_time.csv rows ({hasnt.label} has none): step time is not "
            "compared, kernel time is"
        ]
    out = []
    for t, o, side, other in ((tot_a, tot_b, sa, sb), (tot_b, tot_a, sb, sa)):
        alone = t.join(o.select("pair"), on="pair", how="anti")
        out += [
            f"compare: step {row['step']} has a step_trace_time.csv row in {side.label} only "
            f"({ms(row['step_us'])}, mean "
            f"over {row['ranks']} rank(s)); {other.label} has kernel rows in its counterpart "
            f"{other.steps[row['pair']]} but no step row: that step's time is not compared"
            for row in alone.iter_rows(named=True)
        ]
    return out


def left_out_text(left: dict[str, pl.DataFrame]) -> tuple[str, dict]:
    """What the comparison leaves out, per side, for the total finding's message and metrics."""
    parts, metrics = [], {}
    for label, value in left.items():
        if value.is_empty():
            continue
        steps = value.filter(pl.col("step").is_not_null())["step"].to_list()
        metrics[label.lower()] = {
            "steps": steps,
            "outside_any_step": bool(value["step"].is_null().any()),
            "launches": int(value["launches"].sum()),
            "kernel_us": round(float(value["kernel_us"].sum()), 3),
        }
        what = [f"step{'s' if len(steps) > 1 else ''} {id_list(steps)}"] if steps else []
        what += ["kernels outside any profiled step"] if metrics[label.lower()]["outside_any_step"] else []
        parts.append(f"{label}: {' and '.join(what)} ({work_text(value)})")
    text = f" Not compared, having no counterpart: {'; '.join(parts)} (see the warnings)." if parts else ""
    return text, metrics
