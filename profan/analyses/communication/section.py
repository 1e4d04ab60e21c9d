"""The report's communication section: link rates against priors and peers (`bandwidth`), waiting and exposed
time (`comm`), NCCL collectives (`nccl`) and HCCL plane tasks (`hccl_planes`), assembled in one analysis."""

from __future__ import annotations

import polars as pl

from profan.analyses.communication import bandwidth as bw
from profan.analyses.communication import hccl_planes, nccl
from profan.analyses.communication import op_time as comm
from profan.analyses.contract import Job, Section
from profan.rulepack.hardware import load as load_hardware


def section(job: Job) -> Section:
    """The communication tables, findings and notes of the report, from the ``communication`` table of the
    communication-ops analysis and the step table."""
    ranks, step_tab, comm_tab, pack = job.ranks, job.steps, job.table("communication"), job.pack
    hardware = job.hardware or load_hardware()
    devices = bw.device_table(ranks, hardware)
    tt = bw.transport_table(ranks, devices, hardware)
    links = bw.link_table(ranks, pack)
    if not links.is_empty():  # the absolute view next to the relative one, where the device is known
        links = links.join(
            bw.prior_frame(devices, hardware, sorted(set(links["transport"].to_list()))),
            on=["rank", "transport"],
            how="left",
        ).with_columns((pl.col("bandwidth_gbps") / pl.col("prior_gbps")).alias("prior_share"))
    packets = bw.packet_table(ranks, pack)
    exposed = comm.exposed_table(comm_tab, step_tab)
    findings = [
        *bw.below_prior_findings(tt, pack),
        *bw.slow_link_findings(links, bw.LinkPointers(ranks), pack),
        *bw.small_packet_findings(packets, pack),
        *comm.wait_dominated_findings(comm_tab, step_tab, pack),
    ]
    notes = bw.device_notes(devices) if not tt.is_empty() else []
    local_only = [
        rank.rank
        for rank in ranks
        if rank.comm_links is not None
        and not rank.comm_links.is_empty()
        and rank.comm_links["src_rank"].null_count() == rank.comm_links.height
    ]
    if local_only:
        notes.append(
            "communication: communication_matrix.json ranks are group-local where profiler_metadata.json "
            f"has no parallel_group_info (ranks {', '.join(str(x) for x in local_only)})"
        )
    unread = [rank.rank for rank in ranks if "trace_view" in rank.files and getattr(rank, "trace_links", None) is None]
    if unread:
        notes.append(
            "communication: HCCL plane tasks of trace_view.json not summarised for rank(s) "
            + ", ".join(str(x) for x in unread)
            + " (no HCCL plane lanes read); link figures come from "
            "communication.json and communication_matrix.json"
        )
    nccl_tab, nccl_found, nccl_notes = nccl.nccl_section(ranks, hardware, pack)
    notes += nccl_notes
    waited = hccl_planes.waited_peer_findings(ranks, pack)
    findings += [*nccl_found, *waited, *comm.exposed_findings(exposed, pack, {f.rank: f for f in waited})]
    hccl_links = hccl_planes.hccl_link_summary(ranks)
    tables = {
        "comm_nccl": nccl_tab,
        "comm_hccl_links": hccl_links.drop("events") if not hccl_links.is_empty() else hccl_links,
        "comm_devices": devices,
        "comm_bandwidth": tt.drop("group_ranks") if not tt.is_empty() else tt,
        "comm_links": links.drop("link_row", "in_class_g") if not links.is_empty() else links,
        "comm_packets": packets.drop("small_pointers") if not packets.is_empty() else packets,
        "comm_exposed": exposed.drop("pointers") if not exposed.is_empty() else exposed,
    }
    return Section(tables=tables, findings=findings, notes=notes)
