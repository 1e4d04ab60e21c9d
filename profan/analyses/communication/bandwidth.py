"""Is each transfer as fast as its link allows, and which links are slow (Ascend; NCCL in `nccl`, HCCL trace lanes
in `hccl_planes`, waiting and exposed time in `comm`, all assembled by `comm_section`).

Ascend's ``communication.json`` gives, per op and transport, bytes and busy time (so a per-link copy rate:
Σ size / Σ transit time, not a bus bandwidth); ``communication_matrix.json`` gives the same per link
(source → destination rank). Priors for what a link delivers come from ``rules/hardware`` and are applied only to a
device that was detected or that the user named (``--hardware``); otherwise links are only compared with their
peers, and the report says so.

Unit note: MB / ms = 10^6 B / 10^-3 s = GB/s, so ``size_mb / time_ms`` is GB/s directly.
"""

from __future__ import annotations

import polars as pl

from profan.model.evidence import cite_pointers
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks, pct
from profan.rulepack.hardware import Hardware
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text import matrix as ascend_matrix
from profan.sources.common.rowframe import stack

PEERS_GROUP = ["step", "group_hash", "op_type", "transport"]  # a link's peers: same group, op type, transport …
PEERS_JOB = ["step", "op_type", "transport"]  # … or, for groups with too few links, across the job's groups


# ------------------------------------------------------------------------------------------------- devices


def device_table(ranks: list[RankData], hardware: Hardware) -> pl.DataFrame:
    """Per rank: the device whose priors apply (or null) and how that was decided."""
    rows = []
    for rank in ranks:
        if rank.kind not in ("ascend", "msprof"):
            continue
        dev, how = hardware.detect_ascend(rank.info.get("platform_version"))
        rows.append(
            {
                "rank": rank.rank,
                "device": dev.id if dev else None,
                "device_name": dev.name if dev else None,
                "detected_by": how,
            }
        )
    schema = {"rank": pl.Int64, "device": pl.Utf8, "device_name": pl.Utf8, "detected_by": pl.Utf8}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def prior_frame(devices: pl.DataFrame, hardware: Hardware, links: list[str]) -> pl.DataFrame:
    """(rank, transport) → usable GB/s and a label naming the prior and its source."""
    rows = []
    for rank, dev in devices.select("rank", "device").iter_rows():
        for link in links:
            p = hardware.prior(dev, link) if dev else None
            if p is not None and p.usable_gbps is not None:
                rows.append(
                    {
                        "rank": rank,
                        "transport": link,
                        "prior_gbps": p.usable_gbps,
                        "prior": f"{p.device} {p.link} {p.usable_gbps:g} GB/s ({p.file})",
                    }
                )
    schema = {"rank": pl.Int64, "transport": pl.Utf8, "prior_gbps": pl.Float64, "prior": pl.Utf8}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def device_notes(devices: pl.DataFrame) -> list[str]:
    unknown = devices.filter(pl.col("device").is_null())["rank"].to_list()
    known = devices.filter(pl.col("device").is_not_null())
    notes = []
    if unknown:
        notes.append(
            "communication: no absolute link-bandwidth prior applied on rank(s) "
            f"{fmt_ranks(unknown)}: the profile does not record the NPU model "
            "(torch_npu text exports carry no chip id), so links are only compared with their peers. "
            'Name the device with --hardware FILE ([assume] device = "ascend_910b") to hold each link '
            "against rules/hardware (e.g. 910B HCCS 28 GB/s, RDMA 25 GB/s; 910A HCCS 18 GB/s)."
        )
    for dev, g in known.group_by("device", maintain_order=True):
        notes.append(
            f"communication: link priors of {dev[0]} applied on rank(s) "
            f"{', '.join(str(r) for r in sorted(g['rank'].to_list()))} ({g['detected_by'][0]})."
        )
    return notes


# ------------------------------------------------------------------------------------- per op and transport


def transport_table(ranks: list[RankData], devices: pl.DataFrame, hardware: Hardware) -> pl.DataFrame:
    """Per rank, op and transport with data: bytes, busy time, GB/s (= size/time), and the prior it is held to.

    ``is_link`` is false for SDMA, which repeats the HCCS/PCIE/SIO entries of the same transfer (never add both).
    """
    with_bw = [rank for rank in ranks if rank.comm_bw is not None and not rank.comm_bw.is_empty()]
    if not with_bw:
        return pl.DataFrame()
    groups = ascend_matrix.rank_group_table([(rank.rank, rank.metadata) for rank in with_bw]).select(
        "rank", "group_hash", "group_name", "group_ranks"
    )
    t = (
        stack(
            [rank.comm_bw for rank in with_bw],
            {"rank": [rank.rank for rank in with_bw], "file": [rank.files["communication"] for rank in with_bw]},
        )
        .filter((pl.col("size_mb").fill_null(0) > 0) & (pl.col("time_ms").fill_null(0) > 0))
        .with_columns(
            pl.col("op").str.split("@").list.get(0).alias("op_name"),
            pl.col("op").str.split("@").list.get(1, null_on_oob=True).alias("group_hash"),
        )
        .join(groups, on=["rank", "group_hash"], how="left", maintain_order="left")
    )
    engine = default_roles().ascend_copy_engine  # the copy engine's total over the node links: no link of its own
    priors = prior_frame(devices, hardware, sorted(set(t["transport"].to_list()) - {engine}))
    t = t.join(priors, on=["rank", "transport"], how="left")
    return t.select(
        "rank",
        "step",
        "kind",
        "op",
        "op_name",
        "group_name",
        "group_ranks",
        "transport",
        (pl.col("transport") != engine).alias("is_link"),
        "size_mb",
        "time_ms",
        (pl.col("size_mb") / pl.col("time_ms")).alias("bandwidth_gbps"),
        pl.col("bandwidth_gbps").alias("reported_gbps"),
        "large_packet_ratio",
        "prior_gbps",
        (pl.col("size_mb") / pl.col("time_ms") / pl.col("prior_gbps")).alias("prior_share"),
        "prior",
        "pointer",
        "file",
    ).sort("rank", "step", "op", "transport")


def below_prior_findings(frame: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Large transfers on a link that reach less than `min_share` of the link's prior (device known only)."""
    chk = pack.check("comm-below-prior")
    out: list[Finding] = []
    if frame.is_empty():
        return out
    slow = frame.filter(
        pl.col("is_link")
        & pl.col("prior_gbps").is_not_null()
        & (pl.col("size_mb") >= chk["min_size_mb"])
        & (pl.col("prior_share") < chk["min_share"])
    )
    for (rank, transport, file), g in slow.group_by(["rank", "transport", "file"], maintain_order=True):
        g = g.sort("time_ms", descending=True)
        size, t = float(g["size_mb"].sum()), float(g["time_ms"].sum())
        bw, prior = size / t, float(g["prior_gbps"][0])
        ops = ", ".join(f"{o} {b:.1f} GB/s" for o, b in g.select("op_name", "bandwidth_gbps").head(4).iter_rows())
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=rank,
                title=f"Rank {rank}: {transport} transfers reach {pct(bw / prior)} of the link's prior",
                message=(
                    f"Rank {rank}: {g.height} transfer(s) of ≥ {chk['min_size_mb']:g} MB over {transport} moved "
                    f"{size:,.1f} MB in {t:,.2f} ms = {bw:.2f} GB/s, {pct(bw / prior)} of the prior "
                    f"{g['prior'][0]} (threshold {pct(chk['min_share'])}). Largest: {ops}."
                ),
                metrics={
                    "size_mb": round(size, 6),
                    "time_ms": round(t, 6),
                    "bandwidth_gbps": round(bw, 4),
                    "prior_gbps": prior,
                },
                evidence=(
                    cite_pointers(
                        file,
                        g["pointer"].to_list(),
                        {"source": "communication", "transport": transport, "min_size_mb": chk["min_size_mb"]},
                        values={"size_mb": round(size, 6), "time_ms": round(t, 6)},
                    ),
                ),
            )
        )
    return out


# ----------------------------------------------------------------------------------------- matrix links


# the columns of `link_table`, in order
LINK_COLUMNS = [
    "rank",
    "step",
    "kind",
    "op_type",
    "group_name",
    "group_hash",
    "src_local",
    "dst_local",
    "src_rank",
    "dst_rank",
    "transport",
    "size_mb",
    "time_ms",
    "bandwidth_gbps",
    "in_class",
    "peers",
    "peer_median_gbps",
    "peer_ratio",
    "peer_scope",
    "in_class_g",
    "size_bin",
    "shape",
    "link_row",  # the row in its rank's `comm_links`, whose matrix pointers `LinkPointers` looks up
    "file",
]


def link_table(ranks: list[RankData], pack: RulePack) -> pl.DataFrame:
    """One row per (rank, step, group, op type, src→dst, transport) from communication_matrix.json, on-chip copies
    excluded, with the median bandwidth of its peers: links of the same transport, group and op type whose size is
    within `size_ratio` of the group's median size (the same size class).

    Aggregated matrices contribute their ``-total`` entries; per-op matrices are summed per link.
    """
    chk = pack.check("comm-slow-link")
    # per-link totals, reduced in the per-rank map (ascend_matrix.link_totals)
    have = [rank for rank in ranks if rank.comm_links is not None and not rank.comm_links.is_empty()]
    if not have:
        return pl.DataFrame()
    # ranks² rows at scale: each rank's matrix pointers stay with the rank (`LinkPointers`), its file name is kept
    # once as a category
    frame = stack(
        [rank.comm_links.drop("pointers") for rank in have],
        {"rank": [rank.rank for rank in have], "file": [rank.files["communication_matrix"] for rank in have]},
    ).with_columns(
        (pl.col("size_mb") / pl.col("time_ms")).alias("bandwidth_gbps"),
        pl.col("file").cast(pl.Categorical),
        pl.int_range(pl.len(), dtype=pl.UInt32).over("rank").alias("link_row"),
    )
    ratio = float(chk["size_ratio"])

    # peers within the communication group: size within `ratio` of the group's median size
    med = pl.col("size_mb").median().over(PEERS_GROUP)
    in_g = (pl.col("size_mb") >= med / ratio) & (pl.col("size_mb") <= med * ratio)
    # a group with too few links (2-rank PP/DP groups) is compared across the job's groups instead, size class =
    # the same power-of-`ratio` bin (a job pool mixes tiny and large transfers, so its median size is no anchor)
    frame = frame.with_columns((pl.col("size_mb").log(ratio).floor()).cast(pl.Int64).alias("size_bin"))
    job = [*PEERS_JOB, "size_bin"]
    frame = frame.with_columns(
        in_g.alias("in_class_g"),
        in_g.sum().over(PEERS_GROUP).alias("peers_g"),
        pl.col("bandwidth_gbps").filter(in_g).median().over(PEERS_GROUP).alias("median_g"),
        pl.lit(True).alias("in_class_j"),
        pl.len().over(job).cast(pl.UInt32).alias("peers_j"),
        pl.col("bandwidth_gbps").median().over(job).alias("median_j"),
    )
    use_group = pl.col("peers_g") >= chk["min_peers"]
    frame = frame.with_columns(
        pl.when(use_group).then(pl.lit("group")).otherwise(pl.lit("job")).cast(pl.Categorical).alias("peer_scope"),
        pl.when(use_group).then(pl.col("in_class_g")).otherwise(pl.col("in_class_j")).alias("in_class"),
        pl.when(use_group).then(pl.col("peers_g")).otherwise(pl.col("peers_j")).alias("peers"),
        pl.when(use_group).then(pl.col("median_g")).otherwise(pl.col("median_j")).alias("peer_median_gbps"),
    ).with_columns((pl.col("bandwidth_gbps") / pl.col("peer_median_gbps")).alias("peer_ratio"))
    return frame.select(LINK_COLUMNS).sort(
        "step", "group_hash", "op_type", "transport", "rank", "src_local", "dst_local"
    )


def _pair(row: dict) -> tuple:
    """The unordered link a row belongs to: both directions of one cable are one finding."""
    if row["src_rank"] is not None and row["dst_rank"] is not None:
        return (row["transport"], None, *sorted((row["src_rank"], row["dst_rank"])))
    return (row["transport"], row["group_hash"], *sorted((row["src_local"], row["dst_local"])))


def _pair_name(key: tuple) -> str:
    _transport, group, a, b = key
    if group is None:
        return f"rank {a} ↔ rank {b}"
    return f"group-local {a} ↔ {b} of group @{group}"


class LinkPointers:
    """The matrix pointers of `link_table` rows, read from their ranks' `comm_links` only for the rows cited."""

    def __init__(self, ranks: list[RankData]) -> None:
        self.by_rank = {rank.rank: rank.comm_links["pointers"] for rank in ranks if rank.comm_links is not None}

    def of(self, rows: list[dict]) -> list[str]:
        return [p for row in rows for p in self.by_rank[row["rank"]][row["link_row"]]]


def slow_link_findings(links: pl.DataFrame, pointers: LinkPointers, pack: RulePack) -> list[Finding]:
    """One finding per slow link (both directions, all op types and steps it is slow in)."""
    chk = pack.check("comm-slow-link")
    out: list[Finding] = []
    if links.is_empty():
        return out
    slow = links.filter(
        pl.col("in_class")
        & (pl.col("peers") >= chk["min_peers"])
        & (pl.col("size_mb") >= chk["min_size_mb"])
        & (pl.col("peer_ratio") < chk["slow_ratio"])
    )
    pairs: dict[tuple, list[dict]] = {}
    for row in slow.sort("peer_ratio").iter_rows(named=True):
        pairs.setdefault(_pair(row), []).append(row)
    for key, rows in pairs.items():
        worst = rows[0]
        size, t = sum(r["size_mb"] for r in rows), sum(r["time_ms"] for r in rows)
        where = sorted({f"{r['group_name'] or 'group @' + str(r['group_hash'])} {r['op_type']}" for r in rows})
        steps_ = sorted({r["step"] for r in rows if r["step"] is not None})
        scope_group = worst["peer_scope"] == "group"
        evidence = _slow_link_evidence(key, rows, links, pointers)
        bw = size / t
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=worst["rank"],
                step=steps_[0] if len(steps_) == 1 else None,
                title=(f"Slow {key[0]} link {_pair_name(key)}: {bw:.2f} GB/s, {pct(worst['peer_ratio'])} of its peers"),
                message=(
                    f"{key[0]} link {_pair_name(key)} is slow in {len(rows)} matrix entr"
                    f"{'y' if len(rows) == 1 else 'ies'} ({', '.join(where)}; step(s) "
                    f"{', '.join(str(x) for x in steps_) or '—'}): {size:,.2f} MB in {t:,.3f} ms = {bw:.2f} GB/s. "
                    f"Worst: {worst['group_name'] or 'group @' + str(worst['group_hash'])} {worst['op_type']} ops, "
                    f"step {worst['step']}, {worst['bandwidth_gbps']:.2f} GB/s = {pct(worst['peer_ratio'])} of the "
                    f"median {worst['peer_median_gbps']:.2f} GB/s of the {worst['peers']} links of its class (same "
                    f"transport, {'group' if scope_group else 'any group (its own has too few links)'}, op type "
                    f"and size class; itself included; threshold "
                    f"{pct(chk['slow_ratio'])}). Every collective over this link waits for it: check the link's "
                    "port/cabling, or whether the two ranks share a contended path."
                ),
                metrics={
                    "bandwidth_gbps": round(bw, 4),
                    "worst_gbps": round(worst["bandwidth_gbps"], 4),
                    "peer_median_gbps": round(worst["peer_median_gbps"], 4),
                    "peers": worst["peers"],
                    "entries": len(rows),
                    "link": _pair_name(key),
                    "lost_us_per_step": _lost_us(rows, len(steps_)),
                    "link_ranks": [key[2], key[3]] if key[1] is None else [],
                },
                evidence=evidence,
            )
        )
    return out


def _lost_us(rows: list[dict], steps: int) -> float:
    """The transfer time over a slow link beyond what its peers' rate would take, per step it is slow in."""
    lost_ms = sum(row["time_ms"] * (1 - row["bandwidth_gbps"] / row["peer_median_gbps"]) for row in rows)
    return round(1000 * lost_ms / max(steps, 1), 3)


def _slow_link_evidence(key: tuple, rows: list[dict], links: pl.DataFrame, pointers: LinkPointers) -> tuple:
    """The slow link's matrix entries (per file), and the entries of the links of its class where it is slowest."""
    worst = rows[0]
    evidence = []
    for file in dict.fromkeys(row["file"] for row in rows):
        mine = [row for row in rows if row["file"] == file]
        evidence.append(
            cite_pointers(
                file,
                pointers.of(mine),
                {
                    "source": "communication_matrix",
                    "link": _pair_name(key),
                    "transport": key[0],
                    "entries": [f"{row['op_type']}@{row['group_hash']} step {row['step']}" for row in mine],
                },
                values={
                    "size_mb": round(sum(row["size_mb"] for row in mine), 6),
                    "time_ms": round(sum(row["time_ms"] for row in mine), 6),
                },
                note="the slow link",
            )
        )
    scope_group = worst["peer_scope"] == "group"
    peers = links.filter(
        pl.col("step").eq_missing(worst["step"])
        & (pl.col("op_type") == worst["op_type"])
        & (pl.col("transport") == worst["transport"])
        & (
            (pl.col("group_hash") == worst["group_hash"]) & pl.col("in_class_g")
            if scope_group
            else pl.col("size_bin") == worst["size_bin"]
        )
    )
    for (file,), g in peers.group_by(["file"], maintain_order=True):
        evidence.append(
            cite_pointers(
                file,
                pointers.of(g.select("rank", "link_row").to_dicts()),
                {
                    "source": "communication_matrix",
                    "step": worst["step"],
                    "group_hash": worst["group_hash"] if scope_group else "any",
                    "op_type": worst["op_type"],
                    "transport": worst["transport"],
                    "peers": True,
                },
                note="the links of its class where it is slowest (itself included)",
            )
        )
    return tuple(evidence)


# ----------------------------------------------------------------------------------------- small packets


def packet_table(ranks: list[RankData], pack: RulePack) -> pl.DataFrame:
    """Per rank, step and link transport: transfers under the transport's small-packet size, their time and rate,
    the rate of the large ones, and the time the small ones cost beyond moving the same bytes at the large rate."""
    chk = pack.check("comm-small-packets")
    small_mb: dict = chk["small_mb"]
    have = [rank for rank in ranks if rank.comm_packets is not None and not rank.comm_packets.is_empty()]
    if not have:
        return pl.DataFrame()
    frame = stack(
        [rank.comm_packets for rank in have],
        {"rank": [rank.rank for rank in have], "file": [rank.files["communication"] for rank in have]},
    )
    frame = frame.filter(pl.col("transport") != pack.roles.ascend_copy_engine).with_columns(
        pl.col("transport").replace_strict(small_mb, default=None, return_dtype=pl.Float64).alias("small_limit_mb")
    )
    frame = frame.with_columns(
        (pl.col("packet_mb") < pl.col("small_limit_mb")).alias("small"),
        (pl.col("packet_mb") * pl.col("count")).alias("bytes_mb"),
    )
    keys = ["rank", "step", "transport", "file"]
    t = frame.group_by(keys, maintain_order=True).agg(
        pl.col("small_limit_mb").first(),
        pl.col("count").sum().alias("transfers"),
        pl.col("count").filter(pl.col("small")).sum().alias("small_transfers"),
        pl.col("bytes_mb").filter(pl.col("small")).sum().alias("small_mb"),
        pl.col("time_ms").filter(pl.col("small")).sum().alias("small_time_ms"),
        pl.col("bytes_mb").filter(~pl.col("small")).sum().alias("large_mb"),
        pl.col("time_ms").filter(~pl.col("small")).sum().alias("large_time_ms"),
        pl.col("transport_pointer")
        .filter(pl.col("small"))
        .sort_by(pl.col("time_ms").filter(pl.col("small")), descending=True)
        .unique(maintain_order=True)
        .alias("small_pointers"),
    )
    return (
        t.with_columns(
            (pl.col("small_transfers") / pl.col("transfers")).alias("small_share"),
            (pl.col("small_mb") / pl.col("small_time_ms")).alias("small_gbps"),
            (pl.col("large_mb") / pl.col("large_time_ms")).alias("large_gbps"),
        )
        .with_columns(
            pl.when(pl.col("large_time_ms") > 0)
            .then((pl.col("small_time_ms") - pl.col("small_mb") / pl.col("large_gbps")).clip(lower_bound=0))
            .alias("lost_ms")
        )
        .sort("rank", "step", "transport")
    )


def small_packet_findings(frame: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("comm-small-packets")
    out: list[Finding] = []
    if frame.is_empty():
        return out
    hits = frame.filter(
        (pl.col("small_share") >= chk["min_share"]) & (pl.col("lost_ms").fill_null(0) >= chk["min_lost_ms"])
    )
    for row in hits.iter_rows(named=True):
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=row["rank"],
                step=row["step"],
                title=(
                    f"Rank {row['rank']}, step {row['step']}: {pct(row['small_share'])} of {row['transport']} "
                    f"transfers are under {row['small_limit_mb']:g} MB"
                ),
                message=(
                    f"Rank {row['rank']}, step {row['step']}: {row['small_transfers']} of {row['transfers']} "
                    f"{row['transport']} transfers are smaller than {row['small_limit_mb']:g} MB; they moved "
                    f"{row['small_mb']:,.3f} MB in {row['small_time_ms']:,.3f} ms ({row['small_gbps']:.2f} GB/s) "
                    f"while the large ones ran at {row['large_gbps']:.2f} GB/s — {row['lost_ms']:,.2f} ms more than "
                    "the same bytes would take at the large-transfer rate. Bucket small tensors together (larger "
                    "gradient buckets, fused collectives)."
                ),
                metrics={
                    k: row[k]
                    for k in ("transfers", "small_transfers", "small_mb", "small_time_ms", "large_gbps", "lost_ms")
                },
                evidence=(
                    cite_pointers(
                        row["file"],
                        row["small_pointers"],
                        {
                            "source": "communication",
                            "step": row["step"],
                            "transport": row["transport"],
                            "size_distribution_packet_mb_below": row["small_limit_mb"],
                        },
                        values={"small_mb": row["small_mb"], "small_time_ms": row["small_time_ms"]},
                    ),
                ),
            )
        )
    return out
