"""The two sides of a comparison: each side's ranks read with the same per-rank map as ``analyze``, its kernel
groups and step rows, and the steps of A paired with the steps of B — by step number, else by order (two runs
profiled at different steps). Per side, everything is a per-step, per-rank average, so sides with different step
or rank counts compare fairly; a side's file paths are relative to the folder that holds both sides."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.analyses.common import kernel_table
from profan.model.errors import ProfanInputError
from profan.model.rank import RankData
from profan.ranks.executor import Executor
from profan.ranks.rankmap import load_ranks
from profan.rulepack.pack import RulePack
from profan.sources.ascend_text.meta import double_hash
from profan.sources.discovery.discover import Discovery, base_dir, discover


@dataclass
class Side:
    label: str  # "A" | "B"
    path: Path
    prefix: str  # the side's data root relative to the common root ('' when equal)
    ranks: list[RankData]
    steps: list = field(default_factory=list)  # aligned step ids of this side
    disc: Discovery | None = None  # what discovery found of the side (its diagnosis reads it)

    def file(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @property
    def desc(self) -> str:
        rk = ", ".join(str(rank.rank) for rank in self.ranks)
        return f"{self.path} (rank{'s' if len(self.ranks) != 1 else ''} {rk})"


def load_side(
    path: Path, pack: RulePack, only: list[int] | None, say, jobs: int | Executor | None = None
) -> tuple[Path, list[RankData], Discovery]:
    disc = discover(path)
    ranks = disc.ranks
    if only is not None:
        ranks = [rs for rs in ranks if rs.rank in only]
        missing = sorted(set(only) - {rs.rank for rs in ranks})
        if missing:
            raise ProfanInputError(
                path,
                f"no rank {', '.join(map(str, missing))} here "
                f"(ranks: {', '.join(str(rank.rank) for rank in disc.ranks)})",
            )
    say(f"reading {len(ranks)} rank(s) of {path}")
    return base_dir(disc.root), load_ranks(ranks, disc.root, pack, jobs, say), disc


def common_root(path: Path, b: Path) -> Path:
    return Path(os.path.commonpath([str(path.resolve()), str(b.resolve())]))


def side_prefix(side_root: Path, common: Path) -> str:
    rel = side_root.resolve().relative_to(common).as_posix()
    return "" if rel == "." else rel


def side_kernels(side: Side, pack: RulePack) -> pl.DataFrame:
    """Kernel groups of every rank of the side, with file, locator kind and the aligned step index. ``kname``: the
    name without an HCCL op's per-group sequence number (roles ``hccl_op_sequence``): the same collective in
    another step or run has another number, so kernels are matched on the name without it."""

    def where(r: RankData) -> dict[str, str]:
        kfile = getattr(r, "kernel_file", "kernel_details")
        return {
            "file": side.file(r.files[kfile]),
            "loc_kind": "events" if getattr(r, "kernel_locator", "lines") == "events" else "lines",
        }

    kname = pl.col("name").str.replace(pack.roles.hccl_op_sequence, "$1").alias("kname")
    k = kernel_table(
        side.ranks,
        ["step", "op", "name", kname, "input_shapes", "bucket", "count", "time_us", "lines", "line_durs"],
        per_rank=where,
    )
    return pl.DataFrame() if k is None else _named_groups(k, side, pack)


def _named_groups(frame: pl.DataFrame, side: Side, pack: RulePack) -> pl.DataFrame:
    """``kname`` of an HCCL op with its group's framework name (``hcom_reduceScatter__dp_cp``) in place of the
    number that ends its group's hash (``__097``): two ranks of one job are in different groups of the same kind
    (each pipeline stage its own data-parallel group), whose hashes differ, and their reduce-scatter is the same
    collective. The number stays where no parallel_group_info names it, or two groups of a rank end alike."""
    rows = [
        (rank.rank, str(double_hash(group.hccl_name))[-3:], group.group_name)
        for rank in side.ranks
        if rank.metadata is not None
        for group in rank.metadata.groups
        if group.group_name
    ]
    if not rows:
        return frame
    names = pl.DataFrame(rows, schema={"rank": pl.Int64, "_n": pl.String, "_g": pl.String}, orient="row")
    names = names.filter(pl.len().over("rank", "_n") == 1)
    hccl = pl.col("name").str.contains(pack.roles.hccl_op_sequence)  # the HCCL ops (roles hccl_op_sequence)
    number = pl.when(hccl).then(pl.col("kname").str.extract(r"__(\d+)$", 1)).alias("_n")
    frame = frame.with_columns(number).join(names, on=["rank", "_n"], how="left", maintain_order="left")
    named = pl.col("kname").str.replace(r"__\d+$", "__") + pl.col("_g")
    return frame.with_columns(pl.when(pl.col("_g").is_not_null()).then(named).otherwise("kname").alias("kname")).drop(
        "_n", "_g"
    )


def step_ids(frame: pl.DataFrame, steps_tab: pl.DataFrame) -> list:
    """Every step a side profiled (its kernel rows' steps and its step rows'), sorted; [None] without any."""
    vals = set()
    for f in (frame, steps_tab):
        if not f.is_empty() and "step" in f.columns:
            vals |= set(f["step"].unique().to_list())
    real = sorted(val for val in vals if val is not None)
    return real or [None]


def align_steps(ka: pl.DataFrame, kb: pl.DataFrame, sa: pl.DataFrame, sb: pl.DataFrame) -> tuple[list, list, str]:
    a, b = step_ids(ka, sa), step_ids(kb, sb)
    common = [x for x in a if x in b]
    if common:
        return common, common, "by step number"
    n = min(len(a), len(b))
    return a[:n], b[:n], "by order (the two sides profiled different step numbers)"


def kept(side: Side) -> pl.Expr:
    """Rows inside the side's aligned steps. A side without step numbers keeps every row; a row without a step
    (outside any profiled step) is kept only there, never counted as an aligned step's."""
    real = [step for step in side.steps if step is not None]
    return pl.col("step").is_in(real).fill_null(False) if real else pl.lit(True)


def step_totals(side: Side, steps_tab: pl.DataFrame) -> pl.DataFrame:
    """Per aligned step (index), mean over ranks of the step split, with the step rows as locators."""
    if steps_tab.is_empty():
        return pl.DataFrame()
    idx = {step: index for index, step in enumerate(side.steps)}
    frame = steps_tab.filter(kept(side))
    if frame.is_empty():
        return pl.DataFrame()
    frame = frame.with_columns(
        pl.col("step").replace_strict(idx, default=None, return_dtype=pl.Int64).alias("pair"),
        ((pl.lit(f"{side.prefix}/") + pl.col("file")) if side.prefix else pl.col("file")).alias("file"),
    )
    mid = pl.len() // 2  # the median rank's row is the one cited; the values are means over ranks
    return (
        frame.group_by("pair")
        .agg(
            pl.col("step").first(),
            pl.col("step_us").mean(),
            pl.col("computing_us").mean(),
            pl.col("comm_not_overlapped_us").mean(),
            pl.col("free_us").mean(),
            pl.col("file").sort_by("step_us").get(mid),
            pl.col("src_line").sort_by("step_us").get(mid),
            pl.col("rank").sort_by("step_us").get(mid).alias("cited_rank"),
            pl.col("step_us").sort_by("step_us").get(mid).alias("cited_step_us"),
            pl.len().alias("ranks"),
        )
        .sort("pair")
    )
