"""Device memory: each rank's peak, when it happens and what holds it, memory reserved but not allocated at the
peak (fragmentation), the headroom against the device where the capture records its capacity, and the imbalance of
peaks across ranks.

Reads the per-rank reduction of `profan.ranks.memory_pass` (``RankData.memory``): the bounded curve, the peak row
and the live allocations at the peak. Every finding cites the source rows of its numbers: the memory_record.csv line
(or trace event) of the peak, the allocation rows live then, the annotation that names the phase.
"""

from __future__ import annotations

import polars as pl

from profan.analyses.common import graded
from profan.analyses.contract import Job, Section
from profan.model.evidence import Evidence, cite_events, cite_lines
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks
from profan.rulepack.pack import Check, RulePack


def section(job: Job) -> Section:
    ranks = [r for r in job.ranks if r.memory]
    if not ranks:
        return Section()
    peaks = peak_table(ranks)
    tables = {
        "memory_peaks": peaks,
        "memory_holders": _stacked(ranks, "holders", lambda r, t: _holder_rows(r, t)),
        "memory_curve": _stacked(ranks, "curve", lambda r, t: _curve_rows(r, t)),
        "memory_modules": _stacked(
            ranks,
            "modules",
            lambda r, t: t.select(
                pl.lit(r.rank, pl.Int64).alias("rank"), pl.all(), pl.lit(r.files.get("npu_module_mem")).alias("file")
            ),
        ),
    }
    findings = [
        *(_peak_finding(r, job.pack) for r in ranks),
        *filter(None, (_fragmentation_finding(r, job.pack) for r in ranks)),
        *_imbalance_findings(ranks, job.pack),
    ]
    notes = []
    unknown = [r.rank for r in ranks if _peak(r)["capacity_mb"] is None]
    if unknown:
        notes.append(f"memory, rank(s) {fmt_ranks(unknown)}: " + job.pack.check("memory-peak")["capacity_unknown"])
    return Section(
        tables={key: value for key, value in tables.items() if not value.is_empty()}, findings=findings, notes=notes
    )


def _peak(r: RankData) -> dict:
    """The rank's peak row; its step, where the memory data has none, is the step whose device work (the rank's
    step blocks: kernel or trace device-lane time spans) spans the peak's time (``step_basis`` "device")."""
    p = r.memory["peak"].row(0, named=True)
    p["step_basis"] = None if p["step"] is None else "trace"
    blocks = r.step_blocks
    if p["step"] is None and blocks is not None and not blocks.is_empty():
        spans = blocks.group_by("step").agg(pl.col("start_us").min(), pl.col("end_us").max())
        hit = spans.filter((pl.col("start_us") <= p["peak_us"]) & (pl.col("end_us") >= p["peak_us"]))
        if hit.height == 1:
            p["step"], p["step_basis"] = hit["step"][0], "device"
    return p


def _stacked(ranks: list[RankData], key: str, rows) -> pl.DataFrame:
    parts = [rows(rank, rank.memory[key]) for rank in ranks if key in rank.memory and not rank.memory[key].is_empty()]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()


def peak_table(ranks: list[RankData]) -> pl.DataFrame:
    """One row per rank: the peak and what surrounds it, in MB, times in ms from the rank's first memory row."""
    rows = []
    for rank in ranks:
        p = _peak(rank)
        reserved = p["reserved_at_peak_mb"]
        worst = p["peak_reserved_mb"] if p["peak_reserved_mb"] is not None else p["peak_allocated_mb"]
        rows.append(
            {
                "rank": rank.rank,
                "device": p["device"],
                "peak_allocated_mb": p["peak_allocated_mb"],
                "reserved_at_peak_mb": reserved,
                "unallocated_at_peak_mb": None if reserved is None else reserved - p["peak_allocated_mb"],
                "peak_reserved_mb": p["peak_reserved_mb"],
                "process_reserved_mb": p["process_reserved_mb"],
                "capacity_mb": p["capacity_mb"],
                "headroom_mb": None if p["capacity_mb"] is None else p["capacity_mb"] - worst,
                "peak_at_ms": (p["peak_us"] - p["start_us"]) / 1000,
                "step": p["step"],
                "phase": p["phase"],
                "peak_op": p["peak_op"],
                "live_mb": p["live_mb"],
                "before_capture_mb": max(0.0, p["peak_allocated_mb"] - p["live_mb"]),
                "file": rank.files[p["peak_file"]],
                "loc": p["peak_loc"],
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def _holder_rows(r: RankData, frame: pl.DataFrame) -> pl.DataFrame:
    p = _peak(r)
    return frame.select(
        pl.lit(r.rank, pl.Int64).alias("rank"),
        "name",
        "live_mb",
        pl.col("count").cast(pl.Int64),
        "largest_mb",
        (pl.col("live_mb") / p["peak_allocated_mb"]).alias("share_of_peak"),
        pl.lit(r.files[p["holders_file"]]).alias("file"),
        "locs",
    )


def _curve_rows(r: RankData, frame: pl.DataFrame) -> pl.DataFrame:
    p = _peak(r)
    return frame.select(
        pl.lit(r.rank, pl.Int64).alias("rank"),
        ((pl.col("ts_us") - p["start_us"]) / 1000).alias("t_ms"),
        "allocated_mb",
        "reserved_mb",
        (pl.col("loc") == p["peak_loc"]).alias("peak"),
        "op",
        "event",
        pl.lit(r.files[p["peak_file"]]).alias("file"),
        "loc",
    )


def _cite(r: RankData, logical: str, locs: list[int], count: int, select: dict, **kw) -> Evidence:
    """Evidence on the rank's memory rows: CSV lines (``source`` the file's logical name), or trace events
    (``source`` "kineto_memory": memory events, or "kineto_span" where ``select`` says so)."""
    p = _peak(r)
    cite = cite_events if p["locator"] == "events" else cite_lines
    source = logical if p["locator"] == "lines" else "kineto_memory"
    sel = {"source": source, **{key: value for key, value in select.items() if value is not None}}
    return cite(r.files[logical], locs, count, sel, **kw)


def mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f} MB" if abs(x) >= 10 else f"{x:,.3f} MB"


def _when(p: dict) -> str:
    """When the peak happens, as the capture tells it: step and phase where a trace says them."""
    parts = [f"{(p['peak_us'] - p['start_us']) / 1000:,.1f} ms into the capture"]
    if p["step"] is not None:
        basis = " (the step whose device work spans that time)" if p["step_basis"] == "device" else ""
        parts.append(f"in step {p['step']}{basis}")
    if p["phase"] is not None:
        parts.append(f"during the {p['phase']} phase")
    return ", ".join(parts)


def _holders_text(r: RankData, p: dict) -> str:
    h = r.memory["holders"]
    if h.is_empty():
        return "No allocation made during the capture is live at the peak"
    top = "; ".join(
        f"{n or '(no op around it)'} {mb(m)} ({c})" for n, m, c in h.select("name", "live_mb", "count").iter_rows()
    )
    before = max(0.0, p["peak_allocated_mb"] - p["live_mb"])
    rest = (
        f"; the other {mb(before)} were allocated before the capture began (weights, optimizer state, caches)"
        if before >= 0.05 * p["peak_allocated_mb"]
        else ""
    )
    return (
        f"Live at the peak: {p['live_count']} allocation(s) made during the capture, {mb(p['live_mb'])} — {top}{rest}"
    )


def _peak_finding(r: RankData, pack: RulePack) -> Finding:
    chk = pack.check("memory-peak")
    p = _peak(r)
    worst = p["peak_reserved_mb"] if p["peak_reserved_mb"] is not None else p["peak_allocated_mb"]
    share = None if p["capacity_mb"] is None else worst / p["capacity_mb"]
    severity = (graded(share, chk, "capacity_share") if share is not None else None) or chk.severity
    reserved = (
        f"; reserved then {mb(p['reserved_at_peak_mb'])}, at most {mb(p['peak_reserved_mb'])}"
        if p["reserved_at_peak_mb"] is not None
        else "; the allocator records no reserved memory for this device"
    )
    process = (
        f" The process holds up to {mb(p['process_reserved_mb'])} of device memory in all (component "
        f"{chk['ascend_process_component']})."
        if p["process_reserved_mb"] is not None
        else ""
    )
    capacity = (
        f" Device capacity {mb(p['capacity_mb'])} ({p['capacity_source']}): the peak uses {share:.1%} of it, "
        f"{mb(p['capacity_mb'] - worst)} headroom."
        if share is not None
        else " " + chk["capacity_unknown"]
    )
    op = f" The allocation that reached it: {p['peak_op'] or '(no op around it)'}." if p["peak_op"] is not None else ""
    where = " ".join(x for x in (p["device"] or "", p["component"] or "") if x)
    return Finding(
        check=chk.id,
        severity=severity,
        rank=r.rank,
        step=p["step"],
        title=f"Rank {r.rank} peaks at {mb(p['peak_allocated_mb'])} allocated"
        + (f" in step {p['step']}" if p["step"] is not None else "")
        + (f" ({p['phase']})" if p["phase"] is not None else ""),
        message=(
            f"Rank {r.rank} ({where}): allocated memory peaks at {mb(p['peak_allocated_mb'])} {_when(p)}{reserved}."
            f"{op} {_holders_text(r, p)}.{process}{capacity} {chk['advice']}"
        ),
        metrics=_metrics(p, share),
        evidence=_peak_evidence(r, p),
    )


def _metrics(p: dict, share: float | None) -> dict:
    keys = (
        "peak_allocated_mb",
        "reserved_at_peak_mb",
        "peak_reserved_mb",
        "live_mb",
        "capacity_mb",
        "process_reserved_mb",
    )
    out = {key: round(p[key], 4) for key in keys if p[key] is not None}
    out.update({key: p[key] for key in ("step", "phase", "peak_op", "device") if p[key] is not None})
    if share is not None:
        out["capacity_share"] = round(share, 4)
    return out


def _peak_evidence(r: RankData, p: dict) -> tuple[Evidence, ...]:
    """The peak's row, the reserved peak's, the allocations live at the peak (largest first), the span that names
    the phase, and the process's largest reservation."""
    out = [
        _cite(
            r,
            p["peak_file"],
            [p["peak_loc"]],
            1,
            {"peak": "allocated", "component": p["component"]},
            values={"allocated_mb": p["peak_allocated_mb"]},
        ),
    ]
    if p["peak_reserved_loc"] is not None and p["peak_reserved_loc"] != p["peak_loc"]:
        out.append(
            _cite(
                r,
                p["peak_file"],
                [p["peak_reserved_loc"]],
                1,
                {"peak": "reserved", "component": p["component"]},
                values={"reserved_mb": p["peak_reserved_mb"]},
            )
        )
    h = r.memory["holders"]
    if not h.is_empty() and p["holders_file"] is not None:
        rows = h.select("locs").explode("locs")["locs"].to_list()
        out.append(
            _cite(
                r,
                p["holders_file"],
                rows,
                p["live_count"],
                {"live_at_us": p["peak_us"]},
                values={"live_mb": round(p["live_mb"], 6)},
            )
        )
    if p["phase_loc"] is not None:
        out.append(_cite(r, p["peak_file"], [p["phase_loc"]], 1, {"source": "kineto_span", "phase": p["phase"]}))
    if p["process_reserved_loc"] is not None:
        out.append(
            _cite(
                r,
                p["peak_file"],
                [p["process_reserved_loc"]],
                1,
                {"peak": "process reserved"},
                values={"reserved_mb": p["process_reserved_mb"]},
            )
        )
    return tuple(out)


def _fragmentation_finding(r: RankData, pack: RulePack) -> Finding | None:
    chk = pack.check("memory-fragmentation")
    p = _peak(r)
    if p["reserved_at_peak_mb"] is None or p["reserved_at_peak_mb"] <= 0:
        return None
    free = p["reserved_at_peak_mb"] - p["peak_allocated_mb"]
    share = free / p["reserved_at_peak_mb"]
    severity = graded(share, chk)
    if severity is None or free < chk["min_mb"]:
        return None
    return Finding(
        check=chk.id,
        severity=severity,
        rank=r.rank,
        step=p["step"],
        title=f"Rank {r.rank}: {mb(free)} reserved but unallocated at its memory peak ({share:.0%} of reserved)",
        message=(
            f"Rank {r.rank}: at its allocated peak ({mb(p['peak_allocated_mb'])}, {_when(p)}) the allocator "
            f"reserves {mb(p['reserved_at_peak_mb'])}: {mb(free)} ({share:.1%}) are cached blocks no tensor uses. "
            f"{chk['advice']}"
        ),
        metrics={"unallocated_mb": round(free, 4), "share": round(share, 4)},
        evidence=(
            _cite(
                r,
                p["peak_file"],
                [p["peak_loc"]],
                1,
                {"peak": "allocated", "component": p["component"]},
                values={"allocated_mb": p["peak_allocated_mb"], "reserved_mb": p["reserved_at_peak_mb"]},
            ),
        ),
    )


def _imbalance_findings(ranks: list[RankData], pack: RulePack) -> list[Finding]:
    chk: Check = pack.check("memory-imbalance")
    if len(ranks) < 2:
        return []
    peaks = {r.rank: _peak(r)["peak_allocated_mb"] for r in ranks}
    high = max(ranks, key=lambda r: (peaks[r.rank], -r.rank))
    low = min(ranks, key=lambda r: (peaks[r.rank], r.rank))
    # against the other ranks: of two, the median of both is their mean and halves the gap
    median = float(pl.Series([value for key, value in peaks.items() if key != high.rank]).median())
    against = f"rank {low.rank}'s" if len(ranks) == 2 else "the median rank's"
    ratio = peaks[high.rank] / median if median > 0 else None
    severity = graded(ratio, chk, "ratio") if ratio is not None else None
    if severity is None or peaks[high.rank] - median < chk["min_mb"]:
        return []
    hp, lp = _peak(high), _peak(low)
    return [
        Finding(
            check=chk.id,
            severity=severity,
            title=f"Rank {high.rank} peaks at {ratio:.2f}× {against} memory ({mb(peaks[high.rank])} vs {mb(median)})",
            message=(
                f"Peak allocated memory over {len(ranks)} ranks: rank {high.rank} {mb(peaks[high.rank])} "
                f"({_when(hp)}), the other ranks' median {mb(median)}, lowest rank {low.rank} "
                f"{mb(peaks[low.rank])} ({_when(lp)}). "
                f"{chk['advice']}"
            ),
            metrics={
                "ratio": round(ratio, 4),
                "max_mb": round(peaks[high.rank], 4),
                "median_mb": round(median, 4),
                "max_rank": high.rank,
                "min_rank": low.rank,
            },
            evidence=tuple(
                _cite(
                    x,
                    _peak(x)["peak_file"],
                    [_peak(x)["peak_loc"]],
                    1,
                    {"peak": "allocated", "rank": x.rank},
                    values={"allocated_mb": peaks[x.rank]},
                )
                for x in (high, low)
            ),
        )
    ]
