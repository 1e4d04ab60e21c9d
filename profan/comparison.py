"""``profan compare A B``: what got slower between two ranks of one job, or between two runs of the same job.

Sides: two rank files or folders (one rank each), two run directories (every rank of each run, averaged per rank),
or one directory with ``ranks=(a, b)``. Both sides are read with the same per-rank map as ``analyze``; steps are
matched by step number (by order when the numbers differ, e.g. two runs profiled at different steps). Everything
is a per-step, per-rank average so sides with different step or rank counts compare fairly.

Every delta cites rows on both sides: kernel rows (CSV lines or trace events) per bucket and per kernel, and the
step rows (step_trace_time.csv) for step totals. Evidence paths are relative to the directory that holds both
sides, so ``profan evidence`` reads them back from one root.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan import trust
from profan.analyses import steps as steps_mod
from profan.analyses.common import graded, kernel_table, ms, pct, top_lines_frame
from profan.model.errors import ProfanInputError
from profan.model.evidence import MAX_CITED, Evidence, cite_events, cite_lines, file_sizes
from profan.model.findings import Finding, number_findings
from profan.model.report import Report
from profan.ranks.rankmap import RankData, load_ranks
from profan.render.textfmt import id_list
from profan.rulepack import limits
from profan.rulepack.pack import RulePack, load
from profan.sources.discover import base_dir, discover

CHECK = "compare-regression"
KEY = ["op", "kname", "input_shapes"]


@dataclass
class Side:
    label: str  # "A" | "B"
    path: Path
    prefix: str  # the side's data root relative to the common root ('' when equal)
    ranks: list[RankData]
    steps: list = field(default_factory=list)  # aligned step ids of this side

    def file(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @property
    def desc(self) -> str:
        rk = ", ".join(str(r.rank) for r in self.ranks)
        return f"{self.path} (rank{'s' if len(self.ranks) != 1 else ''} {rk})"


def _load(
    path: Path, pack: RulePack, only: list[int] | None, say, jobs: int | None = None
) -> tuple[Path, list[RankData]]:
    disc = discover(path)
    ranks = disc.ranks
    if only is not None:
        ranks = [rs for rs in ranks if rs.rank in only]
        missing = sorted(set(only) - {rs.rank for rs in ranks})
        if missing:
            raise ProfanInputError(
                path,
                f"no rank {', '.join(map(str, missing))} here (ranks: {', '.join(str(r.rank) for r in disc.ranks)})",
            )
    say(f"reading {len(ranks)} rank(s) of {path}")
    return base_dir(disc.root), load_ranks(ranks, disc.root, pack, jobs, say)


def _common_root(a: Path, b: Path) -> Path:
    return Path(os.path.commonpath([str(a.resolve()), str(b.resolve())]))


def _prefix(side_root: Path, common: Path) -> str:
    rel = side_root.resolve().relative_to(common).as_posix()
    return "" if rel == "." else rel


# ------------------------------------------------------------------------------------------ per-side tables


def _kernels(side: Side, pack: RulePack) -> pl.DataFrame:
    """Kernel groups of every rank of the side, with file, locator kind and the aligned step index. ``kname``: the
    name without an HCCL op's per-group sequence number (roles ``hccl_op_sequence``): the same collective in
    another step or run has another number, so kernels are matched on the name without it."""

    def where(r: RankData) -> dict[str, str]:
        kfile = getattr(r, "kernel_file", "kernel_details")
        return {
            "file": side.file(r.files[kfile]),
            "loc_kind": "events" if getattr(r, "kernel_locator", "lines") == "events" else "lines",
        }

    kname = pl.col("name").str.replace(pack.roles.hccl_op_sequence, "$1").alias("kname")
    k = kernel_table(
        side.ranks,
        ["step", "op", "name", kname, "input_shapes", "bucket", "count", "time_us", "lines", "line_durs"],
        per_rank=where,
    )
    return pl.DataFrame() if k is None else k


def _align_steps(ka: pl.DataFrame, kb: pl.DataFrame, sa: pl.DataFrame, sb: pl.DataFrame) -> tuple[list, list, str]:
    def ids(k: pl.DataFrame, s: pl.DataFrame) -> list:
        vals = set()
        for f in (k, s):
            if not f.is_empty() and "step" in f.columns:
                vals |= set(f["step"].to_list())
        real = sorted(v for v in vals if v is not None)
        return real or [None]

    a, b = ids(ka, sa), ids(kb, sb)
    common = [x for x in a if x in b]
    if common:
        return common, common, "by step number"
    n = min(len(a), len(b))
    return a[:n], b[:n], "by order (the two sides profiled different step numbers)"


def _kept(side: Side) -> pl.Expr:
    """Rows inside the side's aligned steps. A side without step numbers keeps every row; a row without a step
    (outside any profiled step) is kept only there, never counted as an aligned step's."""
    real = [s for s in side.steps if s is not None]
    return pl.col("step").is_in(real).fill_null(False) if real else pl.lit(True)


def _left_out(k: pl.DataFrame, steps_tab: pl.DataFrame, side: Side) -> pl.DataFrame:
    """Per step of the side that the alignment paired with nothing (null: kernel rows outside any profiled step):
    kernel launches, kernel time and ranks. A step with a step row and no kernel rows is listed with 0 launches.
    The per-step comparison cannot hold these, so the report must say what they are worth."""
    work = (
        k.filter(~_kept(side))
        .group_by("step")
        .agg(
            pl.col("count").sum().cast(pl.Int64).alias("launches"),
            pl.col("time_us").sum().alias("kernel_us"),
            pl.col("rank").unique().sort().alias("ranks"),
        )
    )
    if not steps_tab.is_empty() and any(s is not None for s in side.steps):
        rows_only = (
            steps_tab.filter(~_kept(side) & pl.col("step").is_not_null())
            .group_by("step")
            .agg(
                pl.lit(0, pl.Int64).alias("launches"),
                pl.lit(0.0).alias("kernel_us"),
                pl.col("rank").unique().sort().alias("ranks"),
            )
        )
        work = pl.concat([work, rows_only.join(work, on="step", how="anti")], how="vertical_relaxed")
    return work.sort("step", nulls_last=True)


def _left_out_warnings(left: dict[str, pl.DataFrame], sa: Side, sb: Side) -> list[str]:
    """One warning per side and kind (steps without a counterpart; kernel rows outside any profiled step), each
    with its counts: their time is in no total and no delta, and a comparison of less than was given must say so."""
    out = []
    for side, other in ((sa, sb), (sb, sa)):
        t, o = left[side.label], left[other.label]
        paired = t.filter(pl.col("step").is_not_null())
        if paired.height:
            ids, n = paired["step"].to_list(), paired.height
            out.append(
                f"compare: step{'s' if n > 1 else ''} {id_list(ids)} of {side.label} {'have' if n > 1 else 'has'} "
                f"no counterpart in {other.label} ({n} step{'s' if n > 1 else ''}; {_work(paired)}): "
                f"left out of the comparison"
            )
        outside = t.filter(pl.col("step").is_null())
        if outside.height:
            theirs = o.filter(pl.col("step").is_null())
            out.append(
                f"compare: {side.label} has kernels outside any profiled step ({_work(outside)}; {other.label}: "
                f"{_work(theirs) if theirs.height else 'none'}): they belong to no step, so the per-step "
                f"comparison leaves them out"
            )
    return out


def _work(t: pl.DataFrame) -> str:
    launches, us = int(t["launches"].sum()), float(t["kernel_us"].sum())
    ranks = sorted(set(t["ranks"].explode().drop_nulls().to_list()))
    return (
        f"{launches:,} kernel launch{'es' if launches != 1 else ''}, {ms(us)} of kernel time, "
        f"rank{'s' if len(ranks) != 1 else ''} {id_list(ranks)}"
    )


def _one_sided_pairs(ka: pl.DataFrame, kb: pl.DataFrame, sa: Side, sb: Side) -> list[str]:
    """Aligned steps with device work on one side and none on the other (a step row without kernel rows): they
    stay in the comparison, at 0 on the empty side, and the report says which they are."""
    if not any(s is not None for s in sa.steps) or not any(s is not None for s in sb.steps):
        return []
    pairs = pl.DataFrame({"a_step": sa.steps, "b_step": sb.steps}, schema={"a_step": pl.Int64, "b_step": pl.Int64})
    work = [
        pairs.join(
            k.filter(_kept(side)).group_by("step").agg(pl.col("count").sum().alias(f"{p}_n")),
            left_on=f"{p}_step",
            right_on="step",
            how="left",
        )[f"{p}_n"].fill_null(0)
        for k, side, p in ((ka, sa, "a"), (kb, sb, "b"))
    ]
    pairs = pairs.with_columns(a_n=work[0], b_n=work[1]).filter((pl.col("a_n") == 0) != (pl.col("b_n") == 0))
    return [
        f"compare: step {r['a_step']}↔{r['b_step']} has device work in {'A' if r['a_n'] else 'B'} only "
        f"({int(r['a_n'] or r['b_n']):,} kernel launches; {'B' if r['a_n'] else 'A'} has the step but no kernel "
        f"rows in it): counted as 0 there"
        for r in pairs.iter_rows(named=True)
    ]


def _step_totals(side: Side, steps_tab: pl.DataFrame) -> pl.DataFrame:
    """Per aligned step (index), mean over ranks of the step split, with the step rows as locators."""
    if steps_tab.is_empty():
        return pl.DataFrame()
    idx = {s: i for i, s in enumerate(side.steps)}
    t = steps_tab.filter(_kept(side))
    if t.is_empty():
        return pl.DataFrame()
    t = t.with_columns(
        pl.col("step").replace_strict(idx, default=None, return_dtype=pl.Int64).alias("pair"),
        ((pl.lit(f"{side.prefix}/") + pl.col("file")) if side.prefix else pl.col("file")).alias("file"),
    )
    mid = pl.len() // 2  # the median rank's row is the one cited; the values are means over ranks
    return (
        t.group_by("pair")
        .agg(
            pl.col("step").first(),
            pl.col("step_us").mean(),
            pl.col("computing_us").mean(),
            pl.col("comm_not_overlapped_us").mean(),
            pl.col("free_us").mean(),
            pl.col("file").sort_by("step_us").get(mid),
            pl.col("src_line").sort_by("step_us").get(mid),
            pl.col("rank").sort_by("step_us").get(mid).alias("cited_rank"),
            pl.col("step_us").sort_by("step_us").get(mid).alias("cited_step_us"),
            pl.len().alias("ranks"),
        )
        .sort("pair")
    )


def _agg(k: pl.DataFrame, side: Side, keys: list[str]) -> pl.DataFrame:
    """Per key: time and launches per step and rank (averaged), and the largest rows of the largest rank."""
    steps_n = max(1, len(side.steps))
    ranks_n = max(1, len(side.ranks))
    k = k.filter(_kept(side))
    if k.is_empty():
        return pl.DataFrame()
    tot = k.group_by(keys).agg(
        *(
            [pl.col("name").sort_by(["time_us", "name"], descending=[True, False]).first()]
            if "name" not in keys and "kname" in keys
            else []
        ),
        (pl.col("time_us").sum() / (steps_n * ranks_n)).alias("time_us"),
        (pl.col("count").sum() / (steps_n * ranks_n)).alias("count"),
        pl.col("count").sum().alias("rows"),
    )
    per_rank = k.group_by([*keys, "rank", "file", "loc_kind"]).agg(pl.col("time_us").sum().alias("_t"))
    top = (
        per_rank.sort(["_t", "rank"], descending=[True, False])  # ties: the lower rank, every run
        .group_by(keys, maintain_order=True)
        .first()
    )
    locs = top_lines_frame(
        k.join(top.select(*keys, "rank"), on=[*keys, "rank"], how="semi", nulls_equal=True), keys, MAX_CITED
    ).rename({"lines": "locs"})
    return tot.join(top.select(*keys, "rank", "file", "loc_kind"), on=keys, how="left", nulls_equal=True).join(
        locs, on=keys, how="left", nulls_equal=True
    )


def _pair(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    if a.is_empty() and b.is_empty():
        return pl.DataFrame()
    cols = ["time_us", "count", "rows", "rank", "file", "loc_kind", "locs", "name"]
    cols = [c for c in cols if (a.is_empty() or c in a.columns) and (b.is_empty() or c in b.columns)]
    a = a.rename({c: f"a_{c}" for c in cols}) if not a.is_empty() else None
    b = b.rename({c: f"b_{c}" for c in cols}) if not b.is_empty() else None
    if a is None or b is None:  # one order for the same input: later rankings keep it for equal deltas
        return (a if a is not None else b).sort(keys, nulls_last=True)
    j = a.join(b, on=keys, how="full", coalesce=True, nulls_equal=True).sort(keys, nulls_last=True)
    j = j.with_columns(
        pl.col("a_time_us").fill_null(0.0),
        pl.col("b_time_us").fill_null(0.0),
        pl.col("a_count").fill_null(0.0),
        pl.col("b_count").fill_null(0.0),
    )
    status = (
        pl.when(pl.col("a_rows").is_null())
        .then(pl.lit("new"))
        .when(pl.col("b_rows").is_null())
        .then(pl.lit("missing"))
        .otherwise(pl.lit("both"))
    )
    j = j.with_columns((pl.col("b_time_us") - pl.col("a_time_us")).alias("delta_us"), status.alias("status"))
    if "a_name" in j.columns:
        j = j.with_columns(pl.coalesce("b_name", "a_name").alias("name")).drop("a_name", "b_name")
    return j


def _cite(row: dict, p: str, select: dict, values: dict) -> Evidence | None:
    locs = row.get(f"{p}_locs")
    if not locs:
        return None
    cite = cite_events if row[f"{p}_loc_kind"] == "events" else cite_lines
    return cite(
        row[f"{p}_file"], locs, int(row[f"{p}_rows"]), {**select, "cited_rank": row[f"{p}_rank"]}, values=values
    )


# ------------------------------------------------------------------------------------------ the comparison


def compare(
    a: str | Path,
    b: str | Path | None = None,
    *,
    ranks: tuple[int, int] | None = None,
    rules: list[str | Path] | None = None,
    pack: RulePack | None = None,
    progress=None,
    jobs: int | None = None,
) -> Report:
    """Compare side A with side B (B minus A: positive deltas are regressions of B). ``jobs``: processes reading
    each side's ranks, as for `profan.analyze`."""
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    pack = pack or load([Path(p) for p in rules or []])
    limits.use(pack.limits)
    pa = Path(a)
    if ranks is not None:
        if b is not None:
            raise ProfanInputError(Path(b), "give either two paths or one directory with --ranks, not both")
        root, rd = _load(pa, pack, list(ranks), say, jobs)
        by = {r.rank: r for r in rd}
        common = root.resolve()
        sa = Side("A", pa, "", [by[ranks[0]]])
        sb = Side("B", pa, "", [by[ranks[1]]])
        mode = f"ranks {ranks[0]} and {ranks[1]} of one job"
    else:
        if b is None:
            raise ProfanInputError(pa, "compare needs two paths, or one directory and --ranks A,B")
        pb = Path(b)
        ra, rda = _load(pa, pack, None, say, jobs)
        rb, rdb = _load(pb, pack, None, say, jobs)
        common = _common_root(ra, rb)
        sa, sb = Side("A", pa, _prefix(ra, common), rda), Side("B", pb, _prefix(rb, common), rdb)
        mode = "two runs" if len(rda) > 1 or len(rdb) > 1 else "two ranks (one file or folder each)"
    return build_compare(sa, sb, pack, common, mode, t0)


def build_compare(sa: Side, sb: Side, pack: RulePack, common: Path, mode: str, t0: float) -> Report:
    from profan import __version__

    ka, kb = _kernels(sa, pack), _kernels(sb, pack)
    if ka.is_empty() or kb.is_empty():
        side = sa if ka.is_empty() else sb
        raise ProfanInputError(
            side.path,
            "no kernel rows to compare (kernel_details.csv or a trace with device events is needed on both sides)",
        )
    st_a, st_b = steps_mod.step_table(sa.ranks), steps_mod.step_table(sb.ranks)
    sa.steps, sb.steps, how = _align_steps(ka, kb, st_a, st_b)
    notes = [
        f"compare: {mode}; B minus A, per step and per rank; steps matched {how}: "
        + ", ".join(f"{x}↔{y}" for x, y in zip(sa.steps, sb.steps, strict=True))
    ]
    if len(sa.ranks) != len(sb.ranks):
        notes.append(f"compare: A has {len(sa.ranks)} rank(s), B has {len(sb.ranks)}; totals are per-rank averages")
    buckets = _pair(_agg(ka, sa, ["bucket"]), _agg(kb, sb, ["bucket"]), ["bucket"])
    kernels = _pair(_agg(ka, sa, [*KEY, "bucket"]), _agg(kb, sb, [*KEY, "bucket"]), [*KEY, "bucket"])
    kernels = _fold_shapes(kernels, ka, kb, sa, sb)
    tot_a, tot_b = _step_totals(sa, st_a), _step_totals(sb, st_b)
    steps_t = _steps_pair(tot_a, tot_b)
    total_a, total_b = (
        float(k.filter(_kept(s))["time_us"].sum()) / max(1, len(s.steps)) / max(1, len(s.ranks))
        for k, s in ((ka, sa), (kb, sb))
    )
    left = {s.label: _left_out(k, t, s) for k, t, s in ((ka, st_a, sa), (kb, st_b, sb))}
    findings = [_total_finding(total_a, total_b, steps_t, buckets, sa, sb, pack, left)]
    findings += _regression_findings(buckets, kernels, total_a, pack)
    findings += _new_missing_findings(kernels, total_a, pack)
    tables = {
        "compare_steps": steps_t,
        "compare_buckets": _show(buckets, ["bucket"]),
        "compare_kernels": _show(kernels, ["op", "name", "input_shapes", "bucket"]),
    }
    tables = {k: v for k, v in tables.items() if not v.is_empty()}
    source = _source(sa, sb, common, mode)
    warnings = [f"{s.label} rank {r.rank}: {w}" for s in (sa, sb) for r in s.ranks for w in r.warnings]
    warnings += _left_out_warnings(left, sa, sb) + _one_sided_pairs(ka, kb, sa, sb)
    warnings += _step_rows_one_side(tot_a, tot_b, sa, sb)
    return Report(
        source=source,
        findings=number_findings([f for f in findings if f is not None]),
        tables=tables,
        warnings=warnings,
        notes=notes,
        meta={
            "profan": __version__,
            "rule_files": pack.files,
            "timings_s": {"total": round(time.perf_counter() - t0, 3)},
        },
        read_root=common,
    )


def _source(sa: Side, sb: Side, common: Path, mode: str) -> dict:
    """The report's source block: both sides' paths, ranks, aligned steps and files, sealed with the sizes of
    the files read, so `profan evidence` reads the cited rows back from the one root."""

    def side(s: Side) -> dict:
        return {
            "path": str(s.path),
            "ranks": [r.rank for r in s.ranks],
            "steps": s.steps,
            "files": [{k: s.file(v) for k, v in r.files.items()} for r in s.ranks],
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
    source["file_bytes"] = file_sizes(common, {s.file(v) for s in (sa, sb) for r in s.ranks for v in r.files.values()})
    source["root_seal"] = trust.seal(source["root_abs"], source["file_bytes"])
    return source


def _fold_shapes(kernels: pl.DataFrame, ka: pl.DataFrame, kb: pl.DataFrame, sa: Side, sb: Side) -> pl.DataFrame:
    """Kernels whose name runs on both sides but whose shapes differ are compared by name ('shape changed')
    instead of being listed as new on one side and missing on the other (e.g. GroupedMatmul token counts).

    Only a name with shapes on A alone *and* shapes on B alone is folded: a shape that one side adds to shapes
    both run (or one renamed row that leaves its name's other shapes on both sides) has no counterpart, so it
    stays new or missing — flagged ``same_name_other_shape`` for the message."""
    if "status" not in kernels.columns:
        return kernels.with_columns(pl.lit(False).alias("same_name_other_shape"))
    two = ["op", "kname", "bucket"]
    on_a = pl.col("a_rows").is_not_null().any().over(two)
    on_b = pl.col("b_rows").is_not_null().any().over(two)
    kernels = kernels.with_columns(((pl.col("status") != "both") & on_a & on_b).alias("same_name_other_shape"))
    one_side = pl.col("same_name_other_shape")
    moved = kernels.filter(
        one_side
        & (one_side & (pl.col("status") == "missing")).any().over(two)
        & (one_side & (pl.col("status") == "new")).any().over(two)
    )
    if moved.is_empty():
        return kernels
    keys = [*KEY, "bucket"]
    fa = _agg(
        ka.join(moved.filter(pl.col("status") == "missing").select(keys), on=keys, how="semi", nulls_equal=True),
        sa,
        two,
    )
    fb = _agg(
        kb.join(moved.filter(pl.col("status") == "new").select(keys), on=keys, how="semi", nulls_equal=True), sb, two
    )
    shapes = moved.group_by(two).agg(
        *(pl.col("input_shapes").filter(pl.col("status") == st).sort().first().alias(st) for st in ("missing", "new"))
    )
    folded = (
        _pair(fa, fb, two)
        .join(shapes, on=two, how="left", nulls_equal=True)
        .with_columns(
            (pl.lit("A: ") + pl.col("missing").fill_null("?") + pl.lit(" | B: ") + pl.col("new").fill_null("?")).alias(
                "input_shapes"
            ),
            pl.lit("shape changed").alias("status"),
            pl.lit(True).alias("same_name_other_shape"),
        )
    )
    folded = folded.drop("missing", "new")
    return pl.concat(
        [kernels.join(moved.select(keys), on=keys, how="anti", nulls_equal=True), folded], how="diagonal_relaxed"
    )


def _show(t: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    if t.is_empty() or "delta_us" not in t.columns:
        return pl.DataFrame()
    cols = [
        *keys,
        "status",
        "a_time_us",
        "b_time_us",
        "delta_us",
        "a_count",
        "b_count",
        "a_rank",
        "a_file",
        "a_locs",
        "b_rank",
        "b_file",
        "b_locs",
    ]
    return (
        t.select([c for c in cols if c in t.columns])
        .with_columns(pl.col("a_locs").list.head(5), pl.col("b_locs").list.head(5))
        .sort(pl.col("delta_us").abs(), descending=True, maintain_order=True)
    )


def _steps_pair(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    if a.is_empty() or b.is_empty():
        return pl.DataFrame()
    cols = [
        "step",
        "step_us",
        "computing_us",
        "comm_not_overlapped_us",
        "free_us",
        "file",
        "src_line",
        "cited_rank",
        "cited_step_us",
        "ranks",
    ]
    j = a.rename({c: f"a_{c}" for c in cols}).join(b.rename({c: f"b_{c}" for c in cols}), on="pair", how="inner")
    return j.with_columns(
        (pl.col("b_step_us") - pl.col("a_step_us")).alias("delta_us"),
        (pl.col("b_computing_us") - pl.col("a_computing_us")).alias("delta_computing_us"),
        (pl.col("b_free_us") - pl.col("a_free_us")).alias("delta_free_us"),
    )


def _step_rows_one_side(tot_a: pl.DataFrame, tot_b: pl.DataFrame, sa: Side, sb: Side) -> list[str]:
    """Aligned steps with a step_trace_time.csv row on one side only: the step-time comparison (an inner pairing)
    cannot hold them, so each is named with its step time, and a side without any step rows is said once."""
    if tot_a.is_empty() and tot_b.is_empty():
        return []
    if tot_a.is_empty() or tot_b.is_empty():
        has, hasnt = (sa, sb) if tot_b.is_empty() else (sb, sa)
        return [
            f"compare: only {has.label} has step_trace_time.csv rows ({hasnt.label} has none): step time is not "
            "compared, kernel time is"
        ]
    out = []
    for t, o, side, other in ((tot_a, tot_b, sa, sb), (tot_b, tot_a, sb, sa)):
        alone = t.join(o.select("pair"), on="pair", how="anti")
        out += [
            f"compare: step {r['step']} has a step_trace_time.csv row in {side.label} only ({ms(r['step_us'])}, mean "
            f"over {r['ranks']} rank(s)); {other.label} has kernel rows in its counterpart "
            f"{other.steps[r['pair']]} but no step row: that step's time is not compared"
            for r in alone.iter_rows(named=True)
        ]
    return out


def _step_evidence(steps_t: pl.DataFrame, sa: Side, sb: Side) -> list[Evidence]:
    """The step_trace_time.csv row of the median rank, for every paired step, on both sides."""
    return [
        cite_lines(
            row[f"{p}_file"],
            [row[f"{p}_src_line"]],
            1,
            {"source": "step_trace_time", "side": side.label, "step": row[f"{p}_step"], "rank": row[f"{p}_cited_rank"]},
            values={
                "step_us": round(row[f"{p}_cited_step_us"], 3),
                "mean_step_us_over_ranks": round(row[f"{p}_step_us"], 3),
                "ranks": row[f"{p}_ranks"],
            },
        )
        for row in steps_t.iter_rows(named=True)
        for p, side in (("a", sa), ("b", sb))
    ]


def _bucket_evidence(buckets: pl.DataFrame) -> list[Evidence]:
    """Without step rows: the kernel rows of the bucket that moved most, on both sides."""
    if "delta_us" not in buckets.columns:
        return []
    top = buckets.sort(pl.col("delta_us").abs(), descending=True, maintain_order=True).head(1)
    return [
        ev
        for row in top.iter_rows(named=True)
        for p in ("a", "b")
        if (
            ev := _cite(
                row,
                p,
                {"source": "kernels", "bucket": row["bucket"], "side": p.upper()},
                {"time_us": round(row[f"{p}_time_us"], 3)},
            )
        )
        is not None
    ]


def _left_out_text(left: dict[str, pl.DataFrame]) -> tuple[str, dict]:
    """What the comparison leaves out, per side, for the total finding's message and metrics."""
    parts, metrics = [], {}
    for label, t in left.items():
        if t.is_empty():
            continue
        steps = t.filter(pl.col("step").is_not_null())["step"].to_list()
        metrics[label.lower()] = {
            "steps": steps,
            "outside_any_step": bool(t["step"].is_null().any()),
            "launches": int(t["launches"].sum()),
            "kernel_us": round(float(t["kernel_us"].sum()), 3),
        }
        what = [f"step{'s' if len(steps) > 1 else ''} {id_list(steps)}"] if steps else []
        what += ["kernels outside any profiled step"] if metrics[label.lower()]["outside_any_step"] else []
        parts.append(f"{label}: {' and '.join(what)} ({_work(t)})")
    text = f" Not compared, having no counterpart: {'; '.join(parts)} (see the warnings)." if parts else ""
    return text, metrics


def _total_finding(total_a, total_b, steps_t, buckets, sa: Side, sb: Side, pack: RulePack, left) -> Finding | None:
    """B against A in one finding: summed kernel time per step and rank, the step time where both sides have
    step rows (the figure `--fail-on-regression` reads), and what the comparison leaves out."""
    delta = total_b - total_a
    metrics = {"a_kernel_us": round(total_a, 3), "b_kernel_us": round(total_b, 3), "delta_us": round(delta, 3)}
    step_txt = ""
    if not steps_t.is_empty():
        evidence = _step_evidence(steps_t, sa, sb)
        sa_us, sb_us = float(steps_t["a_step_us"].mean()), float(steps_t["b_step_us"].mean())
        metrics |= {"a_step_us": round(sa_us, 3), "b_step_us": round(sb_us, 3), "steps_compared": steps_t.height}
        step_txt = (
            f" Step time (step_trace_time.csv) {ms(sa_us)} → {ms(sb_us)} "
            f"({'+' if sb_us >= sa_us else ''}{ms(sb_us - sa_us)})."
        )
    else:
        evidence = _bucket_evidence(buckets)
    if not evidence:
        return None
    left_txt, left_metrics = _left_out_text(left)
    if left_metrics:
        metrics["left_out"] = left_metrics
    return Finding(
        check=CHECK,
        severity=pack.check(CHECK).severity_for("total"),
        title=(
            f"B vs A: summed kernel time per step {ms(total_a)} → {ms(total_b)} "
            f"({pct(delta / total_a if total_a else None)})"
        ),
        message=(
            f"A = {sa.desc}; B = {sb.desc}. Summed kernel time per step and rank goes from {ms(total_a)} to "
            f"{ms(total_b)} ({'+' if delta >= 0 else ''}{ms(delta)}, "
            f"{pct(delta / total_a if total_a else None)}).{step_txt}{left_txt}"
        ),
        metrics=metrics,
        evidence=tuple(evidence),
    )


def _regression_findings(buckets: pl.DataFrame, kernels: pl.DataFrame, total_a: float, pack: RulePack) -> list[Finding]:
    """Buckets whose per-step time changed by at least the floor: growth is a regression of B (severity by share),
    shrinkage an improvement (info). With two ranks of one job the direction only says which rank spends more."""
    chk = pack.check(CHECK)
    out: list[Finding] = []
    if "delta_us" not in buckets.columns:
        return out
    floor = max(chk["min_delta_us"], chk["min_share"] * total_a)
    moved = buckets.filter(pl.col("delta_us").abs() >= floor).sort(
        pl.col("delta_us").abs(), descending=True, maintain_order=True
    )
    for row in moved.head(chk["max_findings"]).iter_rows(named=True):
        up = row["delta_us"] > 0
        share = abs(row["delta_us"]) / total_a if total_a else None
        graded_up = graded(share, chk) if up and share is not None else None
        sev = graded_up or chk.severity_for("regression" if up else "improvement")
        ks = _moved_kernels(kernels, row["bucket"], up)
        out.append(_bucket_change_finding(row, ks, up, share, sev))
    return out


def _moved_kernels(kernels: pl.DataFrame, bucket: str, up: bool) -> pl.DataFrame:
    """The (at most 3) kernels of ``bucket`` present on both sides that moved most in the bucket's direction."""
    ks = kernels.filter(
        (pl.col("bucket") == bucket)
        & ((pl.col("delta_us") > 0) if up else (pl.col("delta_us") < 0))
        & pl.col("status").is_in(["both", "shape changed"])
    )
    return ks.sort("delta_us", descending=up, maintain_order=True).head(3)


def _bucket_change_finding(row: dict, ks: pl.DataFrame, up: bool, share: float | None, sev: str) -> Finding:
    """A bucket's per-step change from A to B (``row`` of the bucket comparison), explained by the kernels that
    moved most (``ks``)."""
    k_txt = "; ".join(
        f"{k['op']}{' [' + k['input_shapes'] + ']' if k['input_shapes'] else ''} "
        f"{'+' if up else ''}{ms(k['delta_us'])} ({k['a_count']:g}→{k['b_count']:g} launches, "
        f"{k['a_time_us'] / max(k['a_count'], 1):,.1f}→{k['b_time_us'] / max(k['b_count'], 1):,.1f} µs each)"
        for k in ks.iter_rows(named=True)
    )
    top = ks.row(0, named=True) if ks.height else None
    word = "Regression" if up else "Improvement"
    sign = "+" if up else ""
    return Finding(
        check=CHECK,
        severity=sev,
        title=f"{word}: {row['bucket']} {sign}{ms(row['delta_us'])} per step in B"
        + (f", mostly {top['op']}" if top else ""),
        message=(
            f"The {row['bucket']} bucket takes {ms(row['a_time_us'])} per step in A and "
            f"{ms(row['b_time_us'])} in B ({sign}{ms(row['delta_us'])}"
            + (f", {pct(share)} of A's summed kernel time" if share is not None else "")
            + "). "
            + (
                f"Largest changes: {k_txt}."
                if k_txt
                else "No kernel present on both sides moved that way; "
                "the change is in kernels present on one side only (see new/missing)."
            )
            + (
                ""
                if up or row["bucket"] != "communication"
                else " Less communication time on B with the same launches usually means B arrived later and "
                "waited less: A waits inside these kernels for B."
            )
        ),
        metrics={
            "bucket": row["bucket"],
            "a_us": round(row["a_time_us"], 3),
            "b_us": round(row["b_time_us"], 3),
            "delta_us": round(row["delta_us"], 3),
            "share_of_a": round(share, 4) if share else None,
            "direction": "regression" if up else "improvement",
            "kernels": [
                {
                    "op": k["op"],
                    "name": k["name"],
                    "input_shapes": k["input_shapes"],
                    "delta_us": round(k["delta_us"], 3),
                    "a_count": k["a_count"],
                    "b_count": k["b_count"],
                }
                for k in ks.iter_rows(named=True)
            ],
        },
        evidence=_bucket_change_evidence(row, ks),
    )


def _bucket_change_evidence(row: dict, ks: pl.DataFrame) -> tuple:
    """The bucket's kernel rows on each side, then the rows of the kernel that moved most on each side."""
    evidence = []
    for p in ("a", "b"):
        ev = _cite(
            row,
            p,
            {"source": "kernels", "bucket": row["bucket"], "side": p.upper()},
            {"time_us_per_step": round(row[f"{p}_time_us"], 3)},
        )
        if ev is not None:
            evidence.append(ev)
    for k in ks.head(1).iter_rows(named=True):
        for p in ("a", "b"):
            ev = _cite(
                k,
                p,
                {
                    "source": "kernels",
                    "op": k["op"],
                    "name": k["name"],
                    "input_shapes": k["input_shapes"],
                    "side": p.upper(),
                },
                {"time_us_per_step": round(k[f"{p}_time_us"], 3), "launches_per_step": k[f"{p}_count"]},
            )
            if ev is not None:
                evidence.append(ev)
    return tuple(evidence)


def _new_missing_findings(kernels: pl.DataFrame, total_a: float, pack: RulePack) -> list[Finding]:
    chk = pack.check(CHECK)
    out: list[Finding] = []
    if "status" not in kernels.columns:
        return out
    floor = max(chk["min_delta_us"], chk["min_share"] * total_a)
    for status, p, word in (("new", "b", "only in B"), ("missing", "a", "only in A")):
        rows = (
            kernels.filter((pl.col("status") == status) & (pl.col(f"{p}_time_us") >= floor))
            .sort(f"{p}_time_us", descending=True, maintain_order=True)
            .head(5)
        )
        if rows.is_empty():
            continue
        evidence = [
            e
            for r in rows.iter_rows(named=True)
            if (
                e := _cite(
                    r,
                    p,
                    {
                        "source": "kernels",
                        "op": r["op"],
                        "name": r["name"],
                        "input_shapes": r["input_shapes"],
                        "status": status,
                    },
                    {"time_us_per_step": round(r[f"{p}_time_us"], 3)},
                )
            )
            is not None
        ]
        if not evidence:
            continue
        txt = "; ".join(
            f"{r['op']}{' [' + r['input_shapes'] + ']' if r['input_shapes'] else ''} "
            f"{ms(r[f'{p}_time_us'])}"
            + (" (same name, other shape on the other side)" if r["same_name_other_shape"] else "")
            for r in rows.iter_rows(named=True)
        )
        out.append(
            Finding(
                check=CHECK,
                severity=pack.check(CHECK).severity_for("one_side"),
                title=f"{rows.height} kernel(s) {word}, {ms(float(rows[f'{p}_time_us'].sum()))} per step",
                message=f"Kernels {word} (per step and rank): {txt}.",
                metrics={
                    "status": status,
                    "kernels": rows.select("op", "name", "input_shapes", f"{p}_time_us").to_dicts(),
                },
                evidence=tuple(evidence),
            )
        )
    return out


# ------------------------------------------------------------------------------------------ CI thresholds


def regression_limits(values: list[str], pack: RulePack) -> tuple[float | None, dict[str, float]]:
    """``--fail-on-regression`` values: ``PCT`` (the step time) or ``BUCKET=PCT`` (a bucket's time per step),
    percent of A that B may grow by. Checked before any file is read, so a typo fails at once instead of after
    the comparison (or, worse, never fails the build)."""
    known = {b for order in pack.buckets.values() for b in order} | {r.bucket for r in pack.rules}
    step: float | None = None
    buckets: dict[str, float] = {}
    for v in values:
        name, _, num = v.rpartition("=")
        name = name.strip()
        try:
            limit = float(num.strip().removesuffix("%"))
        except ValueError:
            limit = float("nan")
        if not limit >= 0 or limit == float("inf"):
            raise ProfanInputError(None, f"--fail-on-regression takes PCT or BUCKET=PCT, PCT a number ≥ 0 (got {v!r})")
        if "=" not in v:
            if step is not None:
                raise ProfanInputError(None, f"--fail-on-regression: the step-time limit is given twice ({v!r})")
            step = limit
        elif name not in known:
            raise ProfanInputError(
                None, f"--fail-on-regression: unknown bucket {name!r}; buckets: {', '.join(sorted(known))}"
            )
        else:
            buckets[name] = limit
    return step, buckets


def regressions(report: Report, step_pct: float | None, bucket_pct: dict[str, float]) -> list[str]:
    """What regressed past its limit, one phrase each, read from the comparison's own figures: the step time of
    the total finding (step_trace_time.csv where both sides have it, else the summed kernel time per step and
    rank) and the bucket table's time per step. B growing from nothing exceeds any limit."""
    out = []
    if step_pct is not None:
        total = next((f for f in report.findings if f.check == CHECK and "a_kernel_us" in f.metrics), None)
        if total is not None:
            m = total.metrics
            kind = (
                "step time (step_trace_time.csv)"
                if "a_step_us" in m
                else "step time (summed kernel time per step and rank; no step_trace_time.csv rows on both sides)"
            )
            a, b = (m["a_step_us"], m["b_step_us"]) if "a_step_us" in m else (m["a_kernel_us"], m["b_kernel_us"])
            out += _past(kind, a, b, step_pct)
    t = report.tables.get("compare_buckets", pl.DataFrame())
    for bucket, limit in bucket_pct.items():
        row = t.filter(pl.col("bucket") == bucket) if "bucket" in t.columns else t.head(0)
        a, b = (float(row["a_time_us"][0]), float(row["b_time_us"][0])) if row.height else (0.0, 0.0)
        out += _past(f"{bucket} per step", a, b, limit)
    return out


def _past(what: str, a: float, b: float, limit: float) -> list[str]:
    if b <= a or (a > 0 and 100 * (b - a) / a <= limit):
        return []
    grew = f"+{_pct(100 * (b - a) / a)}%" if a > 0 else "new in B"
    return [f"{what} {ms(a)} → {ms(b)} ({grew}, more than the {limit:g}% allowed)"]


def _pct(x: float) -> str:
    """A percentage for the CI line: one decimal, but a growth under 0.1 % keeps two significant digits (a
    0.027 % regression past a 0.02 % limit must not read +0.0 %)."""
    return f"{x:.1f}" if abs(x) >= 0.1 else f"{x:.2g}"
