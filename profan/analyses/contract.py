"""The one shape of an analysis: what it reads (`Job`), what it gives (`Section`), and how a list of them runs.

Why one shape: the report is the analyses' sections merged in one order, so the pipeline is an ordered list of
`Analysis` entries (`pipeline.ANALYSES`) and adding an analysis is one entry there. An analysis declares the
tables of earlier analyses it reads, and whether it reads their findings; `run_analyses` hands it exactly those,
so a declaration cannot drift from what the code reads, and a table read before it is made fails at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import polars as pl

from profan.model.causes import Cause
from profan.model.findings import Finding
from profan.model.rank import RankData
from profan.rulepack.hardware import Hardware
from profan.rulepack.pack import RulePack, require_known_checks


@dataclass
class Section:
    """What one analysis adds to the report: tables by name, findings, causes (the diagnosis, which explains
    findings of earlier analyses) and notes (assumptions, what was skipped)."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the data holds that was not read as the rest was


@dataclass(frozen=True)
class Job:
    """What an analysis reads: every rank's reduced data, the rule pack, the link priors and the step table (built
    before any analysis: several need it, one of them from the start), plus what it declared of earlier analyses:
    their ``tables`` by name and, if asked, their ``findings`` (superseded ones already dropped)."""

    ranks: list[RankData]
    pack: RulePack
    hardware: Hardware | None = None  # None: no link priors (an analysis that needs them loads the built-in ones)
    steps: pl.DataFrame = field(default_factory=pl.DataFrame)
    tables: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    # an RL job's per-step timer log (`sources.rl.timers`: step, timer, timer_us, line, file); empty otherwise
    rl_timers: pl.DataFrame = field(default_factory=pl.DataFrame)

    def table(self, name: str) -> pl.DataFrame:
        """An earlier analysis's table this analysis declared (an empty frame when it found nothing)."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"table {name!r} is not among the tables this analysis declared it reads") from None


@dataclass(frozen=True)
class Analysis:
    """One entry of the pipeline's list.

    ``reads``: tables of earlier analyses it needs; ``reads_findings``: it sees the findings of earlier analyses
    (e.g. to explain them across ranks); ``own_thread``: it starts in a thread before the others run and its
    section is merged at its place in the list — for a large analysis that needs only the job's inputs (polars
    releases the GIL, so it uses a second core meanwhile)."""

    name: str
    run: Callable[[Job], Section]
    reads: tuple[str, ...] = ()
    reads_findings: bool = False
    own_thread: bool = False

    def __post_init__(self) -> None:
        if self.own_thread and (self.reads or self.reads_findings):
            raise ValueError(
                f"analysis {self.name!r} runs in its own thread from the start: it can read only the "
                "job's inputs, not earlier analyses"
            )


def run_analyses(analyses: Sequence[Analysis], job: Job) -> Section:
    """Every analysis of the list, merged in list order: tables, findings (superseded ones dropped) and notes.

    The `own_thread` ones are started first and joined at their place in the list, so the merged result does not
    depend on which finishes first."""
    names = [analyse.name for analyse in analyses]
    if len(set(names)) != len(names):
        raise ValueError(f"analysis names repeat: {names}")
    threaded = [analyse for analyse in analyses if analyse.own_thread]
    pool = ThreadPoolExecutor(max_workers=len(threaded)) if threaded else None
    try:
        started: dict[str, Future[Section]] = (
            {analyse.name: pool.submit(analyse.run, job) for analyse in threaded} if pool else {}
        )
        merged = Section()
        for analyse in analyses:
            section = started[analyse.name].result() if analyse.own_thread else analyse.run(_view(job, merged, analyse))
            _merge(merged, section, analyse.name, job.pack)
        return merged
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _view(job: Job, merged: Section, analysis: Analysis) -> Job:
    """The job as ``analysis`` may see it: the tables it declared, and the findings so far if it asked."""
    missing = [read for read in analysis.reads if read not in merged.tables]
    if missing:
        raise KeyError(f"analysis {analysis.name!r} reads table(s) {missing} that no earlier analysis made")
    return Job(
        ranks=job.ranks,
        pack=job.pack,
        hardware=job.hardware,
        steps=job.steps,
        tables={read: merged.tables[read] for read in analysis.reads},
        findings=tuple(merged.findings) if analysis.reads_findings else (),
        rl_timers=job.rl_timers,
    )


def _merge(merged: Section, section: Section, name: str, pack: RulePack) -> None:
    twice = sorted(set(section.tables) & set(merged.tables))
    if twice:
        raise ValueError(f"analysis {name!r} makes table(s) {twice} an earlier analysis made")
    require_known_checks([*section.findings, *section.causes])
    merged.tables.update(section.tables)
    merged.findings[:] = drop_superseded([*merged.findings, *section.findings], pack)
    merged.notes.extend(section.notes)
    merged.warnings.extend(section.warnings)
    merged.causes.extend(section.causes)


def drop_superseded(findings: list[Finding], pack: RulePack) -> list[Finding]:
    """Where a check that `supersedes` others (rules/checks.toml) reports a rank and step, their findings for that
    rank and step go: the superseding finding says all they say, and more — one finding per rank and step, not two.
    Applied after every merge, so a later analysis reads the findings the report will have."""
    covered = {
        (old, finding.rank, finding.step) for finding in findings for old in pack.check(finding.check).supersedes
    }
    return (
        [finding for finding in findings if (finding.check, finding.rank, finding.step) not in covered]
        if covered
        else findings
    )
