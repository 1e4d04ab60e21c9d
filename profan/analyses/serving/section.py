"""The serving section of a report: the iteration table and the per-phase table (`iterations`, `phases`), and a
note per rank saying which marker cut it into iterations. Nothing for a capture that is no serving capture, so a
training report is as it was."""

from __future__ import annotations

import polars as pl

from profan.analyses.contract import Job, Section
from profan.analyses.serving.findings import rank_findings
from profan.analyses.serving.iterations import bucket_table, iteration_table
from profan.analyses.serving.phases import phase_buckets, phase_table
from profan.model.textfmt import counted
from profan.rulepack.serving import rules as serving_rules


def section(job: Job) -> Section:
    """Tables ``serving_iterations``, ``serving_phases`` and ``serving_phase_buckets``, and the marker notes."""
    its = iteration_table(job.ranks)
    if its.is_empty():  # the tables exist (empty) so the diagnosis may declare it reads them; reports drop them
        return Section(
            tables={
                "serving_iterations": its,
                "serving_phases": pl.DataFrame(),
                "serving_phase_buckets": pl.DataFrame(),
            }
        )
    device = {r.rank: "CPU" if "CPU-only" in r.kernel_variant else "GPU" for r in job.ranks}
    found = [
        f
        for (rank,), rows in its.group_by(["rank"], maintain_order=True)
        for f in rank_findings(rows, job.pack, device.get(int(rank), "GPU"))  # type: ignore[arg-type]
    ]
    return Section(
        tables={
            "serving_iterations": its,
            "serving_phases": phase_table(its),
            "serving_phase_buckets": phase_buckets(its, bucket_table(job.ranks)),
        },
        findings=found,
        notes=marker_notes(its),
    )


def marker_notes(its: pl.DataFrame) -> list[str]:
    """One note per marker rule used: which ranks it cut into how many iterations, and where the rule comes
    from; one for the iterations whose phase nothing told."""
    notes = []
    used = its.group_by("rule", maintain_order=True).agg(pl.col("rank").unique().sort(), pl.len().alias("n"))
    served = serving_rules()
    sources = {marker.id: marker.source for marker in served.markers} | {served.layer_id: served.layer_source}
    for rule, ranks, n in used.iter_rows():
        source = sources.get(rule, "the trace's ProfilerStep#N annotations")
        notes.append(
            f"serving: {counted(ranks, 'rank')} cut into {counted(n, 'model iteration')} by marker {rule} ({source}); "
            "an iteration's period runs to the next one's start, so the periods add up to the captured span"
        )
    unknown = its.filter(pl.col("phase") == "unknown")
    if not unknown.is_empty():
        notes.append(
            f"serving: {counted(unknown.height, 'iteration')} of {counted(unknown['rank'].to_list(), 'rank')} "
            "have no phase: no annotation, attention kernel variant or token input shape tells prefill from decode "
            "(rules/serving.toml)"
        )
    return notes
