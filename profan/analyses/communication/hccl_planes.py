"""HCCL plane tasks of Ascend ``trace_view.json``: data moved per link type, and the peer a rank's Notify_Waits
were for (the rank its collectives waited on — named even when that rank is not in the capture)."""

from __future__ import annotations

import polars as pl

from profan.model.evidence import cite_events
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import defaults as default_roles


def hccl_link_summary(ranks: list[RankData]) -> pl.DataFrame:
    """Per rank and link type: HCCL plane data tasks (Memcpy, Reduce_Inline…) from trace_view.json — planes,
    tasks, bytes, busy time and GB/s — from the per-plane table the trace_view reader keeps (``trace_links``)."""
    parts = []
    for rank in ranks:
        tl = getattr(rank, "trace_links", None)
        if tl is None or tl.is_empty() or "trace_view" not in rank.files:
            continue
        not_links = [*default_roles().ascend_not_links, "", "N/A"]  # on-chip copies, waits, none recorded
        frame = tl.filter(~pl.col("link_type").fill_null("").is_in(not_links) & (pl.col("bytes").fill_null(0) > 0))
        if frame.is_empty():
            continue
        parts.append(
            frame.group_by("link_type", "transport_type", maintain_order=True)
            .agg(
                pl.col("plane").n_unique().alias("planes"),
                pl.col("tasks").sum(),
                pl.col("bytes").sum(),
                pl.col("time_us").sum(),
                pl.col("top_events").list.explode(keep_nulls=False, empty_as_null=False).alias("events"),
            )
            .with_columns(
                (pl.col("bytes") / pl.col("time_us") / 1e3).alias("bandwidth_gbps"),
                pl.lit(rank.rank, pl.Int64).alias("rank"),
                pl.lit(rank.files["trace_view"]).alias("file"),
            )
        )
    return pl.concat(parts, how="diagonal_relaxed").sort("rank", "link_type") if parts else pl.DataFrame()


def hccl_wait_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Notify_Wait time per plane and peer (``dst rank``, group-local) from HCCL plane task events.

    Input: one row per plane task with ``event_idx``, ``plane``, ``task_type`` (or the event ``name``), ``dst_rank``,
    ``dur_us``. A long Notify_Wait towards one peer is this rank waiting for that peer's signal: the late peer."""
    kind = pl.coalesce(pl.col("task_type"), pl.col("name")) if "task_type" in tasks.columns else pl.col("name")
    frame = tasks.filter(kind == "Notify_Wait")
    if frame.is_empty():
        return pl.DataFrame()
    # tasks of the database export name no process: they are on the HCCL one (roles ascend_comm_processes)
    process = (
        pl.col("process").first() if "process" in frame.columns else pl.lit(default_roles().ascend_comm_processes[0])
    )
    return (
        frame.group_by("dst_rank")
        .agg(
            pl.len().alias("waits"),
            pl.col("dur_us").sum().alias("wait_us"),
            process.alias("process"),
            pl.col("plane").unique().sort().alias("planes"),
            pl.col("event_idx").sort_by("dur_us", descending=True).alias("events"),
        )
        .with_columns((pl.col("wait_us") / pl.col("wait_us").sum()).alias("share"))
        .sort("wait_us", descending=True)
    )


def waited_peer_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    """Per rank: the peer its HCCL Notify_Waits were mostly for (from trace_view plane tasks, ``trace_tasks``)."""
    chk = pack.check("comm-waited-peer")
    out: list[Finding] = []
    captured = sorted(rank.rank for rank in ranks)
    for rank in ranks:
        tasks = getattr(rank, "trace_tasks", None)
        source = "trace_view" if "trace_view" in rank.files else "hccl_tasks"  # trace_view.json, or the DB's table
        if tasks is None or tasks.is_empty() or source not in rank.files:
            continue
        # a task whose args name no peer (cut or rewritten args) waits for nobody this finding could name
        frame = hccl_wait_table(tasks)
        if frame.is_empty() or (frame := frame.filter(pl.col("dst_rank").is_not_null())).is_empty():
            continue
        top = frame.row(0, named=True)
        if top["wait_us"] < chk["min_wait_ms"] * 1000 or top["share"] < chk["min_share"]:
            continue
        peer = top["dst_rank"]
        note = (
            f"; if this group is the world group (indices = global ranks), rank {peer} is not in this capture "
            f"(ranks {', '.join(str(x) for x in captured)})"
            if peer not in captured
            else ""
        )
        out.append(
            Finding(
                check=chk.id,
                severity=chk.severity,
                rank=rank.rank,
                title=f"Rank {rank.rank} waits {ms(top['wait_us'])} in HCCL Notify_Wait for peer {peer}",
                message=(
                    f"Rank {rank.rank}: {top['waits']} Notify_Wait task(s) towards peer {peer} (group-local index in "
                    f"the HCCL task args; {', '.join(top['planes'])}) last {ms(top['wait_us'])}, "
                    f"{pct(top['share'])} of all its Notify_Wait time{note}. The collective was waiting for that "
                    "peer's signal: look at what peer did before the collective (straggler analysis)."
                ),
                metrics={"peer": peer, "wait_us": round(top["wait_us"], 3), "share": round(top["share"], 4)},
                evidence=(
                    cite_events(
                        rank.files[source],
                        top["events"],
                        top["waits"],
                        {"source": source, "process": top["process"], "task": "Notify_Wait", "dst_rank": peer},
                        values={"wait_us": round(top["wait_us"], 3)},
                    ),
                ),
            )
        )
    return out
