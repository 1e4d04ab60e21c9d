"""Each expert-parallel all-to-all op, split into waiting for the late peer and transfer, and its bandwidth held
against the link prior (table ``moe_ep_ops``).

An all-to-all cannot finish on any rank before the last rank has entered it: the time a rank spends in the op
before that is waiting, the rest is the data moving. The k-th all-to-all of a step is the same exchange on every
rank (each rank's MoE layers run them in the same order: the count exchange, the dispatch, the combine, and
their backward), so the ops are matched by their place in the step and ``waiting_us`` = the op's start on the
last-arriving rank less its start here (clipped to the op's duration), ``transfer_us`` = duration − waiting. The
starts are held against each other, so this needs the ranks' clocks to agree (one host, or synchronised hosts);
`profan.analyses.across_ranks.align` measures arrival lateness from durations for when they do not.

Bytes are the rows the rank sends × their width × the scalar type's size (``Input Dims`` / ``Input type`` of the
op's input tensor, roles ``dtype_bytes``): nccl-tests' all-to-all size S. Achieved bandwidth = S / transfer time,
so waiting does not read as a slow link. Only where the backend's own event times the op (gloo): a c10d op's
time may be its host-side launch (NCCL runs the exchange as a device kernel), so there the split and the
bandwidth stay empty. The prior is the device's scale-up link (`nccl_link_prior`), none on a
CPU capture (said in the ``link`` column).
"""

from __future__ import annotations

import polars as pl

from profan.analyses.communication.nccl import nccl_link_prior
from profan.model.rank import RankData
from profan.rulepack.hardware import Hardware
from profan.rulepack.pack import RulePack
from profan.sources.common.rowframe import stack

COLUMNS = ("rank", "step", "seq", "name", "event_idx", "start_us", "dur_us", "present", "last_rank")
COLUMNS += ("waiting_us", "transfer_us", "bytes", "gbps", "link", "prior_gbps", "prior_share")


def _numbered(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    rows = frame.filter(pl.col("kind") == kind, pl.col("step").is_not_null()).sort("rank", "step", "ts_us")
    return rows.with_columns(pl.int_range(pl.len()).over("rank", "step").cast(pl.Int64).alias("seq"))


def _ops(ranks: list[RankData]) -> pl.DataFrame:
    """Every rank's all-to-all ops in profiled steps, numbered in start order within (rank, step). The times are
    the backend's events (``run``: gloo:all_to_all, which spans the exchange) where every rank has as many as
    c10d ops, else the c10d ops'; the bytes are always the c10d ops' (their input tensor's dims)."""
    # only the ranks whose exchange the EP cost took as an MoE layer's (a DLRM's embedding all-to-alls are not)
    have = [rank for rank in ranks if rank.moe_tokens is not None and not rank.moe_tokens.is_empty()]
    have = [rank for rank in have if rank.ep_time is not None and not rank.ep_time.is_empty()]
    if not have:
        return pl.DataFrame()
    frame = stack([rank.moe_tokens for rank in have], {"rank": [rank.rank for rank in have]}, how="vertical_relaxed")
    ops, runs = _numbered(frame, "a2a"), _numbered(frame, "run")
    if ops.is_empty():
        return pl.DataFrame()
    counts = [t.group_by("rank", "step").len().sort("rank", "step") for t in (ops, runs)]
    timed = not runs.is_empty() and counts[0].equals(counts[1])
    if timed:
        sizes = ops.select("rank", "step", "seq", "rows_out", "width", "dtype")
        ops = runs.drop("rows_out", "width", "dtype").join(sizes, on=["rank", "step", "seq"], how="left")
    return ops.with_columns(pl.lit(timed).alias("timed")).with_columns(
        (pl.col("end_us") - pl.col("ts_us")).alias("dur_us"), pl.col("ts_us").alias("start_us")
    )


def _priors(ranks: list[RankData], hardware: Hardware) -> pl.DataFrame:
    """Per rank: the scale-up link its device is assumed to use and that link's usable GB/s (null: unknown)."""
    rows = []
    for rank in ranks:
        link, prior, assumed = nccl_link_prior(rank.info.get("device"), hardware)
        rows.append({"rank": rank.rank, "link": link or assumed, "prior_gbps": prior})
    schema = {"rank": pl.Int64, "link": pl.Utf8, "prior_gbps": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def ep_ops(ranks: list[RankData], pack: RulePack, hardware: Hardware) -> pl.DataFrame:
    """One row per rank and all-to-all op (`COLUMNS`): its place in the step, how many ranks ran it, the rank
    that entered it last, waiting and transfer time, bytes sent, achieved GB/s and the link prior's share."""
    ops = _ops(ranks)
    if ops.is_empty():
        return pl.DataFrame()
    key = ("step", "seq")
    sizes = pack.roles.dtype_bytes
    dtype = pl.col("dtype").str.replace(r"^c10::", "").replace_strict(sizes, default=None, return_dtype=pl.Int64)
    last = pl.col("start_us").max().over(key)
    ops = ops.with_columns(
        pl.len().over(key).cast(pl.Int64).alias("present"),
        pl.col("rank").sort_by("start_us").last().over(key).alias("last_rank"),
        (pl.col("rows_out") * pl.col("width") * dtype).cast(pl.Int64).alias("bytes"),
        pl.when((pl.len().over(key) > 1) & pl.col("timed"))
        .then((last - pl.col("start_us")).clip(0.0, pl.col("dur_us")))
        .alias("waiting_us"),
    )
    # without the backend's events the c10d op's time may be its host-side launch only: no split, no bandwidth
    transfer = pl.col("dur_us") - pl.col("waiting_us").fill_null(0.0)
    ops = ops.with_columns(pl.when(pl.col("timed")).then(transfer).alias("transfer_us"))
    ops = ops.with_columns(
        pl.when(pl.col("transfer_us") > 0).then(pl.col("bytes") / (pl.col("transfer_us") * 1e3)).alias("gbps")
    )
    ops = ops.join(_priors(ranks, hardware), on="rank", how="left")
    ops = ops.with_columns((pl.col("gbps") / pl.col("prior_gbps")).alias("prior_share"))
    return ops.select(COLUMNS).sort("rank", "step", "seq")


def wait_split(table: pl.DataFrame | None, rank: int) -> tuple[float, float] | None:
    """A rank's all-to-all time per step split into (waiting, transfer) µs, mean over its steps; None when the
    table has no cross-rank split for it."""
    if table is None or table.is_empty():
        return None
    mine = table.filter(pl.col("rank") == rank, pl.col("waiting_us").is_not_null())
    if mine.is_empty():
        return None
    steps = mine["step"].n_unique()
    return float(mine["waiting_us"].sum()) / steps, float(mine["transfer_us"].sum()) / steps
