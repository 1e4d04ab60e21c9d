"""The pipeline, one direction: discover -> per-rank map -> analyses -> Report."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl

from profan import limits, trust
from profan.analyses import breakdown as bd
from profan.analyses import comm_section, crossrank, imbalance, reconcile, steps, trace_steps
from profan.analyses.rank_section import rank_sections
from profan.discover import base_dir, discover
from profan.evidence import file_sizes
from profan.findings import Finding, number_findings
from profan.hardware import Hardware
from profan.hardware import load as load_hardware
from profan.parallel import load_ranks
from profan.rankmap import RankData
from profan.report import Report
from profan.rulepack import RulePack, load

Progress = Callable[[str], None]


def analyze(path: str | Path, *, rules: list[str | Path] | None = None, progress: Progress | None = None,
            pack: RulePack | None = None, hardware: str | Path | Hardware | None = None,
            jobs: int | None = None) -> Report:
    """Analyse a profiler output directory (or one kernel file) into a Report.

    ``hardware``: a TOML file of link-bandwidth priors (or a loaded Hardware) on top of ``rules/hardware``.
    ``jobs``: processes reading ranks: 1 sequential, N processes, 0 one per core for 4+ ranks of 32+ MB; None takes
    ``PROFAN_JOBS`` from the environment, else 1.
    """
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    pack = pack or load([Path(p) for p in rules or []])
    limits.use(pack.limits)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    disc = discover(path)
    root = disc.root
    say(f"found {len(disc.ranks)} rank(s) in {root}")
    ranks: list[RankData] = load_ranks(disc.ranks, root, pack, jobs, say)
    t_read = time.perf_counter()
    report = build_report(ranks, pack, root=root, fmt=disc.format, warnings=disc.warnings, notes=disc.notes,
                          hardware=hw)
    report.meta["timings_s"] = {"read": round(t_read - t0, 3), "analyse": round(time.perf_counter() - t_read, 3)}
    return report


def build_report(ranks: list[RankData], pack: RulePack, *, root: Path, fmt: str, warnings: list[str],
                 notes: list[str], hardware: Hardware | None = None) -> Report:
    """The reduce: pure analyses over the per-rank results."""
    step_tab = steps.step_table(ranks)
    # the cross-rank section needs nothing the others compute: it runs in a thread beside them — polars releases
    # the GIL, so a cluster's largest section uses the second core while this thread does the rest
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        cross = pool.submit(crossrank.cross_rank_section, ranks, step_tab, pack)
        return _report(ranks, pack, step_tab, cross, root=root, fmt=fmt, warnings=warnings, notes=notes,
                       hardware=hardware)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _report(ranks: list[RankData], pack: RulePack, step_tab: pl.DataFrame, cross: Future, *, root: Path, fmt: str,
            warnings: list[str], notes: list[str], hardware: Hardware | None) -> Report:
    """`build_report` once the cross-rank section is under way (``cross``: its future)."""
    from profan import __version__

    per_rank, rank_findings = rank_sections(ranks, pack)
    breakdown, bound_tab, comm_tab = per_rank["breakdown"], per_rank["boundness"], per_rank["communication"]
    findings = [
        *rank_findings["step_breakdown"],
        *rank_findings["coverage"],
        *steps.share_findings(step_tab, pack),
        *steps.reconcile_findings(ranks, step_tab, pack),
        *imbalance.imbalance_findings(ranks, step_tab, pack),
        *rank_findings["boundness"],
        *rank_findings["transit"],
    ]
    hw = hardware or load_hardware()
    comm_tables, comm_findings, comm_notes = comm_section.communication_section(ranks, step_tab, comm_tab, pack, hw)
    findings += comm_findings
    opstat_tab = reconcile.op_statistic_table(ranks)
    opstat_findings, opstat_notes = reconcile.op_statistic_findings(opstat_tab, pack)
    findings += opstat_findings
    xr_tables, xr_findings, xr_notes = cross.result()
    findings += xr_findings
    tr_tables, tr_findings, tr_notes = trace_steps.trace_section(ranks, pack)
    findings += tr_findings
    findings = _drop_superseded(findings)
    all_warnings = [*warnings, *_other_jobs(ranks, pack)]
    for r in ranks:
        all_warnings += [f"rank {r.rank}: {w}" for w in r.warnings]
    notes = [*notes, *opstat_notes, *comm_notes, *xr_notes, *tr_notes]
    no_pipes = [r for r in ranks if r.groups is not None and not r.has_pipe_ratios and r.kernel_locator == "lines"]
    if no_pipes:
        notes.append("kernel boundness not assessed for ranks whose kernel_details.csv has no PipeUtilization "
                     "ratios: " + ", ".join(str(r.rank) for r in no_pipes))
    if not any(r.groups is not None for r in ranks):
        notes.append("no kernel_details.csv / op_summary found: no per-kernel breakdown")
    source = {
        "root": str(root),
        "root_abs": str(root.resolve()),
        "format": fmt,
        "ranks": [{"rank": r.rank, "path": r.path, "kind": r.kind, "rank_origin": r.rank_origin,
                   "files": r.files, "info": r.info, "kernel_header": r.kernel_variant or None,
                   "rows_read": r.rows_read, "rows_skipped": r.rows_skipped} for r in ranks],
        "file_bytes": file_sizes(base_dir(root), {f for r in ranks for f in r.files.values()}),
    }
    source["root_seal"] = trust.seal(source["root_abs"], source["file_bytes"])
    over_steps = bd.breakdown_over_steps(breakdown, pack.check("step-breakdown")["table_steps_max"])
    tables = {"breakdown": breakdown, "breakdown_all_steps": over_steps, "steps": step_tab,
              "top_kernels": per_rank["top_kernels"],
              "boundness": bound_tab, "communication": comm_tab, "op_statistic_check": opstat_tab,
              **comm_tables, **xr_tables, **tr_tables}
    tables = {k: v for k, v in tables.items() if isinstance(v, pl.DataFrame) and not v.is_empty()}
    return Report(source=source, findings=number_findings(findings), tables=tables, warnings=all_warnings,
                  notes=notes, meta={"profan": __version__, "rule_files": pack.files,
                                      "hardware_files": hw.files}, read_root=root.resolve())


def _other_jobs(ranks: list[RankData], pack: RulePack) -> list[str]:
    """Ranks that cannot be one job: profiler end times too far apart, or other software versions."""
    out = []
    ends = {r.rank: r.info["collection_end_ns"] for r in ranks if r.info.get("collection_end_ns")}
    if len(ends) > 1:
        first, last = min(ends, key=ends.__getitem__), max(ends, key=ends.__getitem__)
        spread = (ends[last] - ends[first]) / 1e9
        if spread > pack.check("one-job")["max_end_spread_s"]:
            path = {r.rank: r.path for r in ranks}
            out.append(f"rank {first} ({path[first]}) and rank {last} ({path[last]}) stopped profiling "
                       f"{_span(spread)} apart (end_info in profiler_info_*.json): they may be different jobs, "
                       "analysed here as one")
    for key in ("torch_npu_version", "cann_version"):
        seen: dict[str, list[int]] = {}
        for r in ranks:
            if r.info.get(key):
                seen.setdefault(str(r.info[key]), []).append(r.rank)
        if len(seen) > 1:
            out.append(f"ranks differ in {key} (" + "; ".join(f"{v}: ranks {', '.join(map(str, rk))}"
                                                             for v, rk in sorted(seen.items()))
                       + "): they may be different jobs, analysed here as one")
    return out


def _span(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


def _drop_superseded(findings: list[Finding]) -> list[Finding]:
    """Where communication.json splits a step's exposed communication into transfer and waiting, that finding
    says everything the plain step_trace one does and more: keep one finding per rank and step, not two."""
    split = {(f.rank, f.step) for f in findings if f.check == "comm-exposed-split"}
    return [f for f in findings if not (f.check == "exposed-communication" and (f.rank, f.step) in split)]
