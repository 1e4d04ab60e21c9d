"""Causes in the collectives: a slow link, a peer the collectives wait for, waits for ranks no cause names, and
exposed transfer that overlapping would hide."""

from __future__ import annotations

import statistics
from dataclasses import replace

import polars as pl

from profan.analyses.contract import Job
from profan.diagnosis.claims import SYMPTOMS, Claims, Grounds, Wording, explainable, make_cause, span
from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.textfmt import fmt_ranks


def slow_link(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A link much slower than its peers. Gain: the time its transfers take beyond what its peers' rate would
    take, per step (`analyses.communication.bandwidth`) — if nothing else holds those collectives."""
    check = "comm-slow-link"
    out = []
    for f in claims.unclaimed(check):
        m = f.metrics
        ranks = m["link_ranks"] or list(f.ranks)
        values = {
            "link": m["link"],
            "bandwidth_gbps": m["bandwidth_gbps"],
            "peer_median_gbps": m["peer_median_gbps"],
            "lost_ms": m["lost_us_per_step"] / 1000,
        }
        claims.own([f])
        explained = claims.take(explainable(job, check) - {check}, ranks=ranks)
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(
                    sources=[f], steps_us=steps_us, explained=explained, impact_us=m["lost_us_per_step"], ranks=ranks
                ),
            )
        )
    return out


def waited_peer(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """A peer the collectives of several ranks wait for (HCCL Notify_Wait), named even when it is not in the
    capture. Gain: the wait towards it that every waiting rank shares, per step."""
    check = "comm-waited-peer"
    by_peer: dict[int, list[Finding]] = {}
    for f in claims.unclaimed(check):
        by_peer.setdefault(int(f.metrics["peer"]), []).append(f)
    captured = {rank.rank for rank in job.ranks}
    out = []
    for peer, found in by_peer.items():
        waiting = sorted({rank for f in found for rank in f.ranks})
        per_step = [float(f.metrics["wait_us"]) / max(len(steps_us), 1) for f in found]
        values = {
            "peer": peer,
            "ranks": fmt_ranks(waiting),
            "who": f"Rank {waiting[0]} waits" if len(waiting) == 1 else f"Ranks {fmt_ranks(waiting)} wait",
            "first_rank": waiting[0] if waiting else peer,
            "wait": span([w / 1000 for w in per_step], "{:,.1f}") + " ms",
            "min_wait_ms": min(per_step) / 1000,
            "outside": "" if peer in captured else f" (peer {peer} is not in this capture)",
        }
        claims.own(found)
        explained = claims.take(explainable(job, check) - {check}, ranks=waiting)
        out.append(
            make_cause(
                job,
                check,
                values,
                Grounds(
                    sources=found,
                    steps_us=steps_us,
                    explained=explained,
                    impact_us=min(per_step),
                    ranks=[peer],
                    steps=steps_us,
                ),
            )
        )
    return out


def late_peers(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Collectives that wait rather than transfer, where no cause names whom for (no straggler among the captured
    ranks, no Notify_Wait peer): the ranks they wait for are outside the capture, unrecorded, or take turns. No
    estimate: the least waiting rank's wait is an upper bound — how much of the late ranks' time is removable is
    not in the capture (on the Qwen3 sample, the stage-0 ranks alone wait 316 ms a step, where the whole job shows
    85 ms of removable stage imbalance)."""
    check = "comm-wait-dominated"
    found = claims.unclaimed(check)
    if not found:
        return []
    waits: dict[int, float] = {}
    for f in found:
        for rank in f.ranks:
            waits[rank] = waits.get(rank, 0.0) + float(f.metrics["waiting_ms"])
    per_step = {rank: value / max(len(steps_us), 1) for rank, value in waits.items()}
    captured = {rank.rank for rank in job.ranks}
    peer_lists = [f.metrics.get("peers") for f in found]
    peers = {p for peer_list in peer_lists if peer_list is not None for p in peer_list}
    late = sorted((peers & captured) - set(waits))
    outside = sorted(peers - captured)
    # no group names a peer (each holds the rank alone): whom they wait for is as unknown as unrecorded
    case = "unknown" if None in peer_lists or not peers else "outside" if outside else "late" if late else "mutual"
    worst = max(found, key=lambda f: float(f.metrics["waiting_ms"]))
    values = {
        "ranks": fmt_ranks(sorted(waits)),
        "n_ranks": len(waits),
        "wait": span(list(per_step.values()), "{:,.1f}") + " ms",
        "min_wait_ms": min(per_step.values()),
        "ops": "; ".join(worst.metrics.get("largest") or []),
        "outside": fmt_ranks(outside),
        "late": fmt_ranks(late),
        "first_rank": min(waits),
        "second_rank": sorted(waits)[1] if len(waits) > 1 else min(waits),
        "late_rank": late[0] if late else min(waits),
        "captured": len(captured),
    }
    claims.own(found)
    # the waiting ranks' exposed communication that is mostly waiting is this waiting, not transfer to overlap
    explained = claims.take(
        ["comm-exposed-split"], ranks=sorted(waits), where=lambda f: bool(f.metrics.get("mostly_waiting"))
    )
    cause = make_cause(
        job,
        check,
        values,
        Grounds(
            sources=found, steps_us=steps_us, explained=explained, bound_us=values["min_wait_ms"] * 1000, ranks=late
        ),
        Wording(case=case),
    )
    return [cause]


TRANSFERS_NAMED = 4  # the largest transfers the exposed-transfer cause's action names


def _largest_transfers(job: Job, least: Finding, unhidden: list[str]) -> str:
    """The largest transfers of the least exposed rank's step (table communication), as a sentence: which
    collectives, of which group, to overlap first (not those of the ``unhidden`` groups, which no overlap
    reaches). "" where the table does not give them."""
    comm = job.tables.get("communication")
    if comm is None or comm.is_empty() or least.rank is None or "transfer_ms" not in comm.columns:
        return ""
    rows = comm.filter(
        (pl.col("rank") == least.rank)
        & pl.col("step").eq_missing(least.step)
        & ~pl.col("group_name").is_in(unhidden).fill_null(False)
    )
    rows = rows.filter(pl.col("transfer_ms") > 0).sort("transfer_ms", descending=True).head(TRANSFERS_NAMED)
    if rows.is_empty():
        return ""
    named = [
        f"{str(row['op']).split('@')[0]}"
        + (f" (group {row['group_name']})" if row.get("group_name") else "")
        + f" {row['transfer_ms']:,.1f} ms"
        for row in rows.iter_rows(named=True)
    ]
    where = f"rank {least.rank}" + (f", step {least.step}" if least.step is not None else "")
    return f" The largest transfers ({where}): {'; '.join(named)}."


def _unhidden_transfer(job: Job, steps: list[int], groups: list[str]) -> pl.DataFrame:
    """Per rank and step, the transfer of the collectives of ``groups`` (``fixed_ms``), which no overlap setting
    hides, and which of those groups they are in (``groups``)."""
    comm = job.tables.get("communication")
    empty = pl.DataFrame(
        schema={
            "rank": pl.Int64,
            "step": pl.Int64,
            "fixed_ms": pl.Float64,
            "groups": pl.List(pl.String),
        }
    )
    if comm is None or comm.is_empty() or not {"group_name", "transfer_ms"} <= set(comm.columns):
        return empty
    rows = comm.filter(pl.col("step").is_in(steps) & pl.col("group_name").is_in(groups) & (pl.col("transfer_ms") > 0))
    if rows.is_empty():
        return empty
    return rows.group_by("rank", "step").agg(
        pl.col("transfer_ms").sum().alias("fixed_ms"), pl.col("group_name").unique().sort().alias("groups")
    )


def _unhidden_note(job: Job, check: str, fixed: pl.DataFrame) -> str:
    """The cause's note on the transfer left out of its gain (`_unhidden_transfer`), "" where there is none."""
    if fixed.is_empty():
        return ""
    groups = sorted({g for gs in fixed["groups"] for g in gs})
    return (
        job.pack.check(check)
        .cause["unhidden_note"]
        .format(
            unhidden_ms=span(list(fixed["fixed_ms"]), "{:,.1f}") + " ms",
            unhidden_groups=", ".join(groups),
        )
    )


def exposed_transfer(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Exposed communication that is transfer, not waiting. Gain: the least exposed transfer of any rank in those
    steps — what overlapping would give every rank at least.

    A finding a waiting cause explained (a late stage or rank) still holds its transfer, which making no rank
    wait removes nothing of: where that transfer alone is at least the check's ``min_share`` of the step, this
    cause stands too. It cites such findings but leaves them under their cause (the waiting is what they say)."""
    check = "comm-exposed-split"
    # a finding whose ops record no transfer/wait split claims no transfer to overlap: it stays a symptom
    found = [finding for finding in claims.unclaimed(check) if finding.metrics.get("split_recorded", True)]
    share = job.pack.check(check)["min_share"]
    held = [
        finding
        for finding in claims.findings
        if finding.check == check
        and finding.key in claims.taken
        and finding.severity in SYMPTOMS
        and finding.metrics.get("split_recorded", True)
        and finding.metrics["transfer_ms"] * 1000 >= share * finding.metrics["step_us"]
    ]
    if not found and not held:
        return []
    cited = [*found, *held]
    steps = sorted({step for finding in cited for step in finding.steps})
    unhidden = list(job.pack.check(check)["unhidden_groups"])
    exposed = job.tables.get("comm_exposed")
    transfer = [finding.metrics["transfer_ms"] for finding in cited]
    fixed = _unhidden_transfer(job, steps, unhidden)
    if exposed is not None and not exposed.is_empty():
        per_rank = exposed.filter(pl.col("step").is_in(steps)).join(fixed, on=["rank", "step"], how="left")
        hideable = (pl.col("transfer_ms") - pl.col("fixed_ms").fill_null(0.0)).clip(0.0)
        per_step = per_rank.group_by("step").agg(hideable.min().alias("transfer_ms"))
        floor_ms = float(per_step["transfer_ms"].mean()) if not per_step.is_empty() else min(transfer)
    else:
        floor_ms = min(transfer)
    values = {
        "min_transfer_ms": floor_ms,
        "transfer": span(transfer, "{:,.1f}") + " ms",
        "n_ranks": len({rank for finding in cited for rank in finding.ranks}),
        "largest": _largest_transfers(job, min(cited, key=lambda finding: finding.metrics["transfer_ms"]), unhidden),
        "unhidden": _unhidden_note(job, check, fixed),
    }
    claims.own(found)
    explained = claims.take(explainable(job, check) - {check}, steps=steps) if found else []
    each = [
        f"rank {finding.rank}, step {finding.step}: {finding.metrics['transfer_ms']:,.1f} ms" for finding in cited[:4]
    ]
    more = f"; and {len(cited) - 4} more" if len(cited) > 4 else ""
    message = f"Transfer inside the exposed communication (communication.json): {'; '.join(each)}{more}."
    cause = make_cause(
        job,
        check,
        values,
        Grounds(sources=cited, steps_us=steps_us, explained=explained, impact_us=floor_ms * 1000),
        Wording(message=message),
    )
    kept = {finding.key for finding in held}
    return [replace(cause, explains_keys=tuple(key for key in cause.explains_keys if key not in kept))]


def unsplit_exposed(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Exposed communication no other cause explains, on ranks whose capture holds no communication.json (Level0):
    nothing splits it into transfer and waiting, so the next step is a capture that does. No estimate."""
    check = "exposed-communication"
    bare = {rank.rank for rank in job.ranks if rank.kind == "ascend" and "communication" not in rank.files}
    found = [f for f in claims.unclaimed(check) if f.rank in bare]
    if not found:
        return []
    per_rank: dict[int, list[float]] = {}
    for f in found:
        per_rank.setdefault(f.rank, []).append(float(f.metrics["comm_not_overlapped_us"]))
    exposed = [statistics.fmean(v) / 1000 for v in per_rank.values()]
    values = {
        "shares": span([float(f.metrics["share"]) for f in found], "{:.1%}"),
        "n_ranks": len(per_rank),
        "min_exposed_ms": min(exposed),
        "exposed": span(exposed, "{:,.1f}") + " ms",
        "ranks": fmt_ranks(sorted(per_rank)),
    }
    claims.own(found)
    bound = values["min_exposed_ms"] * 1000
    return [make_cause(job, check, values, Grounds(sources=found, steps_us=steps_us, bound_us=bound))]


def overlappable(job: Job, claims: Claims, steps_us: dict[int, float]) -> list[Cause]:
    """Gradient reductions every rank waits on alone (`analyses.across_ranks.overlappable`). Gain: per step, the
    time every rank is exposed in them (each aligned reduction's least exposed rank's time, summed), bounded by
    the least computing rank's compute of the step; the median over the steps."""
    check = "comm-overlappable"
    found = claims.unclaimed(check)
    table = job.tables.get("comm_overlappable")
    if not found or table is None or table.is_empty():
        return []
    gain_us = float(table["overlappable_us"].median())
    bound_steps = table.filter(pl.col("compute_bound"))["step"].to_list()
    note = job.pack.check(check).cause["bound_note"].format(bound_steps=len(bound_steps)) if bound_steps else ""
    names = sorted({name for f in found for name in f.metrics["names"]})
    ranks = sorted({rank for ranks in table["ranks"] for rank in ranks})
    values = {
        "overlappable_ms": gain_us / 1000,
        "overlappable": f"{gain_us / 1000:,.1f} ms",
        "per_step": span([value / 1000 for value in table["overlappable_us"]], "{:,.1f}") + " ms",
        "steps": ", ".join(str(step) for step in table["step"]),
        "compute_ms": float(table["compute_us"].median()) / 1000,
        "n_ranks": len(ranks),
        "ranks": fmt_ranks(ranks),
        "reductions": ", ".join(names),
        "bound_note": note,
    }
    claims.own(found)
    steps = table["step"].to_list()
    explained = claims.take(explainable(job, check) - {check}, steps=steps, ranks=ranks)
    grounds = Grounds(
        sources=found, steps_us=steps_us, explained=explained, impact_us=gain_us, ranks=ranks, steps=steps
    )
    return [make_cause(job, check, values, grounds)]
