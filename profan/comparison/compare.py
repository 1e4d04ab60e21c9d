"""``profan compare A B``: what got slower between two ranks of one job, or between two runs of the same job.

Sides: two rank files or folders (one rank each), two run directories (every rank of each run, averaged per rank),
or one directory with ``ranks=(a, b)``. Both sides are read with the same per-rank map as ``analyze``; steps are
matched by step number (by order when the numbers differ, e.g. two runs profiled at different steps). Everything
is a per-step, per-rank average so sides with different step or rank counts compare fairly.

Every delta cites rows on both sides: kernel rows (CSV lines or trace events) per bucket and per kernel, and the
step rows (step_trace_time.csv) for step totals. Evidence paths are relative to the directory that holds both
sides, so ``profan evidence`` reads them back from one root."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl

from profan import trust
from profan.analyses.per_rank import steps as steps_mod
from profan.comparison.cause_changes import CHECK as CAUSES_CHECK
from profan.comparison.cause_changes import causes_table, match_causes, side_causes
from profan.comparison.coverage import left_out, left_out_warnings, one_sided_pairs, step_rows_one_side
from profan.comparison.findings import new_missing_findings, regression_findings, total_finding
from profan.comparison.serving import phase_tables
from profan.comparison.sides import (
    Side,
    align_steps,
    common_root,
    kept,
    load_side,
    side_kernels,
    side_prefix,
    step_ids,
    step_totals,
)
from profan.comparison.tables import KEY, fold_shapes, pair, pair_steps, per_key, shown, step_spread
from profan.model.errors import ProfanInputError
from profan.model.findings import number_findings
from profan.model.report import Report
from profan.model.textfmt import fmt_ranks
from profan.ranks.executor import Executor
from profan.rulepack import limits
from profan.rulepack.pack import RulePack, load, require_known_checks
from profan.sources.common.readback import file_sizes


def compare(
    path: str | Path,
    b: str | Path | None = None,
    *,
    ranks: tuple[int, int] | None = None,
    rules: list[str | Path] | None = None,
    pack: RulePack | None = None,
    progress=None,
    jobs: int | Executor | None = None,
) -> Report:
    """Compare side A with side B (B minus A: positive deltas are regressions of B). ``jobs``: processes reading
    each side's ranks (or the executor that reads them), as for `profan.analyze`."""
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    pack = pack or load([Path(p) for p in rules or []])
    with limits.scoped(pack.limits):  # both sides read and diagnosed under this call's bounds, then restored
        pa = Path(path)
        if ranks is not None:
            if b is not None:
                raise ProfanInputError(Path(b), "give either two paths or one directory with --ranks, not both")
            root, rd, disc = load_side(pa, pack, list(ranks), say, jobs)
            by = {r.rank: r for r in rd}
            common = root.resolve()
            sa = Side("A", pa, "", [by[ranks[0]]], disc=disc)
            sb = Side("B", pa, "", [by[ranks[1]]], disc=disc)
            mode = f"ranks {ranks[0]} and {ranks[1]} of one job"
        else:
            if b is None:
                raise ProfanInputError(pa, "compare needs two paths, or one directory and --ranks A,B")
            pb = Path(b)
            ra, rda, disc_a = load_side(pa, pack, None, say, jobs)
            rb, rdb, disc_b = load_side(pb, pack, None, say, jobs)
            common = common_root(ra, rb)
            sa = Side("A", pa, side_prefix(ra, common), rda, disc=disc_a)
            sb = Side("B", pb, side_prefix(rb, common), rdb, disc=disc_b)
            mode = "two runs" if len(rda) > 1 or len(rdb) > 1 else "two ranks (one file or folder each)"
        return build_compare(sa, sb, pack, common, mode, t0)


def build_compare(sa: Side, sb: Side, pack: RulePack, common: Path, mode: str, t0: float) -> Report:
    from profan.model.version import __version__

    ka, kb = side_kernels(sa, pack), side_kernels(sb, pack)
    if ka.is_empty() or kb.is_empty():
        side = sa if ka.is_empty() else sb
        raise ProfanInputError(
            side.path,
            "no kernel rows to compare (kernel_details.csv or a trace with device events is needed on both sides)",
        )
    st_a, st_b = steps_mod.step_table(sa.ranks), steps_mod.step_table(sb.ranks)
    sa.steps, sb.steps, how = align_steps(ka, kb, st_a, st_b)
    notes = [
        f"compare: {mode}; B minus A, per step and per rank; steps matched {how}: "
        + ", ".join(f"{step}↔{y}" for step, y in zip(sa.steps, sb.steps, strict=True))
    ]
    if len(sa.ranks) != len(sb.ranks):
        notes.append(f"compare: A has {len(sa.ranks)} rank(s), B has {len(sb.ranks)}; totals are per-rank averages")
    buckets = pair(per_key(ka, sa, ["bucket"]), per_key(kb, sb, ["bucket"]), ["bucket"])
    kernels = pair(per_key(ka, sa, [*KEY, "bucket"]), per_key(kb, sb, [*KEY, "bucket"]), [*KEY, "bucket"])
    kernels = fold_shapes(kernels, ka, kb, sa, sb)
    tot_a, tot_b = step_totals(sa, st_a), step_totals(sb, st_b)
    steps_t = pair_steps(tot_a, tot_b)
    total_a, total_b = (
        float(key.filter(kept(s))["time_us"].sum()) / max(1, len(s.steps)) / max(1, len(s.ranks))
        for key, s in ((ka, sa), (kb, sb))
    )
    left = {s.label: left_out(key, t, s) for key, t, s in ((ka, st_a, sa), (kb, st_b, sb))}
    findings = [total_finding((total_a, total_b), steps_t, buckets, (sa, sb), pack, left)]
    findings += regression_findings(buckets, kernels, total_a, pack, step_spread((ka, kb), (sa, sb), "bucket"))
    findings += new_missing_findings(kernels, total_a, pack)
    verdict, diagnosed, t_diagnose = diagnose_sides(sa, sb, pack, (step_ids(ka, st_a), step_ids(kb, st_b)))
    tables = {
        "compare_causes": verdict,
        "compare_steps": steps_t,
        "compare_buckets": shown(buckets, ["bucket"]),
        "compare_kernels": shown(kernels, ["op", "name", "input_shapes", "bucket"]),
        **phase_tables(sa, sb),  # serving runs: per phase (`comparison.serving`)
    }
    tables = {key: value for key, value in tables.items() if not value.is_empty()}
    notes += diagnosed
    warnings = _rank_warnings(sa, sb)
    warnings += left_out_warnings(left, sa, sb) + one_sided_pairs(ka, kb, sa, sb)
    warnings += step_rows_one_side(tot_a, tot_b, sa, sb)
    findings = number_findings([finding for finding in findings if finding is not None])
    require_known_checks(findings)
    return Report(
        source=source_block(sa, sb, common, mode),
        findings=findings,
        tables=tables,
        warnings=warnings,
        notes=notes,
        meta={
            "profan": __version__,
            "rule_files": pack.files,
            "timings_s": {"total": round(time.perf_counter() - t0, 3), "diagnose": round(t_diagnose, 3)},
        },
        read_root=common,
    )


def diagnose_sides(
    sa: Side, sb: Side, pack: RulePack, profiled: tuple[list, list]
) -> tuple[pl.DataFrame, list[str], float]:
    """The verdict of the comparison: each side diagnosed as `profan analyze` diagnoses it (from the ranks already
    read), its causes matched across the sides (table ``compare_causes``), a note where the sides profiled
    different steps (each side's gains are per step of its own steps; ``profiled``: each side's steps, the aligned
    ones in ``Side.steps``), and the seconds it took."""
    start = time.perf_counter()
    causes = [side_causes(side.ranks, pack, side.disc) if side.disc is not None else [] for side in (sa, sb)]
    same_ranks = sorted(rank.rank for rank in sa.ranks) == sorted(rank.rank for rank in sb.ranks)
    table = causes_table(match_causes(causes[0], causes[1], pack, by_ranks=same_ranks), pack)
    took = time.perf_counter() - start
    a_steps, b_steps = ([step for step in steps if step is not None] for steps in profiled)
    only = [
        f"step{'s' if len(alone) > 1 else ''} {fmt_ranks(alone)} in {side.label} only"
        for side, steps in ((sa, a_steps), (sb, b_steps))
        if (alone := sorted(set(steps) - set(side.steps)))
    ]
    if not only or not a_steps or not b_steps:
        return table, [], took
    text = pack.check(CAUSES_CHECK)["compare"]["steps_differ"]
    note = text.format(a_steps=fmt_ranks(a_steps), b_steps=fmt_ranks(b_steps), only="; ".join(only))
    return table, [f"compare: {note}"], took


def source_block(sa: Side, sb: Side, common: Path, mode: str) -> dict:
    """The report's source block: both sides' paths, ranks, aligned steps and files, sealed with the sizes of
    the files read, so `profan evidence` reads the cited rows back from the one root."""

    def side(s: Side) -> dict:
        return {
            "path": str(s.path),
            "ranks": [rank.rank for rank in s.ranks],
            "steps": s.steps,
            "files": [{key: s.file(file) for key, file in rank.files.items()} for rank in s.ranks],
        }

    source = {
        "kind": "compare",
        "mode": mode,
        "root": str(common),
        "root_abs": str(common),
        "format": "compare",
        "a": side(sa),
        "b": side(sb),
        "ranks": [],
    }
    source["file_bytes"] = file_sizes(
        common, {s.file(file) for s in (sa, sb) for rank in s.ranks for file in rank.files.values()}
    )
    source["root_seal"] = trust.seal(source["root_abs"], source["file_bytes"])
    return source


def _rank_warnings(sa: Side, sb: Side) -> list[str]:
    """Each side's per-rank warnings, named by side and rank."""
    return [f"{s.label} rank {rank.rank}: {warning}" for s in (sa, sb) for rank in s.ranks for warning in rank.warnings]
