"""Step time split from chrome traces: device idle and exposed communication on GPU ranks, and the cross-check of
Ascend ``trace_view.json`` Overlap Analysis lanes against ``step_trace_time.csv``.

GPU (Kineto) ranks have no step_trace_time.csv; their split is computed from the device lanes by interval union
(``sources.trace.kineto_rank.device_split``) and judged with the same checks and thresholds as the Ascend file's.
"""

from __future__ import annotations

import functools

import polars as pl

from profan.analyses.across_ranks import imbalance
from profan.analyses.common import graded
from profan.analyses.contract import Job, Section
from profan.analyses.per_rank.steps import LANES, Share, graded_share_findings, share_finding, split_text
from profan.model.evidence import cite_events, cite_lines
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import ms, pct
from profan.rulepack.classify import UNCLASSIFIED
from profan.rulepack.pack import Check, RulePack
from profan.rulepack.roles import Roles
from profan.sources.common.rowframe import stack


def _trace_file(r: RankData) -> str | None:
    return r.files.get("kineto_trace") or r.files.get("trace_view")


def trace_step_table(ranks: list[RankData]) -> pl.DataFrame:
    parts = []
    for rank in ranks:
        if rank.trace_steps is None or rank.trace_steps.is_empty():
            continue
        t = rank.trace_steps
        if "source" not in t.columns:
            t = t.with_columns(pl.lit("device_lanes").alias("source"))
        parts.append(t.with_columns(pl.lit(rank.rank, pl.Int64).alias("rank"), pl.lit(_trace_file(rank)).alias("file")))
    if not parts:
        return pl.DataFrame()
    frame = pl.concat(parts, how="diagonal_relaxed")
    first = ["rank", "source", "scope", "step", "step_us", "computing_us", "comm_not_overlapped_us", "free_us"]
    return frame.select(*first, *[column for column in frame.columns if column not in first]).sort(
        "rank", "scope", "step", nulls_last=True
    )


BLOCK_COLUMNS = ["rank", "step", "source", "part", "start_us", "end_us", "compute_us", "comm_us", "idle_us", "pieces"]


def block_table(ranks: list[RankData]) -> pl.DataFrame:
    """Every rank's step blocks in time (`sources.common.intervals`), one table: what the report's timeline draws.
    Bounded per rank and step by the map, so it stays small however many kernels a step runs; the file a block
    was read from is the rank's file its ``source`` names (`intervals.SOURCE_FILES`), not repeated on every row."""
    have = [rank for rank in ranks if rank.step_blocks is not None and not rank.step_blocks.is_empty()]
    if not have:
        return pl.DataFrame()
    frame = stack([rank.step_blocks for rank in have], {"rank": [rank.rank for rank in have]})
    return frame.select(BLOCK_COLUMNS).sort("rank", "step", "start_us", nulls_last=True)


def device_share_findings(table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Device idle and exposed communication per step of Kineto ranks (whole trace when it has no ProfilerStep),
    worded for the device the trace measured: GPU, or CPU for a CPU-only trace."""
    if table.is_empty():
        return []
    rows: list[dict] = []
    for _, g in table.filter(pl.col("source") == "device_lanes").group_by(["rank"], maintain_order=True):
        spans = g.filter(pl.col("scope") == "step")
        rows += (spans if not spans.is_empty() else g.filter(pl.col("scope") == "trace")).iter_rows(named=True)
    return graded_share_findings(rows, pack, functools.partial(_device_share, pack.roles))


def _device(row: dict) -> str:
    return row.get("device") or "GPU"


def _device_share(roles: Roles, found: Share) -> Finding:
    row, check_id, col, share, sev = found.row, found.check, found.column, found.share, found.severity
    rank, device = row["rank"], _device(row)
    what = f"{device} idle" if col == "free_us" else "communication not overlapped with compute"
    where = f"step {row['step']}" if row["scope"] == "step" else "the whole trace (no ProfilerStep)"
    units = "top-level CPU ops and collective spans" if device == "CPU" else "kernel/memcpy/memset events"
    others = row.get("other_events") or 0
    also = f", {others} of them from other steps running inside this step's span" if others else ""
    return Finding(
        check=check_id,
        severity=sev,
        rank=rank,
        step=row["step"],
        title=f"Rank {rank}, {where}: {what} for {pct(share)} of the {device} span",
        message=(
            f"Rank {rank}, {where}: {LANES[col]} is {ms(row[col])} of the {ms(row['step_us'])} "
            f"span from the first to the last {'CPU' if device == 'CPU' else 'device'} event ({pct(share)}); "
            f"{split_text(row)} — computed by interval union over {row['events'] + others} {units}{also}."
            + (
                host_text(row, "gap", f"the longest idle stretch, {ms(row['gap_us'] or 0.0)}")
                if col == "free_us"
                else ""
            )
        ),
        metrics={
            col: round(row[col], 3),
            "step_us": round(row["step_us"], 3),
            "share": round(share, 4),
            "events": row["events"],
            "device": device,
            **(host_metrics(row, "gap") if col == "free_us" else {}),
        },
        evidence=_split_evidence(row, col, roles),
    )


def _device_cats(row: dict, roles: Roles) -> list[str]:
    """Event categories of the device activity a split counts: device lanes, or for a CPU-only trace the main
    thread's cpu_ops and the collective annotations of the worker threads."""
    if _device(row) == "CPU":
        return [roles.kineto_cpu_op_cat, roles.kineto_annotation_cat]
    return list(roles.kineto_device_cats_all)  # as the trace names them (old writers too)


def _split_evidence(row: dict, col: str, roles: Roles) -> tuple:
    """The rows a step's split rests on: the step's ProfilerStep annotation(s) (or, without steps, the span's
    bounding events); the first and last device event, whose start and end are the span the share is of; and
    for idle time the two events around the longest idle stretch. Each item's ``select`` names the set its
    cited events belong to."""
    cats = _device_cats(row, roles)
    base = {"source": "kineto_trace", "scope": row["scope"], "step": row["step"], "cat": cats}
    value = {LANES[col]: round(row[col], 3)}
    if row["scope"] == "step":
        locs = [e for e in (row["step_event"], row["gpu_step_event"]) if e is not None]
        marker = {
            "source": "kineto_trace",
            "step": row["step"],
            "name": row["step_name"],
            "cat": list(roles.kineto_step_cats),
        }
        items = [
            cite_events(
                row["file"], locs, len(locs), marker, note="the ProfilerStep annotation(s) of this step", values=value
            )
        ]
        items.append(
            cite_events(
                row["file"],
                [row["first_event"], row["last_event"]],
                2,
                {**base, "role": "span"},
                values={"step_us": round(row["step_us"], 3)},
                note="the first and the last device event of the step: the span runs from the "
                "first one's start to the last one's end",
            )
        )
    else:
        note = "the first and the last device event: they bound the span"
        items = [
            cite_events(
                row["file"], [row["first_event"], row["last_event"]], row["events"], base, note=note, values=value
            )
        ]
    if col == "free_us" and row.get("gap_us"):
        items.append(
            cite_events(
                row["file"],
                [row["gap_before_event"], row["gap_after_event"]],
                2,
                {**base, "role": "longest idle"},
                values={"gap_us": round(row["gap_us"], 3)},
                note=f"the longest stretch with no device event ({ms(row['gap_us'])}): from the "
                "first event's end to the second one's start",
            )
        )
        items += host_evidence(row, "gap", "the longest idle stretch")
    return tuple(items)


def host_text(row: dict, prefix: str, stretch: str) -> str:
    """What the host did in an idle stretch (`kineto_rank._host_during`), as a sentence; "" when no host span
    covers it."""
    op, call = row.get(f"{prefix}_op"), row.get(f"{prefix}_call")
    if op is None and call is None:
        return ""
    parts = [f"in {op} ({ms(row[f'{prefix}_op_us'])} of it)"] if op is not None else []
    if call is not None:
        parts.append(f"blocked in the runtime call {call} ({ms(row[f'{prefix}_call_us'])} of it)")
    return f" During {stretch}, the host was {', '.join(parts)}."


def host_metrics(row: dict, prefix: str) -> dict:
    """The host op and runtime call of an idle stretch, for the cause to name (null where none covers it)."""
    keys = ("op", "op_us", "call", "call_us")
    return {f"host_{key}": row.get(f"{prefix}_{key}") for key in keys} | (
        {"gap_us": row["gap_us"]} if prefix == "gap" else {}
    )


def host_evidence(row: dict, prefix: str, stretch: str) -> list:
    """The host op and runtime call that cover an idle stretch, cited (`kineto_rank._host_during`)."""
    items = []
    for kind, what in (("op", "host op"), ("call", "runtime call")):
        event = row.get(f"{prefix}_{kind}_event")
        if event is not None:
            items.append(
                cite_events(
                    row["file"],
                    [event],
                    1,
                    {"source": "kineto_trace", "name": row[f"{prefix}_{kind}"], "role": "host while idle"},
                    values={f"{kind}_inside_us": round(row[f"{prefix}_{kind}_us"], 3)},
                    note=f"the innermost {what} covering at least half of {stretch}: what the host was doing then",
                )
            )
    return items


IDLE_BETWEEN = "idle-between-steps"


def idle_between_findings(table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Per Kineto rank and step, the device's idle time before the step's window since the previous step's (which
    no window holds), graded by its share of the step period: the window and that time."""
    if table.is_empty() or "idle_before_us" not in table.columns:
        return []
    chk = pack.check(IDLE_BETWEEN)
    # a CPU-only trace's "device" is the host's own top-level ops: the host's own work between steps keeps no
    # device waiting. Its data loader does: the step's first op needs the batch, so where the loader holds the
    # loading case's share of the time before the step (a DataLoader without workers), the step waits for it
    in_loader = pl.col("loading_before_us").fill_null(0.0) >= chk["loading_share"] * pl.col("idle_before_us")
    rows = table.filter(
        (pl.col("source") == "device_lanes")
        & (pl.col("scope") == "step")
        & (pl.col("idle_before_us") > 0)
        & ((pl.col("device") != "CPU") | in_loader)
    )
    out = []
    for row in rows.iter_rows(named=True):
        period = row["step_us"] + row["idle_before_us"]
        share = row["idle_before_us"] / period
        sev = graded(share, chk)
        if sev is not None:
            out.append(_idle_between(row, chk, sev, share, period, pack.roles))
    return out


def _idle_between(row: dict, chk: Check, sev: str, share: float, period: float, roles: Roles) -> Finding:
    if row.get("before_op_event") is not None and row["before_op_event"] == row.get("loading_event"):
        row = {**row, "before_op": None, "before_op_event": None}  # the loader span itself: said and cited already
    rank, device, idle = row["rank"], _device(row), row["idle_before_us"]
    loading = row.get("loading_before_us") or 0.0
    where = f"Rank {rank}, step {row['step']}"
    inside = (
        f"; {ms(loading)} of it ({pct(loading / idle)}) the host was inside its data loader"
        if loading
        else "; no data-loading span of the host (roles kineto_data_loading) overlaps it"
    )
    # the capture's first step has no step before it: its idle time runs from its start on the host
    first = row["before_event"] is None
    since = (
        "the step's start on the host (its ProfilerStep annotation)"
        if first
        else "the previous step's last device event"
    )
    evidence = _idle_between_evidence(row, roles, since, first)
    return Finding(
        check=chk.id,
        severity=sev,
        rank=rank,
        step=row["step"],
        title=f"{where}: the {device} is idle {ms(idle)} before the step's first event, {pct(share)} of its period",
        message=(
            f"{where}: the {device} runs nothing for {ms(idle)} between {since} and this step's first device "
            f"event{inside}. No step's window (first to last device event, {ms(row['step_us'])} here) holds that "
            f"time: with it the step period is {ms(period)}, {pct(share)} of it idle before the step."
            + host_text(row, "before", "that time")
        ),
        metrics={
            "idle_before_us": round(idle, 3),
            "loading_before_us": round(loading, 3),
            "step_us": round(row["step_us"], 3),
            "period_us": round(period, 3),
            "share": round(share, 4),
            "loading_share": round(loading / idle, 4),
            "device": device,
            **host_metrics(row, "before"),
        },
        evidence=tuple(evidence),
    )


def _idle_between_evidence(row: dict, roles: Roles, since: str, first: bool) -> list:
    """The rows an idle-between finding rests on: the events around the idle time, what the host did in it, and
    the data loader's span that overlaps it most."""
    idle, loading = row["idle_before_us"], row.get("loading_before_us") or 0.0
    cats = [roles.kineto_annotation_cat, *_device_cats(row, roles)] if first else _device_cats(row, roles)
    base = {"source": "kineto_trace", "scope": "step", "step": row["step"], "cat": cats}
    evidence = [
        cite_events(
            row["file"],
            [row["step_event"] if first else row["before_event"], row["first_event"]],
            2,
            {**base, "role": "idle before the step"},
            values={"idle_before_us": round(idle, 3)},
            note=f"{since} and this step's first device event: the idle time runs from the first one's "
            f"{'start' if first else 'end'} to the second one's start",
        ),
        *host_evidence(row, "before", "the idle time before the step"),
    ]
    if row.get("loading_event") is not None:
        evidence.append(
            cite_events(
                row["file"],
                [row["loading_event"]],
                1,
                {"source": "kineto_trace", "pattern": roles.kineto_data_loading, "role": "data loader"},
                values={"loading_before_us": round(loading, 3)},
                note="the data loader's span (roles kineto_data_loading) that overlaps that idle time most",
            )
        )
    return evidence


def lane_share_findings(ranks: list[RankData], table: pl.DataFrame, pack: RulePack) -> list[Finding]:
    """Exposed communication and idle per step from trace_view.json's Overlap Analysis lanes, for Ascend ranks
    without step_trace_time.csv (the profiler writes that file by summing these same lanes)."""
    if table.is_empty() or "source" not in table.columns:
        return []
    covered = [rank.rank for rank in ranks if rank.steps is not None and not rank.steps.is_empty()]
    rows = table.filter((pl.col("source") == "overlap_analysis") & ~pl.col("rank").is_in(covered))
    return graded_share_findings(rows.iter_rows(named=True), pack, _lane_share)


def _lane_share(found: Share) -> Finding:
    row, col = found.row, found.column
    cited = cite_events(
        row["file"],
        row["top_events"],
        row["events"],
        {"source": "trace_view", "process": "Overlap Analysis", "step": row["step"]},
        values={LANES[col]: round(row[col], 3)},
    )
    source = (
        " — from the Overlap Analysis lanes of trace_view.json (this rank has no step_trace_time.csv, which the "
        "profiler sums from the same lanes)"
    )
    metrics = {col: round(row[col], 3), "step_us": round(row["step_us"], 3), "share": round(found.share, 4)}
    return share_finding(found, f"step {row['step']}", source=source, metrics=metrics, cited=cited)


def overlap_check(ranks: list[RankData], pack: RulePack) -> tuple[pl.DataFrame, list[Finding]]:
    """Overlap-Analysis lanes of trace_view.json vs step_trace_time.csv, per rank, step and lane."""
    chk = pack.check("trace-vs-step-trace")
    rows, findings = [], []
    for rank in ranks:
        frame = rank.trace_steps
        if (
            frame is None
            or frame.is_empty()
            or rank.steps is None
            or rank.steps.is_empty()
            or "source" not in frame.columns
        ):
            continue
        frame = frame.filter(pl.col("source") == "overlap_analysis")
        j = frame.join(rank.steps, on="step", how="inner", suffix="_csv", nulls_equal=True)
        for row in j.iter_rows(named=True):
            diffs = _lane_diffs(row)
            rows += [
                {
                    "rank": rank.rank,
                    "step": row["step"],
                    "lane": lane,
                    "trace_view_us": a,
                    "step_trace_time_us": b,
                    "rel_diff": rel,
                }
                for lane, (a, b, rel) in diffs.items()
            ]
            if diffs:
                findings.append(_overlap_finding(rank, row, {key: value[2] for key, value in diffs.items()}, chk))
    return pl.DataFrame(rows) if rows else pl.DataFrame(), findings


def _lane_diffs(row: dict) -> dict[str, tuple[float, float, float]]:
    """Per lane of a step both files hold: (trace_view's time, step_trace_time.csv's, their relative difference)."""
    out = {}
    for col, lane in LANES.items():
        a, b = row[col], row.get(f"{col}_csv")
        if b is not None:
            out[lane] = (a, b, abs(a - b) / abs(b) if b else abs(a - b))
    return out


def _overlap_finding(r: RankData, row: dict, diffs: dict[str, float], chk: Check) -> Finding:
    """One step's agreement (or not) of the two files, citing the step_trace_time.csv line and the lane events."""
    worst = max(diffs, key=lambda k: diffs[k])
    ok = diffs[worst] <= chk["tolerance"]
    lanes = ", ".join(f"{lane} {ms(row[key])}" for key, lane in LANES.items() if lane in diffs)
    return Finding(
        check=chk.id,
        severity=chk.severity_for("agreement") if ok else chk.severity,
        rank=r.rank,
        step=row["step"],
        title=(
            f"Rank {r.rank}, step {row['step']}: trace_view Overlap Analysis "
            f"{'agrees with' if ok else 'disagrees with'} step_trace_time.csv"
        ),
        message=(
            f"Rank {r.rank}, step {row['step']}: summing the Overlap Analysis lanes of trace_view.json "
            f"gives {lanes}; the largest difference to step_trace_time.csv is {worst} "
            f"({100 * diffs[worst]:.4f}%, tolerance {100 * chk['tolerance']:.2f}%)."
            + ("" if ok else " The two files disagree: one was trimmed or re-exported.")
        ),
        metrics={"max_rel_diff": round(diffs[worst], 8), "lane": worst},
        evidence=(
            cite_lines(
                r.files["step_trace_time"], [row["src_line"]], 1, {"source": "step_trace_time", "step": row["step"]}
            ),
            cite_events(
                r.files["trace_view"],
                row["top_events"],
                row["events"],
                {"source": "trace_view", "process": "Overlap Analysis", "step": row["step"]},
                values={key: round(row[key], 3) for key in LANES},
            ),
        ),
    )


def comm_tables(ranks: list[RankData]) -> dict[str, pl.DataFrame]:
    out = {}
    for name, attr in (("trace_communication", "trace_comm"), ("hccl_links", "trace_links")):
        have = [rank for rank in ranks if getattr(rank, attr) is not None and not getattr(rank, attr).is_empty()]
        if have:
            out[name] = stack(
                [getattr(rank, attr) for rank in have],
                {"rank": [rank.rank for rank in have], "file": [_trace_file(rank) for rank in have]},
            )
    return out


def trace_notes(ranks: list[RankData]) -> list[str]:
    notes = []
    kin = [rank for rank in ranks if rank.kind == "kineto" and rank.groups is not None]
    if kin:
        parts = []
        for rank in kin:
            total = float(rank.groups["time_us"].sum())
            unc = float(rank.groups.filter(pl.col("bucket") == UNCLASSIFIED)["time_us"].sum())
            parts.append(f"rank {rank.rank} {pct(unc / total) if total else 'n/a'}")
        notes.append("share of device time matching no bucket rule (Kineto traces): " + ", ".join(parts))
        for rank in kin:
            notes += [f"rank {rank.rank}: {n}" for n in rank.info.get("trace_notes", [])]
        world = {rank.info.get("world_size") for rank in kin} - {None}
        if world and max(world) > len(kin):
            notes.append(
                f"{len(kin)} of {max(world)} ranks (distributedInfo.world_size) are present: "
                "cross-rank comparison covers only these"
            )
    return notes


def section(job: Job) -> Section:
    """Tables, findings and notes from chrome traces: GPU step splits, trace_view.json lanes and their check."""
    ranks, pack = job.ranks, job.pack
    table = trace_step_table(ranks)
    check_tab, check_findings = overlap_check(ranks, pack)
    tables = {"trace_steps": table, "trace_vs_step_trace": check_tab, **comm_tables(ranks)}
    tables["step_blocks"] = block_table(ranks)
    findings = [*device_share_findings(table, pack), *idle_between_findings(table, pack)]
    findings += [*lane_share_findings(ranks, table, pack), *check_findings]
    findings += imbalance_findings(job, table)
    return Section(tables=tables, findings=findings, notes=trace_notes(ranks))


def imbalance_findings(job: Job, table: pl.DataFrame) -> list[Finding]:
    """Ranks that compute unequal amounts, judged from the traces' own step split where no step_trace_time.csv
    gives Computing (the step analysis judges those): Kineto ranks, GPU or CPU-only, run the same program unless
    the trace says otherwise, so the one that computes longest holds every collective back (`imbalance`)."""
    if not job.steps.is_empty() or table.is_empty():
        return []
    rows = table.filter((pl.col("source") == "device_lanes") & (pl.col("scope") == "step"))
    return imbalance.trace_imbalance_findings(job.ranks, rows, job.pack)
