"""Communication time from communication.json: per op, per rank and step, waiting vs transfer and how much of it
is exposed, and source quirks."""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.model.evidence import cite_lines, cite_pointers
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text import matrix as ascend_matrix
from profan.sources.common.rowframe import stack


def op_bytes(frame: pl.DataFrame) -> pl.DataFrame:
    """Per rank and op: bytes moved (MB), link busy time (ms) and the transports that carried data.

    One transfer is listed under the SDMA engine *and* under the link it crossed (HCCS, PCIE or SIO), so the op's
    size is RDMA + max(SDMA, HCCS + PCIE + SIO), never the sum of all entries (roles ``ascend_network_link``,
    ``ascend_copy_engine``, ``ascend_node_links``). Transports with no data are left out.
    """
    roles = default_roles()
    keys = ["rank", "step", "kind", "op"]
    size, t = pl.col("size_mb").fill_null(0), pl.col("transport")
    moved = t.filter((size > 0) & (t != roles.ascend_copy_engine))
    return (
        frame.group_by(keys)
        .agg(
            size.filter(t == roles.ascend_network_link).sum().alias("_rdma"),
            size.filter(t == roles.ascend_copy_engine).sum().alias("_sdma"),
            size.filter(t.is_in(roles.ascend_node_links)).sum().alias("_links"),
            pl.col("time_ms").max().alias("bw_transit_ms"),
            # null where nothing moved; "" where only the engine did (its links carry the names)
            pl.when((size > 0).any()).then(moved.unique().sort().str.join("+")).alias("transports"),
        )
        .with_columns((pl.col("_rdma") + pl.max_horizontal("_sdma", "_links")).alias("size_mb"))
        .drop("_rdma", "_sdma", "_links")
    )


def comm_table(ranks: list[RankData]) -> pl.DataFrame:
    """Per rank and op: elapse / transit / wait / idle, bytes and link time from the bandwidth info, the group's
    framework name and global ranks (from profiler_metadata.json), and the transfer/waiting split.

    ``transfer_ms`` is the Time Info transit; where that is 0 although the bandwidth info records a transfer (a
    known torch_npu quirk) the bandwidth info's link time is used instead and ``transfer_source`` says so.
    ``waiting_ms`` = elapse − transfer: time inside the op not moving data (waiting for peers, synchronising).
    All ranks go through each query at once, keyed by rank (see `analyses.common.kernel_table`).
    """
    with_ops = [with_op for with_op in ranks if with_op.comm_ops is not None and not with_op.comm_ops.is_empty()]
    if not with_ops:
        return pl.DataFrame()
    frame = stack(
        [with_op.comm_ops for with_op in with_ops],
        {
            "rank": [with_op.rank for with_op in with_ops],
            "file": [with_op.files["communication"] for with_op in with_ops],
        },
    )
    with_bw = [with_op for with_op in with_ops if with_op.comm_bw is not None and not with_op.comm_bw.is_empty()]
    if with_bw:
        bws = stack([with_op.comm_bw for with_op in with_bw], {"rank": [with_op.rank for with_op in with_bw]})
        frame = frame.join(
            op_bytes(bws), on=["rank", "step", "kind", "op"], how="left", nulls_equal=True, maintain_order="left"
        )
    else:
        frame = frame.with_columns(
            pl.lit(None, pl.Float64).alias("bw_transit_ms"),
            pl.lit(None, pl.Float64).alias("size_mb"),
            pl.lit(None, pl.Utf8).alias("transports"),
        )
    groups = ascend_matrix.rank_group_table([(with_op.rank, with_op.metadata) for with_op in with_ops]).select(
        "rank", "group_hash", "group_name", pl.col("group_ranks").cast(pl.List(pl.Utf8)).list.join(",")
    )
    frame = frame.join(groups, on=["rank", "group_hash"], how="left", maintain_order="left")
    frame = frame.select(pl.exclude("rank", "file"), "rank", "file")  # the op's own columns first
    transit = pl.col("transit_ms").fill_null(0)
    bw_t = pl.col("bw_transit_ms").fill_null(0)
    quirk = (transit == 0) & (bw_t > 0)
    # ops with no transit, no bandwidth info and no wait recorded: their split is unknown, not "all waiting"
    unknown = (transit == 0) & (bw_t == 0) & (pl.col("wait_ms").fill_null(0) == 0)
    return frame.with_columns(
        # bandwidth-info time sums the links, which run in parallel: never more than the op's elapse
        pl.when(quirk).then(pl.min_horizontal("bw_transit_ms", "elapse_ms")).otherwise(transit).alias("transfer_ms"),
        pl.when(quirk)
        .then(pl.lit("bandwidth info"))
        .when(unknown)
        .then(pl.lit("not recorded"))
        .otherwise(pl.lit("time info"))
        .alias("transfer_source"),
    ).with_columns(
        pl.when(unknown)
        .then(None)
        .otherwise((pl.col("elapse_ms").fill_null(0) - pl.col("transfer_ms")).clip(lower_bound=0))
        .alias("waiting_ms")
    )


def transit_quirk_findings(table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    chk = pack.check("comm-transit-inconsistent")
    out: list[Finding] = []
    if table.is_empty() or "bw_transit_ms" not in table.columns:
        return out
    bad = table.filter((pl.col("transit_ms").fill_null(0) == 0) & (pl.col("bw_transit_ms").fill_null(0) > 0))
    for (rank, file), g in bad.group_by(["rank", "file"], maintain_order=True):
        bw_t = float(g["bw_transit_ms"].sum())
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=rank,
                title=f"Rank {rank}: {g.height} communication op(s) report Transit Time 0 despite a transfer",
                message=(
                    f"Rank {rank}: {g.height} op(s) in communication.json have 'Transit Time(ms)' = 0 while their "
                    f"bandwidth info records {bw_t:,.1f} ms of transfer ({g['size_mb'].sum():,.1f} MB). The "
                    "profiler therefore counts these ops as idle; profan reads the transfer time from the "
                    "bandwidth info."
                ),
                metrics={"ops": g.height, "bandwidth_transit_ms": round(bw_t, 3)},
                evidence=(cite_pointers(file, g["pointer"].to_list(), {"source": "communication", "transit_ms": 0}),),
            )
        )
    return out


# ------------------------------------------------------------------------------ waiting and exposed time

STRAGGLER_CHECKS = "straggler, pipeline-stage-imbalance, compute-imbalance"  # where a late peer is named


def _peers(group_ranks: str | None, rank: int) -> str:
    if not group_ranks:
        return "peers unknown (no parallel_group_info)"
    others = [x for x in group_ranks.split(",") if x != str(rank)]
    return "peer rank(s) " + ", ".join(others) if others else "no peer"


def _group_peers(group_ranks: pl.Series | None, rank: int) -> list[int] | None:
    """The global ranks the ops of one rank synchronise with (their groups' ranks but its own), or None when an
    op's group is not recorded (no parallel_group_info): whom the rank may have waited for."""
    if group_ranks is None or group_ranks.is_null().any() or (group_ranks == "").any():
        return None
    return sorted({int(x) for ranks in group_ranks for x in ranks.split(",") if x.strip().isdigit()} - {rank})


def _step_times(steps: pl.DataFrame) -> dict[tuple, float | None]:
    """(rank, step) -> the step time of the first step_trace row of that step."""
    step_times: dict[tuple, float | None] = {}
    if not steps.is_empty():
        for rank, step, us in steps.select("rank", "step", "step_us").iter_rows():
            step_times.setdefault((rank, step), us)
    return step_times


def _waiting_ops(ops: pl.DataFrame, rank: int) -> list[str]:
    """One phrase per op a finding names: its group and peers (whom it may have waited for) and its time split."""
    items = []
    for row in ops.iter_rows(named=True):
        grp = row.get("group_name") or "group ?"
        peers = _peers(row.get("group_ranks"), rank)
        items.append(
            f"{row['op_name']} ({grp}, {peers}): {row['elapse_ms']:,.2f} ms, "
            f"transfer {row['transfer_ms']:,.2f} ({row['transfer_source']}), not transferring "
            f"{row['waiting_ms']:,.2f} (profiler Wait Time {(row['wait_ms'] or 0):,.2f})"
        )
    return items


def wait_dominated_findings(comm: pl.DataFrame, steps: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Collectives whose time inside the op is mostly not transfer: a peer arrived late."""
    chk = pack.check("comm-wait-dominated")
    out: list[Finding] = []
    if comm.is_empty() or "waiting_ms" not in comm.columns:
        return out
    hits = comm.filter(
        (pl.col("elapse_ms") >= chk["min_elapse_ms"])
        & pl.col("waiting_ms").is_not_null()
        & (pl.col("waiting_ms") >= chk["wait_ratio"] * pl.col("transfer_ms"))
    )
    step_times = _step_times(steps)
    for (rank, step, file), g in hits.group_by(["rank", "step", "file"], maintain_order=True):
        g = g.sort("waiting_ms", descending=True)
        waiting, elapse = float(g["waiting_ms"].sum()), float(g["elapse_ms"].sum())
        us = step_times.get((rank, step))
        step_us = float(us) if us else None
        share = waiting * 1000 / step_us if step_us else None
        sev = (graded(share, chk) if share is not None else None) or chk.severity
        items = _waiting_ops(g.head(4), rank)
        out.append(
            Finding(
                check=chk.id,
                severity=sev,
                rank=rank,
                step=step,
                title=(
                    f"Rank {rank}, step {step}: {g.height} collective(s) spend {waiting:,.1f} ms waiting, not "
                    "transferring"
                ),
                message=(
                    f"Rank {rank}, step {step}: in {g.height} op(s) the time not spent transferring is ≥ "
                    f"{chk['wait_ratio']:g}× the transfer: {waiting:,.1f} of {elapse:,.1f} ms"
                    f"{f' ({pct(share)} of the step)' if share is not None else ''}. "
                    + "; ".join(items)
                    + f". The link is not the bottleneck: a peer arrives late — see the straggler findings "
                    f"({STRAGGLER_CHECKS})."
                ),
                metrics={
                    "waiting_ms": round(waiting, 6),
                    "elapse_ms": round(elapse, 6),
                    "ops": g.height,
                    "peers": _group_peers(g["group_ranks"] if "group_ranks" in g.columns else None, rank),
                    "largest": [f"{n} {w:,.1f} ms" for n, w in g.head(3).select("op_name", "waiting_ms").iter_rows()],
                },
                evidence=(
                    cite_pointers(
                        file,
                        g["pointer"].to_list(),
                        {"source": "communication", "step": step, "wait_dominated": True},
                        values={"waiting_ms": round(waiting, 6), "elapse_ms": round(elapse, 6)},
                    ),
                ),
            )
        )
    return out


def exposed_table(comm: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: exposed communication (step_trace) and what the comm ops' time is made of."""
    if comm.is_empty() or steps.is_empty() or "waiting_ms" not in comm.columns:
        return pl.DataFrame()
    ops = comm.group_by(["rank", "step"], maintain_order=True).agg(
        pl.len().alias("ops"),
        pl.col("elapse_ms").sum(),
        pl.col("transfer_ms").sum(),
        pl.col("wait_ms").fill_null(0).sum(),
        pl.col("idle_ms").fill_null(0).sum(),
        pl.col("waiting_ms").fill_null(0).sum(),
        pl.col("file").first().alias("comm_file"),
        pl.col("elapse_ms").filter(pl.col("waiting_ms").is_null()).sum().alias("unrecorded_ms"),
        (pl.col("transfer_source") == "bandwidth info").sum().alias("ops_transfer_from_bandwidth_info"),
        pl.col("pointer").sort_by("elapse_ms", descending=True).alias("pointers"),
    )
    st = steps.select(
        "rank", "step", "step_us", "comm_not_overlapped_us", "src_line", pl.col("file").alias("step_file")
    )
    t = st.join(ops, on=["rank", "step"], how="inner", nulls_equal=True)
    return t.with_columns(
        (pl.col("comm_not_overlapped_us") / pl.col("step_us")).alias("exposed_share"),
        (pl.col("waiting_ms") / pl.col("elapse_ms")).alias("waiting_share_of_comm"),
    ).sort("rank", "step")


def exposed_findings(frame: pl.DataFrame, pack: RulePack, waited: dict[int, Finding] | None = None) -> list[Finding]:
    """`waited`: per rank, its comm-waited-peer finding (named in the message when the time is waiting)."""
    chk = pack.check("comm-exposed-split")
    level = pack.check("exposed-communication")  # this finding supersedes the plain one: its thresholds grade it
    out: list[Finding] = []
    if frame.is_empty():
        return out
    for row in frame.filter(pl.col("exposed_share") >= chk["min_share"]).iter_rows(named=True):
        waiting_dominates = (row["waiting_share_of_comm"] or 0) >= chk["waiting_share"]
        sev = graded(row["exposed_share"], level) or chk.severity
        peer = (waited or {}).get(row["rank"]) if waiting_dominates else None
        out.append(_exposed_finding(row, chk, sev, waiting_dominates, peer))
    return out


def _unsplit(row: dict) -> bool:
    """Most of the exposed communication's ops record neither transfer nor wait: no split to judge by."""
    return (row["unrecorded_ms"] or 0) > row["transfer_ms"] + row["waiting_ms"]


def _exposed_finding(row: dict, chk, sev: str, waiting_dominates: bool, peer: Finding | None) -> Finding:
    """One rank and step's exposed communication (a row of `exposed_table`), split into transfer and waiting, with
    the verdict the split supports; ``peer``: the rank's comm-waited-peer finding, named and cited when given."""
    if _unsplit(row):  # e.g. ops read from the DB's COMMUNICATION_OP, which records only their elapsed time
        short = "not split into transfer and waiting"
        verdict = (
            "most of it is in ops that record neither transfer nor wait, so whether overlap or a late peer "
            "would help cannot be told from them"
        )
    elif waiting_dominates:
        short = verdict = "mostly waiting for peers, not transfer"
    else:
        short = "mostly transfer"
        verdict = "mostly transfer: faster links, fewer bytes or more overlap would help"
    if peer is not None:
        verdict += (
            f" (HCCL Notify_Wait in trace_view.json: {ms(peer.metrics['wait_us'])} waiting for peer "
            f"{peer.metrics['peer']})"
        )
    fallback = (
        f" ({row['ops_transfer_from_bandwidth_info']} op(s) report Transit Time 0; their transfer is "
        "read from the bandwidth info)"
        if row["ops_transfer_from_bandwidth_info"]
        else ""
    )
    exposed = row["comm_not_overlapped_us"]
    unknown = (
        f"; {row['unrecorded_ms']:,.2f} ms in ops that record neither transfer nor wait" if row["unrecorded_ms"] else ""
    )
    return Finding(
        check=chk.id,
        severity=sev,
        rank=row["rank"],
        step=row["step"],
        title=(
            f"Rank {row['rank']}, step {row['step']}: {pct(row['exposed_share'])} of the step is exposed "
            f"communication, {short}"
        ),
        message=(
            f"Rank {row['rank']}, step {row['step']}: communication not overlapped with compute is "
            f"{ms(exposed)} of the {ms(row['step_us'])} step ({pct(row['exposed_share'])}). Inside its "
            f"{row['ops']} communication ops ({row['elapse_ms']:,.2f} ms elapsed): transfer "
            f"{row['transfer_ms']:,.2f} ms{fallback}; not moving data {row['waiting_ms']:,.2f} ms "
            f"({pct(row['waiting_share_of_comm'])}: profiler Wait Time {row['wait_ms']:,.2f} ms, the rest "
            f"idle{unknown}; profiler Idle Time {row['idle_ms']:,.2f} ms) — {verdict}."
        ),
        metrics={
            "comm_not_overlapped_us": exposed,
            "step_us": row["step_us"],
            "exposed_share": round(row["exposed_share"], 6),
            **{k: round(row[k], 6) for k in ("elapse_ms", "transfer_ms", "wait_ms", "idle_ms", "waiting_ms")},
            "mostly_waiting": waiting_dominates and not _unsplit(row),
            **({"unrecorded_ms": round(row["unrecorded_ms"], 6), "split_recorded": False} if _unsplit(row) else {}),
        },
        evidence=_exposed_evidence(row, peer),
    )


def _exposed_evidence(row: dict, peer: Finding | None) -> tuple:
    """The step_trace row with the exposed time, the step's communication ops, and the peer wait if named."""
    return (
        cite_lines(
            row["step_file"],
            [row["src_line"]],
            1,
            {"source": "step_trace_time", "step": row["step"]},
            values={"Communication(Not Overlapped)": row["comm_not_overlapped_us"], "step_us": row["step_us"]},
        ),
        cite_pointers(
            row["comm_file"],
            row["pointers"],
            {"source": "communication", "step": row["step"]},
            values={
                "elapse_ms": round(row["elapse_ms"], 6),
                "wait_ms": round(row["wait_ms"], 6),
                "idle_ms": round(row["idle_ms"], 6),
            },
        ),
        *(peer.evidence if peer is not None else ()),
    )
