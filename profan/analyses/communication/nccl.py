"""NCCL collective bandwidth from Kineto traces: bytes, algorithm and bus bandwidth per kernel.

Message sizes come from the kernels' args (``In msg nelems`` / ``Out msg nelems`` × dtype size); the bus factor
follows nccl-tests; the prior is the GPU's scale-up link from ``rules/hardware`` with the assumption stated (a trace
records neither NVLink nor node layout). With several ranks, a collective's time is its last arrival's duration.
"""

from __future__ import annotations

import polars as pl

from profan.model.evidence import Evidence, cite_events
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import pct
from profan.rulepack.hardware import Hardware
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.trace.kineto import SOURCE_KERNEL

# The collective kinds, their message size and bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md: busbw = algbw ×
# factor(n)) and the bytes of each dtype are the rule pack's roles ``collectives`` and ``dtype_bytes``.


def _first_match(cases: list[tuple[pl.Expr, pl.Expr]], otherwise: pl.Expr) -> pl.Expr:
    """``when(c1).then(v1).when(c2).then(v2)…otherwise(…)``: the first case that holds."""
    if not cases:
        return otherwise
    (c, v), *rest = cases
    chain = pl.when(c).then(v)
    for c, v in rest:
        chain = chain.when(c).then(v)
    return chain.otherwise(otherwise)


def collective_kind(name: pl.Expr, roles: Roles | None = None) -> pl.Expr:
    """'allreduce', 'all_reduce', '_allgather_base', 'reduce_scatter_tensor', 'all_to_all_single', 'recv' …
    → the kind of the first roles ``collectives`` entry matching its lower-cased letters (else null)."""
    n = name.cast(pl.String).str.to_lowercase().str.replace_all(r"[^a-z]", "")
    kinds = (roles or default_roles()).collectives
    return _first_match([(n.str.contains(kind.match), pl.lit(kind.kind)) for kind in kinds], pl.lit(None, pl.String))


def _bus_factor(formula: str, expr: pl.Expr) -> pl.Expr:
    """One of `roles.BUS_FACTORS` for a group of n ranks."""
    return {"2(n-1)/n": 2 * (expr - 1) / expr, "(n-1)/n": (expr - 1) / expr, "1": pl.lit(1.0)}[formula]


def nccl_bandwidth(coll: pl.DataFrame, world_size: int | None = None, roles: Roles | None = None) -> pl.DataFrame:
    """Bytes, algorithm and bus bandwidth of NCCL collectives (one row per event).

    Input columns: ``event_idx``, ``name``, ``coll_name`` (Kineto's "Collective name"), ``in_nelems``,
    ``out_nelems``, ``dtype``, ``group_size`` (or ``pg_ranks`` to count), ``dur_us``; others pass through.

    Size S follows nccl-tests: all-reduce, broadcast, reduce, send/recv move the message (nelems × dtype size);
    all-gather the **total** output (out nelems), reduce-scatter the total input (in nelems), all-to-all the total
    (in nelems already sums the split sizes). algbw = S / t; busbw = algbw × 2(n−1)/n for all-reduce,
    × (n−1)/n for all-gather, reduce-scatter and all-to-all, × 1 otherwise — comparable with a link's bandwidth.
    t is this rank's kernel duration, which includes waiting for a later peer.

    Group size n: the kernel's ``Group size``, else the count of ``Process Group Ranks``, else ``world_size``
    (``distributedInfo``; right for the default process group only).
    """
    n = pl.col("group_size").cast(pl.Float64) if "group_size" in coll.columns else pl.lit(None, pl.Float64)
    if "pg_ranks" in coll.columns:
        counted = pl.col("pg_ranks").cast(pl.String).str.extract_all(r"-?\d+").list.len().cast(pl.Float64)
        n = pl.coalesce(n, pl.when(counted > 0).then(counted))
    if world_size:
        n = pl.coalesce(n, pl.lit(float(world_size)))
    roles = roles or default_roles()
    kind = pl.col("collective")
    largest = pl.max_horizontal("in_nelems", "out_nelems")
    size = {"in": pl.col("in_nelems"), "out": pl.col("out_nelems"), "max": largest}
    elems = _first_match(
        [
            (kind == collective.kind, size[collective.nelems])
            for collective in roles.collectives
            if collective.nelems != "max"
        ],
        largest,
    ).cast(pl.Float64)
    factor = _first_match(
        [(kind == collective.kind, _bus_factor(collective.bus_factor, n)) for collective in roles.collectives],
        pl.lit(None),
    )
    frame = coll.with_columns(
        collective_kind(pl.col("coll_name"), roles).alias("collective"),
        pl.col("dtype").replace_strict(roles.dtype_bytes, default=None, return_dtype=pl.Int64).alias("dtype_bytes"),
        n.alias("ranks_in_group"),
    )
    frame = frame.with_columns((elems * pl.col("dtype_bytes")).alias("bytes"), factor.alias("bus_factor"))
    algbw = pl.col("bytes") / (pl.col("dur_us") * 1e3)  # B / (µs · 1e3) = GB/s
    return frame.with_columns(algbw.alias("algbw_gbps")).with_columns(
        (pl.col("algbw_gbps") * pl.col("bus_factor")).alias("busbw_gbps")
    )


def nccl_link_prior(device_name: str | None, hardware: Hardware) -> tuple[str | None, float | None, str]:
    """(link, usable GB/s, what was assumed) for intra-node collectives of a GPU named `device_name`."""
    dev = hardware.detect_gpu(device_name)
    if dev is None or not dev.scale_up:
        return (
            None,
            None,
            (
                f"link unknown: no prior for device {device_name!r}"
                if device_name
                else "link unknown: the trace records no deviceProperties"
            ),
        )
    p = hardware.prior(dev.id, dev.scale_up)
    if p is None or p.usable_gbps is None:
        return dev.scale_up, None, f"{dev.name}: no usable {dev.scale_up} figure in rules/hardware"
    return (
        dev.scale_up,
        p.usable_gbps,
        (
            f"{dev.id} {dev.scale_up} {p.usable_gbps:g} GB/s per GPU ({p.file}), assuming the ranks share one "
            "node connected by NVLink — the trace records neither the links nor the node layout"
        ),
    )


def nccl_findings(
    table: pl.DataFrame, hardware: Hardware, pack: RulePack, *, device_name: str | None, file: str, rank: int | None
) -> list[Finding]:
    """Per rank and collective type: bytes moved, algbw/busbw spread, and the prior they are held to (info)."""
    chk = pack.check("nccl-bandwidth")
    out: list[Finding] = []
    frame = table.filter(pl.col("busbw_gbps").is_not_null() & (pl.col("dur_us") > 0))
    if frame.is_empty():
        return out
    link, prior, assumed = nccl_link_prior(device_name, hardware)
    formula = {frame.kind: frame.bus_factor for frame in pack.roles.collectives}
    aligned = "ranks_aligned" in frame.columns and (frame["ranks_aligned"].fill_null(1) >= 2).any()
    suffix = "_transfer" if aligned else ""
    basis = ALIGNED_BASIS if aligned else SINGLE_BASIS
    for (kind,), g in frame.group_by(["collective"], maintain_order=True):
        g = g.sort(f"busbw{suffix}_gbps", descending=True)
        bus = g[f"busbw{suffix}_gbps"]
        top = g.row(0, named=True)
        judged = _against_prior(float(bus.max()), float(g["bytes"].max()), prior, assumed, chk["plateau_mb"])
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=rank,
                title=(
                    f"Rank {rank}: {g.height} NCCL {kind}(s), busbw {float(bus.min()):.2f}–{float(bus.max()):.2f} GB/s"
                ),
                message=(
                    f"Rank {rank}: {g.height} {kind} kernel(s) moved {float(g['bytes'].sum()) / 1e6:,.1f} MB "
                    f"(nelems × dtype size, group of {int(top['ranks_in_group'])}; bus factor "
                    f"{formula.get(kind, '?')} = {top['bus_factor']:g}). busbw min / median / max "
                    f"{float(bus.min()):.2f} / {float(bus.median()):.2f} / {float(bus.max()):.2f} GB/s; fastest: "
                    f"{top['bytes']:,.0f} B in {top['transfer_us' if aligned else 'dur_us']:,.3f} µs = algbw "
                    f"{top[f'algbw{suffix}_gbps']:.2f} GB/s, busbw {top[f'busbw{suffix}_gbps']:.2f} GB/s (event "
                    f"{top['event_idx']}).{judged} {basis}"
                ),
                metrics={
                    "kernels": g.height,
                    "bytes": float(g["bytes"].sum()),
                    "busbw_min_gbps": float(bus.min()),
                    "busbw_median_gbps": float(bus.median()),
                    "busbw_max_gbps": float(bus.max()),
                    "link": link,
                    "prior_gbps": prior,
                },
                evidence=(_cite_collectives(file, kind, g),),
            )
        )
    return out


ALIGNED_BASIS = "Time = the last-arriving rank's kernel duration of each collective (the others include waiting)."
SINGLE_BASIS = (
    "Kernel time includes waiting for the later peer; with every rank's trace the last arrival's duration is the "
    "transfer."
)


def _against_prior(best_gbps: float, largest_bytes: float, prior: float | None, assumed: str, plateau_mb: float) -> str:
    """The sentence that holds the best busbw to the link's prior — and says why small messages fall short of it —
    or says there is no prior to hold it to."""
    if not prior:
        return f" Not held against a link prior ({assumed})."
    return (
        f" That is {pct(best_gbps / prior)} of the prior at best ({assumed}); the largest message is "
        f"{largest_bytes / 1e6:,.1f} MB, and busbw only plateaus at ≥ {plateau_mb:g} MB, so "
        "small messages stay far below the wire rate whatever the link."
    )


def _cite_collectives(file: str, kind: str, frame: pl.DataFrame) -> Evidence:
    """Every kernel event of one collective type, with the bytes they moved."""
    return cite_events(
        file,
        frame["event_idx"].to_list(),
        frame.height,
        {"source": "kineto", "collective": kind, **_category(frame)},
        values={"bytes": float(frame["bytes"].sum())},
    )


def _category(frame: pl.DataFrame) -> dict[str, str]:
    """The trace category of the cited events, for the evidence's filter, when they share one."""
    cats = frame["cat"].drop_nulls().unique().to_list() if "cat" in frame.columns else []
    return {"cat": cats[0]} if len(cats) == 1 else {}


NCCL_COLUMNS = [
    "rank",
    "step",
    "event_idx",
    "name",
    "collective",
    "dtype",
    "in_nelems",
    "out_nelems",
    "ranks_in_group",
    "bytes",
    "dur_us",
    "algbw_gbps",
    "bus_factor",
    "busbw_gbps",
    "ranks_aligned",
    "transfer_us",
    "algbw_transfer_gbps",
    "busbw_transfer_gbps",
    "link",
    "prior_gbps",
    "prior_share",
    "assumed",
    "file",
]


def last_arrival(ranks: list[RankData]) -> pl.DataFrame:
    """(rank, event_idx) → the transfer time of its collective: the shortest duration of that collective over the
    ranks that recorded it (the last rank to arrive waits for nobody), and how many ranks were aligned.

    Uses the cross-rank alignment (k-th op of a process group in a step), so it needs no clock agreement."""
    from profan.analyses.across_ranks.align import align

    schema = {"rank": pl.Int64, "event_idx": pl.Int64, "transfer_us": pl.Float64, "ranks_aligned": pl.Int64}
    if sum(1 for rank in ranks if getattr(rank, "trace_comm", None) is not None) < 2:
        return pl.DataFrame(schema=schema)
    a = align(ranks)
    if a.is_empty():
        return pl.DataFrame(schema=schema)
    key = ["step", "group", "seq"]
    return (
        a.filter(pl.col("loc_kind") == "events")
        .with_columns(pl.col("dur_us").min().over(key).alias("transfer_us"))
        .select("rank", pl.col("loc").alias("event_idx"), "transfer_us", pl.col("present").alias("ranks_aligned"))
        .cast(schema)
    )


def nccl_section(
    ranks: list[RankData], hardware: Hardware, pack: RulePack
) -> tuple[pl.DataFrame, list[Finding], list[str]]:
    """Per Kineto rank: every NCCL kernel with message-size args → bytes, algbw, busbw, and the findings."""
    parts: list[pl.DataFrame] = []
    findings: list[Finding] = []
    no_args: list[int] = []
    transfer = last_arrival(ranks)
    for rank in ranks:
        tc = getattr(rank, "trace_comm", None)
        file = rank.files.get("kineto_trace")
        if tc is None or tc.is_empty() or file is None or "coll_name" not in tc.columns:
            continue
        frame = tc.filter(pl.col("source") == SOURCE_KERNEL) if "source" in tc.columns else tc
        if not frame.is_empty() and frame["coll_name"].null_count() == frame.height:
            no_args.append(rank.rank)
        frame = frame.filter(pl.col("coll_name").is_not_null())
        if frame.is_empty():
            continue
        t = nccl_bandwidth(frame.drop("bytes", strict=False), world_size=rank.info.get("world_size"), roles=pack.roles)
        mine = transfer.filter(pl.col("rank") == rank.rank).drop("rank")
        t = (
            t.join(mine, on="event_idx", how="left")
            if not mine.is_empty()
            else t.with_columns(
                pl.lit(None, pl.Float64).alias("transfer_us"), pl.lit(None, pl.Int64).alias("ranks_aligned")
            )
        )
        t = (
            t.with_columns(pl.col("transfer_us").fill_null(pl.col("dur_us")), pl.col("ranks_aligned").fill_null(1))
            .with_columns((pl.col("bytes") / (pl.col("transfer_us") * 1e3)).alias("algbw_transfer_gbps"))
            .with_columns((pl.col("algbw_transfer_gbps") * pl.col("bus_factor")).alias("busbw_transfer_gbps"))
        )
        device = rank.info.get("device")
        link, prior, assumed = nccl_link_prior(device, hardware)
        findings += nccl_findings(t, hardware, pack, device_name=device, file=file, rank=rank.rank)
        parts.append(
            t.with_columns(
                pl.lit(rank.rank, pl.Int64).alias("rank"),
                pl.lit(link, pl.String).alias("link"),
                pl.lit(prior, pl.Float64).alias("prior_gbps"),
                pl.lit(assumed).alias("assumed"),
                pl.lit(file).alias("file"),
                *([] if "step" in t.columns else [pl.lit(None, pl.Int64).alias("step")]),
            )
            .with_columns((pl.col("busbw_transfer_gbps") / pl.col("prior_gbps")).alias("prior_share"))
            .select(NCCL_COLUMNS)
        )
    table = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
    notes = (
        [
            f"communication: NCCL kernels of rank(s) {', '.join(map(str, no_args))} carry no message-size "
            "args (older PyTorch/Kineto), so their bytes and bandwidth cannot be computed"
        ]
        if no_args
        else []
    )
    return table, findings, notes
