"""The pipeline, one direction: discover -> per-rank map -> analyses -> Report."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from profan import trust
from profan.analyses.across_ranks import section as crossrank
from profan.analyses.communication import section as comm_section
from profan.analyses.contract import Analysis, Job, run_analyses
from profan.analyses.moe import section as moe_section
from profan.analyses.per_rank import memory, reconcile, steps, trace_steps
from profan.analyses.per_rank import section as rank_section
from profan.analyses.rl import section as rl_section
from profan.analyses.serving import section as serving_section
from profan.diagnosis import causes
from profan.diagnosis.fold import fold
from profan.diagnosis.severity import grade_causes, grade_findings, keep, run_kind
from profan.diagnosis.step import denominator, step_summary
from profan.model.rank import RankData
from profan.model.report import Report
from profan.ranks.executor import Executor
from profan.ranks.rankmap import load_ranks
from profan.rulepack import limits
from profan.rulepack.hardware import Hardware
from profan.rulepack.hardware import load as load_hardware
from profan.rulepack.pack import RulePack, load, require_known_checks
from profan.sources.common.readback import file_sizes
from profan.sources.discovery.discover import Discovery, base_dir, discover
from profan.sources.rl import timers as rl_timers

Progress = Callable[[str], None]

# The analyses of a report, in the order their tables, findings and notes are merged (`analyses.contract`). An
# analysis reads the job's inputs and what it declares of the ones above it; adding one is one line here.
ANALYSES: tuple[Analysis, ...] = (
    Analysis("breakdown", rank_section.breakdown_section),
    Analysis("moe", moe_section.section),
    Analysis("steps", steps.section),
    Analysis("kernels", rank_section.kernel_section),
    Analysis("communication ops", rank_section.comm_ops_section),
    Analysis("op statistic", reconcile.section),
    Analysis("communication", comm_section.section, reads=("communication",)),
    # needs nothing the others compute: runs in a thread beside them, and is a cluster's largest analysis
    Analysis("cross-rank", crossrank.section, own_thread=True),
    Analysis("traces", trace_steps.section),
    Analysis("memory", memory.section),
    # an RL job's step across its roles' traces: its ledger findings supersede the per-trace idle ones
    Analysis("rl step ledger", rl_section.section),
    Analysis("serving", serving_section.section),
    Analysis("not assessed", rank_section.unassessed_section),
    # the diagnosis: reads every finding above and explains them by causes
    Analysis(
        "causes",
        causes.section,
        reads=(
            "breakdown",
            "trace_steps",
            "comm_exposed",
            "communication",
            "rl_steps",
            "rl_ledger",
            "moe_ep_ops",
            "comm_overlappable",
        ),
        reads_findings=True,
    ),
)


def analyze(
    path: str | Path,
    *,
    rules: list[str | Path] | None = None,
    progress: Progress | None = None,
    pack: RulePack | None = None,
    hardware: str | Path | Hardware | None = None,
    jobs: int | Executor | None = None,
) -> Report:
    """Analyse a profiler output directory (or one kernel file) into a Report.

    ``hardware``: a TOML file of link-bandwidth priors (or a loaded Hardware) on top of ``rules/hardware``.
    ``jobs``: processes reading ranks: 1 sequential, N processes, 0 one per core for 4+ ranks of 32+ MB (else
    this process's threads); None takes ``PROFAN_JOBS`` from the environment, else 1; or an executor
    (`profan.ranks.ray_tasks.RayTasks`) to map the ranks on.
    """
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    pack = pack or load([Path(p) for p in rules or []])
    with limits.scoped(pack.limits):  # this call's bounds, not the process's: a later read meets its own
        hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
        disc = discover(path)
        root = disc.root
        say(f"found {len(disc.ranks)} rank(s) in {root}")
        ranks: list[RankData] = load_ranks(disc.ranks, root, pack, jobs, say)
        t_read = time.perf_counter()
        report = build_report(ranks, pack, disc, hardware=hw)
    report.meta["timings_s"] = {"read": round(t_read - t0, 3), "analyse": round(time.perf_counter() - t_read, 3)}
    return report


def build_report(ranks: list[RankData], pack: RulePack, disc: Discovery, hardware: Hardware | None = None) -> Report:
    """The reduce: the analyses over the per-rank results, and the report around their merged sections (with what
    discovery found: its root, format, warnings and notes)."""
    root, fmt, warnings, notes = disc.root, disc.format, disc.warnings, disc.notes
    from profan.model.version import __version__

    hw = hardware or load_hardware()
    timers, timer_warnings = _rl_timers(ranks, root)
    job = Job(ranks=ranks, pack=pack, hardware=hw, steps=steps.step_table(ranks), rl_timers=timers)
    merged = run_analyses(ANALYSES, job)
    all_warnings = [*warnings, *timer_warnings, *merged.warnings, *_other_jobs(ranks, pack)]
    for rank in ranks:
        all_warnings += [f"rank {rank.rank}: {warning}" for warning in rank.warnings]
    tables = {
        key: value for key, value in merged.tables.items() if isinstance(value, pl.DataFrame) and not value.is_empty()
    }
    step = step_summary(tables, merged.causes)
    kind, per = run_kind(ranks, tables.get("trace_steps")), denominator(step)
    graded = grade_findings(merged.findings, pack.severity, kind, per)
    findings, diagnosis = fold(graded, keep(merged.causes, pack.severity, kind, per), pack, per)
    diagnosis = grade_causes(diagnosis, pack.severity, kind)
    require_known_checks([*findings, *diagnosis])
    return Report(
        source=_source(ranks, root, fmt),
        findings=findings,
        causes=diagnosis,
        tables=tables,
        warnings=all_warnings,
        notes=[*notes, *merged.notes],
        meta={"profan": __version__, "rule_files": pack.files, "hardware_files": hw.files},
        read_root=root.resolve(),
    )


def _source(ranks: list[RankData], root: Path, fmt: str) -> dict:
    """What was read: the root, each rank's folder and files, and the files' sizes sealed with the root (so
    `profan evidence` can tell an edited report or a changed file)."""
    source = {
        "root": str(root),
        "root_abs": str(root.resolve()),
        "format": fmt,
        "ranks": [
            {
                "rank": rank.rank,
                "path": rank.path,
                "kind": rank.kind,
                "rank_origin": rank.rank_origin,
                "files": rank.files,
                "info": rank.info,
                "kernel_header": rank.kernel_variant or None,
                "rows_read": rank.rows_read,
                "rows_skipped": rank.rows_skipped,
            }
            for rank in ranks
        ],
        "file_bytes": file_sizes(base_dir(root), {file for rank in ranks for file in rank.files.values()}),
    }
    source["root_seal"] = trust.seal(source["root_abs"], source["file_bytes"])
    return source


def _rl_timers(ranks: list[RankData], root: Path) -> tuple[pl.DataFrame, list[str]]:
    """An RL job's per-step timer log (each RL rank's file ``rl_timers``, `sources.rl.timers`) with its ``file``,
    and what could not be read of it; an empty frame for any other job."""
    named = next((rank.files["rl_timers"] for rank in ranks if "rl_timers" in rank.files), None)
    if named is None:
        return pl.DataFrame(), []
    timers, said = rl_timers.read(base_dir(root) / named)
    return timers.with_columns(pl.lit(named).alias("file")), said


def _other_jobs(ranks: list[RankData], pack: RulePack) -> list[str]:
    """Ranks that cannot be one job: profiler end times too far apart, or other software versions."""
    out = []
    ends = {rank.rank: rank.info["collection_end_ns"] for rank in ranks if rank.info.get("collection_end_ns")}
    if len(ends) > 1:
        first, last = min(ends, key=ends.__getitem__), max(ends, key=ends.__getitem__)
        spread = (ends[last] - ends[first]) / 1e9
        if spread > pack.check("one-job")["max_end_spread_s"]:
            path = {rank.rank: rank.path for rank in ranks}
            out.append(
                f"rank {first} ({path[first]}) and rank {last} ({path[last]}) stopped profiling "
                f"{_span(spread)} apart (end_info in profiler_info_*.json): they may be different jobs, "
                "analysed here as one"
            )
    for key in ("torch_npu_version", "cann_version"):
        seen: dict[str, list[int]] = {}
        for rank in ranks:
            if rank.info.get(key):
                seen.setdefault(str(rank.info[key]), []).append(rank.rank)
        if len(seen) > 1:
            out.append(
                f"ranks differ in {key} ("
                + "; ".join(f"{v}: ranks {', '.join(map(str, rk))}" for v, rk in sorted(seen.items()))
                + "): they may be different jobs, analysed here as one"
            )
    return out


def _span(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"
