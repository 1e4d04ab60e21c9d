"""Cross-rank alignment: the same collective on every member rank, without trusting the ranks' clocks.

Within a step, the k-th op of a communication group is the same collective on every member rank (Ascend: the
``@<hash>`` suffix of the op key, which is ``double_hash`` of the HCCL group name; chrome traces: the process group
and its op order). Collectives end together — every member leaves when the last one has arrived and the data has
moved — so a member's *arrival lateness* is ``median(duration) - its duration``: the shortest op belongs to the
rank that arrived last. That measure needs no clock alignment between hosts; the raw start/end spreads are kept
beside it so a reader can see when clocks do agree (then the last start is the last arrival too).
"""

from __future__ import annotations

import polars as pl

from profan.model.rank import RankData
from profan.sources.ascend_text.meta import double_hash
from profan.sources.common.rowframe import stack

ALIGNED_SCHEMA = {
    "step": pl.Int64,
    "group": pl.Utf8,
    "group_name": pl.Utf8,
    "seq": pl.Int64,
    "rank": pl.Int64,
    "name": pl.Utf8,
    "start_us": pl.Float64,
    "dur_us": pl.Float64,
    "end_us": pl.Float64,
    "wait_us": pl.Float64,  # the source's own wait figure (communication.json), when it has one
    "exposed_us": pl.Float64,  # of dur_us, the time no compute ran on the rank (traces placed in time)
    "lateness_us": pl.Float64,
    "members": pl.Int64,
    "present": pl.Int64,
    "start_spread_us": pl.Float64,
    "end_spread_us": pl.Float64,
    "cid": pl.Int64,
    "file": pl.Utf8,
    "loc_kind": pl.Utf8,
    "loc": pl.Int64,
    "pointer": pl.Utf8,
    "kfile": pl.Utf8,
    "kline": pl.Int64,
}


def group_members(ranks: list[RankData]) -> dict[str, tuple[str, list[int]]]:
    """group id (``@`` hash as text) -> (framework group name, global ranks), from any rank's parallel_group_info.

    Group-local rank i of a group is ``sorted(global_ranks)[i]`` (format reference §1.2), so knowing the members
    is enough to map local indices to global ranks.
    """
    out: dict[str, tuple[str, list[int]]] = {}
    for rank in ranks:
        if rank.metadata is None:
            continue
        for group in rank.metadata.groups:
            out.setdefault(str(double_hash(group.hccl_name)), (group.group_name, sorted(group.global_ranks)))
    return out


def collective_table(ranks: list[RankData]) -> pl.DataFrame:
    """All ranks' communication ops (one row per rank and op) with a ``rank`` column."""
    have = [
        rank for rank in ranks if getattr(rank, "collectives", None) is not None and not rank.collectives.is_empty()
    ]
    if not have:
        return pl.DataFrame()
    return stack([rank.collectives for rank in have], {"rank": [rank.rank for rank in have]})


def align(ranks: list[RankData], *, kinds: tuple[str, ...] = ("collective",)) -> pl.DataFrame:
    """One row per (step, group, seq, rank) for collectives seen on at least two ranks, with arrival lateness."""
    table = collective_table(ranks)
    if table.is_empty():
        return pl.DataFrame(schema=ALIGNED_SCHEMA)
    table = table.filter(pl.col("kind").is_in(list(kinds)))
    members = group_members(ranks)
    meta = pl.DataFrame(
        {
            "group": list(members),
            "group_name": [member[0] for member in members.values()],
            "members": [len(member[1]) for member in members.values()],
        },
        schema={"group": pl.Utf8, "group_name": pl.Utf8, "members": pl.Int64},
    )
    key = ["step", "group", "seq"]
    frame = table.join(meta, on="group", how="left")
    frame = frame.with_columns(
        (pl.col("start_us") + pl.col("dur_us")).alias("end_us"),
        pl.len().over(key).cast(pl.Int64).alias("present"),
    ).filter(pl.col("present") >= 2)
    frame = frame.with_columns(
        pl.col("members").fill_null(pl.col("present")),
        (pl.col("dur_us").median().over(key) - pl.col("dur_us")).alias("lateness_us"),
        (pl.col("start_us").max().over(key) - pl.col("start_us").min().over(key)).alias("start_spread_us"),
        (pl.col("end_us").max().over(key) - pl.col("end_us").min().over(key)).alias("end_spread_us"),
    )
    return frame.select(list(ALIGNED_SCHEMA)).sort(["step", "group", "seq", "rank"], nulls_last=True)


def consistency_notes(ranks: list[RankData], aligned: pl.DataFrame) -> list[str]:
    """Say when ranks disagree on how many ops a group ran in a step, or on the op names at one position."""
    notes: list[str] = []
    table = collective_table(ranks)
    if table.is_empty() or aligned.is_empty():
        return notes
    counts = (
        table.filter(pl.col("kind") == "collective")
        .group_by("step", "group", "rank")
        .agg(pl.len().alias("n"))
        .group_by("step", "group")
        .agg(pl.col("n").n_unique().alias("variants"), pl.col("n").min().alias("lo"), pl.col("n").max().alias("hi"))
    )
    bad = counts.filter(pl.col("variants") > 1)
    if bad.height:
        ex = bad.row(0, named=True)
        notes.append(
            f"alignment: {bad.height} (step, group) pair(s) have a different op count on different ranks "
            f"(e.g. step {ex['step']}, group {ex['group']}: {ex['lo']}–{ex['hi']} ops); their k-th ops are "
            "matched by order, which may pair different collectives"
        )
    names = aligned.group_by("step", "group", "seq").agg(pl.col("name").n_unique().alias("k"))
    mixed = names.filter(pl.col("k") > 1).height
    if mixed:
        notes.append(f"alignment: {mixed} aligned collective(s) carry different op names on different ranks")
    return notes
