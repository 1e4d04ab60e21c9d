"""Communication time from communication.json: waiting vs transfer per rank and step, and source quirks."""

from __future__ import annotations

import polars as pl

from profan.evidence import cite_pointers
from profan.findings import Finding
from profan.rankmap import RankData
from profan.rulepack import RulePack
from profan.sources import ascend_matrix

LINK_TRANSPORTS = ("HCCS", "PCIE", "SIO")  # on-node links; SDMA is the copy engine's total over these


def op_bytes(bw: pl.DataFrame) -> pl.DataFrame:
    """Per rank and op: bytes moved (MB), link busy time (ms) and the transports that carried data.

    One transfer is listed under the SDMA engine *and* under the link it crossed (HCCS, PCIE or SIO), so the op's
    size is RDMA + max(SDMA, HCCS + PCIE + SIO), never the sum of all entries. Transports with no data are left out.
    """
    keys = ["rank", "step", "kind", "op"]
    size = pl.col("size_mb").fill_null(0)
    moved = bw.filter(size > 0)
    return (bw.group_by(keys).agg(
        size.filter(pl.col("transport") == "RDMA").sum().alias("_rdma"),
        size.filter(pl.col("transport") == "SDMA").sum().alias("_sdma"),
        size.filter(pl.col("transport").is_in(LINK_TRANSPORTS)).sum().alias("_links"),
        pl.col("time_ms").max().alias("bw_transit_ms"))
        .join(moved.group_by(keys).agg(pl.col("transport").filter(pl.col("transport") != "SDMA").unique()
                                       .sort().str.join("+").alias("transports")),
              on=keys, how="left", nulls_equal=True)
        .with_columns((pl.col("_rdma") + pl.max_horizontal("_sdma", "_links")).alias("size_mb"))
        .drop("_rdma", "_sdma", "_links"))


def comm_table(ranks: list[RankData]) -> pl.DataFrame:
    """Per rank and op: elapse / transit / wait / idle, bytes and link time from the bandwidth info, the group's
    framework name and global ranks (from profiler_metadata.json), and the transfer/waiting split.

    ``transfer_ms`` is the Time Info transit; where that is 0 although the bandwidth info records a transfer (a
    known torch_npu quirk) the bandwidth info's link time is used instead and ``transfer_source`` says so.
    ``waiting_ms`` = elapse − transfer: time inside the op not moving data (waiting for peers, synchronising).
    All ranks go through each query at once, keyed by rank (see `analyses.common.kernel_table`).
    """
    with_ops = [r for r in ranks if r.comm_ops is not None and not r.comm_ops.is_empty()]
    if not with_ops:
        return pl.DataFrame()
    def rank(r: RankData) -> pl.Expr:
        return pl.lit(r.rank, pl.Int64).alias("rank")

    t = pl.concat([r.comm_ops.with_columns(rank(r), pl.lit(r.files["communication"]).alias("file"))
                   for r in with_ops], how="diagonal_relaxed")
    bws = [r.comm_bw.with_columns(rank(r)) for r in with_ops if r.comm_bw is not None and not r.comm_bw.is_empty()]
    if bws:
        t = t.join(op_bytes(pl.concat(bws, how="diagonal_relaxed")), on=["rank", "step", "kind", "op"], how="left",
                   nulls_equal=True, maintain_order="left")
    else:
        t = t.with_columns(pl.lit(None, pl.Float64).alias("bw_transit_ms"),
                           pl.lit(None, pl.Float64).alias("size_mb"), pl.lit(None, pl.Utf8).alias("transports"))
    groups = ascend_matrix.rank_group_table([(r.rank, r.metadata) for r in with_ops]).select(
        "rank", "group_hash", "group_name", pl.col("group_ranks").cast(pl.List(pl.Utf8)).list.join(","))
    t = t.join(groups, on=["rank", "group_hash"], how="left", maintain_order="left")
    t = t.select(pl.exclude("rank", "file"), "rank", "file")  # the op's own columns first
    transit = pl.col("transit_ms").fill_null(0)
    bw_t = pl.col("bw_transit_ms").fill_null(0)
    quirk = (transit == 0) & (bw_t > 0)
    # ops with no transit, no bandwidth info and no wait recorded: their split is unknown, not "all waiting"
    unknown = (transit == 0) & (bw_t == 0) & (pl.col("wait_ms").fill_null(0) == 0)
    return t.with_columns(
        # bandwidth-info time sums the links, which run in parallel: never more than the op's elapse
        pl.when(quirk).then(pl.min_horizontal("bw_transit_ms", "elapse_ms")).otherwise(transit).alias("transfer_ms"),
        pl.when(quirk).then(pl.lit("bandwidth info")).when(unknown).then(pl.lit("not recorded"))
        .otherwise(pl.lit("time info")).alias("transfer_source"),
    ).with_columns(
        pl.when(unknown).then(None)
        .otherwise((pl.col("elapse_ms").fill_null(0) - pl.col("transfer_ms")).clip(lower_bound=0))
        .alias("waiting_ms"))


def transit_quirk_findings(table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("comm-transit-inconsistent")
    out: list[Finding] = []
    if table.is_empty() or "bw_transit_ms" not in table.columns:
        return out
    bad = table.filter((pl.col("transit_ms").fill_null(0) == 0) & (pl.col("bw_transit_ms").fill_null(0) > 0))
    for (rank, file), g in bad.group_by(["rank", "file"], maintain_order=True):
        bw_t = float(g["bw_transit_ms"].sum())
        out.append(Finding(
            check=chk.id, severity="info", rank=rank,
            title=f"Rank {rank}: {g.height} communication op(s) report Transit Time 0 despite a transfer",
            message=(f"Rank {rank}: {g.height} op(s) in communication.json have 'Transit Time(ms)' = 0 while their "
                     f"bandwidth info records {bw_t:,.1f} ms of transfer ({g['size_mb'].sum():,.1f} MB). The "
                     "profiler therefore counts these ops as idle; profan reads the transfer time from the "
                     "bandwidth info."),
            metrics={"ops": g.height, "bandwidth_transit_ms": round(bw_t, 3)},
            evidence=(cite_pointers(file, g["pointer"].to_list(), {"source": "communication",
                                                                   "transit_ms": 0}),)))
    return out
