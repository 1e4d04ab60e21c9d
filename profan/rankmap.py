"""Per-rank work: read one rank's sources and reduce them to small tables.

This is the *map* of the pipeline. Its result (`RankData`) is small — distinct kernels per step, the rank's
step_trace rows, its communication ops — so ranks can be reduced in parallel processes (or on other machines) and
only these results travel. Nothing here formats text for a report; analyses work on `RankData` only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.classify import classify, rule_fields
from profan.discover import RankSource, relpath
from profan.errors import ProfanInputError
from profan.rulepack import RulePack
from profan.sources import (
    ascend_comm,
    ascend_device,
    ascend_kernels,
    ascend_matrix,
    ascend_meta,
    ascend_opstat,
    ascend_packets,
    ascend_steps,
)
from profan.sources.csvtext import count_lines

TOP_LINES = 20  # largest rows kept per kernel group, for evidence


@dataclass
class RankData:
    rank: int
    path: str  # rank directory relative to the root
    kind: str
    rank_origin: str
    files: dict[str, str] = field(default_factory=dict)  # logical -> path relative to root
    info: dict = field(default_factory=dict)  # profiler level, versions, aic metrics
    kernel_variant: str = ""
    has_pipe_ratios: bool = False
    groups: pl.DataFrame | None = None  # one row per (step, op, name, type, core, input_shapes)
    steps: pl.DataFrame | None = None  # step_trace_time rows
    comm_ops: pl.DataFrame | None = None
    comm_bw: pl.DataFrame | None = None
    comm_packets: pl.DataFrame | None = None  # communication.json Size Distribution rows
    # communication_matrix.json per-link totals (ascend_matrix.link_totals), group-local ranks mapped to global
    comm_links: pl.DataFrame | None = None
    metadata: ascend_meta.Metadata | None = None
    collectives: pl.DataFrame | None = None  # communication ops in order, with group/seq (profan.collectives)
    windows: pl.DataFrame | None = None  # kernels in each op's pre-collective window (profan.collectives)
    op_stats: pl.DataFrame | None = None  # op_statistic.csv rows, for cross-checking kernel rows
    # Where `groups.lines` point: "lines" (CSV line numbers of files[kernel_file]) or "events" (chrome-trace event
    # indexes, for Kineto traces). Analyses cite kernel evidence through analyses.common.cite_kernels.
    kernel_locator: str = "lines"
    kernel_file: str = "kernel_details"
    trace_steps: pl.DataFrame | None = None  # per-step Computing/Communication/Free from trace device lanes
    trace_comm: pl.DataFrame | None = None  # Kineto communication events (NCCL kernels, c10d ops, annotations)
    trace_links: pl.DataFrame | None = None  # trace_view HCCL plane tasks per plane / transport / link type
    trace_tasks: pl.DataFrame | None = None  # trace_view HCCL plane task events (Notify_Wait per peer)
    rows_read: dict[str, int] = field(default_factory=dict)
    rows_skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def count(self, logical: str, read: int, skipped: int, what: str, empty: str | None = None) -> None:
        """Record how many rows of a file were read and skipped; skipped rows are also said as a warning, and
        so is a file with no rows at all when ``empty`` says what that means."""
        self.rows_read[logical] = read
        if skipped:
            self.rows_skipped[logical] = skipped
            self.warnings.append(f"{self.files[logical]}: skipped {skipped} of {read} {what}")
        if read == 0 and empty is not None:
            self.warnings.append(f"{self.files[logical]}: {empty}")


KEYS = ["step", "op", "name", "type", "core", "input_shapes"]


def _aggs(pipes: list[str], exact: bool, starts: bool) -> list[pl.Expr]:
    """Aggregations over the kernel rows of one group.

    ``exact`` (small files, grouped in memory): ``lines`` holds the TOP_LINES largest rows, largest first, ties in
    file order, with their durations in ``line_durs``. Otherwise (big files, polars' streaming group-by, which
    holds one row of state per group and cannot keep per-group lists): the longest row and the first row of the
    group — ``_merge_samples`` makes them ``lines``. Either way every cited line is a row of the group, and the
    group's count and select say what the claim covers.

    ``starts``: also each group's first start (``first_start_us``), which lets `profan.collectives` take the HCCL
    rows from the groups instead of a pass of its own over the file. Parsing every row's start costs 0.1 s per
    GB, so a big file pays it only when the collectives need it (no communication.json gives the ops)."""
    dur = pl.col("dur_us")
    aggs = [  # every aggregate costs time on every row of a GB file: only what the analyses read
        pl.len().alias("count"),
        dur.sum().alias("time_us"),
        dur.max().alias("max_us"),
        *([pl.col("start_us").min().alias("first_start_us")] if starts else []),
    ]
    if exact:
        aggs += [
            pl.col("src_line").sort_by("dur_us", descending=True, nulls_last=True, maintain_order=True)
            .head(TOP_LINES).alias("lines"),
            dur.sort(descending=True, nulls_last=True).head(TOP_LINES).alias("line_durs"),
        ]
    else:  # the longest row (ties: the later line; deterministic) and the first row
        aggs += [
            pl.col("src_line").sort_by(["dur_us", "src_line"]).last().alias("_top_line"),
            pl.col("src_line").min().alias("_first_line"),
            dur.sort_by("src_line").first().alias("_first_dur"),
        ]
    aggs += [(pl.col(p) * dur).sum().alias(f"{p}_wsum") for p in pipes]  # their weights: see `_pmu_mask`
    return aggs


def _pmu_mask(pipes: list[str]) -> pl.Expr:
    """Which pipe ratios a row has (bit i: ``pipes[i]`` is not null), a grouping key beside the kernel's keys.

    A pipe's duration-weighted mean needs the duration of the rows that have that ratio. Grouping by the mask
    makes that the group's own ``time_us`` (every row of the group has the same ratios), so no per-pipe weight
    is aggregated over millions of rows; `_pmu_weights` derives the weights and `_merge` folds the masks."""
    if not pipes:
        return pl.lit(0, pl.Int32).alias("_pmu")
    return pl.sum_horizontal([pl.col(p).is_not_null().cast(pl.Int32) * (1 << i)
                              for i, p in enumerate(pipes)]).alias("_pmu")


def _pmu_weights(g: pl.DataFrame, pipes: list[str]) -> pl.DataFrame:
    """``{pipe}_wden``: the duration of the group's rows that have the pipe's ratio (see `_pmu_mask`)."""
    bit = pl.col("_pmu")
    return g.with_columns(
        pl.when((bit & (1 << i)) != 0).then(pl.col("time_us")).otherwise(0.0).alias(f"{p}_wden")
        for i, p in enumerate(pipes)).drop("_pmu")


def _merge_samples(g: pl.DataFrame) -> pl.DataFrame:
    """Streaming groups: ``lines`` = [longest row, first row] (one when they coincide), durations alike."""
    same = pl.col("_top_line") == pl.col("_first_line")
    return g.with_columns(
        pl.when(same).then(pl.concat_list(pl.col("_top_line")))
        .otherwise(pl.concat_list("_top_line", "_first_line")).alias("lines"),
        pl.when(same).then(pl.concat_list(pl.col("max_us")))
        .otherwise(pl.concat_list("max_us", "_first_dur")).alias("line_durs"),
    ).drop("_top_line", "_first_line", "_first_dur")


def _merge(g: pl.DataFrame, pipes: list[str]) -> pl.DataFrame:
    """One row per key: raw keys that clean up to the same key (``"A "`` and ``"A"``) are combined — sums add,
    min/max fold, the sample lines are re-ranked."""
    sums = ["count", "time_us", *[f"{p}_{s}" for p in pipes for s in ("wsum", "wden")]]
    starts = ["first_start_us"] if "first_start_us" in g.columns else []
    cols = ["count", "time_us", "max_us", *starts,
            *[f"{p}_{s}" for p in pipes for s in ("wsum", "wden")], "lines", "line_durs"]
    g = g.select(*KEYS, *cols)
    split = g.select(KEYS).is_duplicated()
    if not split.any():
        return g
    s = g.filter(split)
    scalars = s.group_by(KEYS).agg(*[pl.col(c).sum() for c in sums], pl.col("max_us").max(),
                                   *[pl.col(c).min() for c in starts])
    tops = (s.select(*KEYS, "lines", "line_durs").explode(["lines", "line_durs"])
            .sort(["line_durs", "lines"], descending=[True, False], nulls_last=True)
            .group_by(KEYS, maintain_order=True).agg(pl.col("lines").head(TOP_LINES),
                                                     pl.col("line_durs").head(TOP_LINES)))
    merged = scalars.join(tops, on=KEYS, how="left", nulls_equal=True)
    return pl.concat([g.filter(~split), merged.select(*KEYS, *cols)])


def _reduce_rows(lf: pl.LazyFrame, kf: ascend_kernels.KernelFile, pipes: list[str],
                 exact: bool, starts: bool) -> tuple[pl.DataFrame, int, int]:
    """One pass over the rows: (groups, rows, bad rows).

    Grouping runs on the raw key text plus ``bad``, so bad rows are counted by the same pass and then dropped;
    the key clean-up (`key_exprs`) and the op derivation run once per distinct raw key instead of once per row.
    Big files go through polars' streaming engine: memory is bounded by the groups, never by the file."""
    raw = ascend_kernels.raw_key_columns(kf)
    q = lf.group_by(*raw, "bad", _pmu_mask(pipes)).agg(_aggs(pipes, exact, starts))
    g = q.collect() if exact else q.collect(engine="streaming")
    n_rows = int(g["count"].sum()) if g.height else 0
    bad = g.filter(pl.col("bad"))
    g = _pmu_weights(g.filter(~pl.col("bad")).drop("bad"), pipes)
    if not exact:
        g = _merge_samples(g)
    g = g.select(*ascend_kernels.key_exprs(kf), pl.exclude(raw)).with_columns(ascend_kernels.op_expr())
    return _merge(g, pipes), n_rows, int(bad["count"].sum()) if bad.height else 0


def _classify_distinct(groups: pl.DataFrame, rules: list) -> pl.DataFrame:
    """`classify` on the distinct values of the fields the rules read, joined back: the same bucket and rule for
    every group, with the regex chain run over a few hundred kernels instead of one row per (step, kernel)."""
    fields = rule_fields(rules)
    if not fields or groups.is_empty():
        return classify(groups, rules)
    kinds = groups.select(fields).unique()
    if kinds.height * 4 > groups.height:  # names nearly unique per group: a join would cost more than it saves
        return classify(groups, rules)
    return groups.join(classify(kinds, rules), on=fields, how="left", nulls_equal=True, maintain_order="left")


CACHE_BYTES = 16 << 20  # kernel files from this size keep their reduced groups in the cache (profan.cache)


@dataclass
class KernelPass:
    """One kernel file, read: its classified groups, row counts, header variant, whether it has pipe ratios, and
    — for a small file when asked — ``timed``, its usable rows with their place in time (step, op, name, type,
    core, start_us, dur_us, loc), which the collectives' windows need (they read the file themselves otherwise)."""

    groups: pl.DataFrame
    counts: dict[str, int]
    variant: str
    has_pipe_ratios: bool
    timed: pl.DataFrame | None = None


def reduce_kernels(path: Path, pack: RulePack, rules_for: str = "ascend", *, starts: bool = False,
                   timed: bool = False) -> KernelPass:
    """Read a kernel file in one pass into its `KernelPass`.

    The groups of a big file are cached (before classification, so a changed rule pack never meets a stale
    verdict): analysing it again — ``profan evidence DIR F3``, an agent's follow-up question — skips the pass.
    ``starts``: keep each group's first start even on a big file (see `_aggs`). ``timed``: also keep a small
    file's timed rows, from the same read."""
    kf = ascend_kernels.inspect(path)
    size = path.stat().st_size
    starts = starts or size <= ascend_kernels.IN_MEMORY_BYTES  # in memory the starts cost next to nothing
    rows = None
    if size >= CACHE_BYTES:
        from profan.cache import cached_table

        kind = "kernel_groups+starts" if starts else "kernel_groups"
        groups, counts, _ = cached_table(path, kind, lambda: _reduce_file(kf, starts)[:2])
    else:
        groups, counts, rows = _reduce_file(kf, starts, timed)
    # one order for the same input: a hash grouping's order varies from run to run, and with it the order of
    # every later float sum — enough to swap two kernels of equal time in a ranking
    groups = _classify_distinct(groups, pack.rules_for(rules_for)).sort(KEYS, nulls_last=True)
    return KernelPass(groups, {"rows": counts["rows"], "skipped": counts["skipped"]}, kf.variant,
                      kf.has_pipe_ratios, None if rows is None else ascend_kernels.timed_rows(kf, rows))


def _reduce_file(kf: ascend_kernels.KernelFile, starts: bool, keep_rows: bool = False
                 ) -> tuple[pl.DataFrame, dict[str, int], pl.DataFrame | None]:
    """(unclassified groups, {"rows", "skipped"}, the per-row table when ``keep_rows`` and the file is read in
    memory) of one kernel file.

    The physical line count that proves one line per record runs in a thread beside the pass of a big file
    (polars releases the GIL), so the check costs little wall time on a multi-core machine; a small file is
    counted first, which costs less than starting the thread."""
    path = kf.path
    pipes = list(kf.pipe_columns)
    exact = path.stat().st_size <= ascend_kernels.IN_MEMORY_BYTES  # in memory: the TOP_LINES largest rows
    keep = keep_rows and exact
    rows = None

    def reduce(fast: bool) -> tuple[pl.LazyFrame, pl.DataFrame, int, int]:
        nonlocal rows
        lf = ascend_kernels.scan_for_groups(kf, fast=fast)
        if keep:
            rows = lf.collect()
            lf = rows.lazy()
        return lf, *_reduce_rows(lf, kf, pipes, exact, starts)

    with ThreadPoolExecutor(max_workers=1) as pool:
        n_lines = pool.submit(count_lines, path) if not exact else None
        lines = count_lines(path) if exact else None
        try:
            lf, groups, n_rows, n_bad = reduce(fast=True)
        except pl.exceptions.PolarsError:  # a number cell the fast reader refuses: read those columns as text
            lf, groups, n_rows, n_bad = reduce(fast=False)
        one_line_per_record = (n_lines.result() if n_lines is not None else lines) == n_rows + 1
    if n_rows == 0:
        raise ProfanInputError(path, "no data rows (header only)")
    if not one_line_per_record:
        # A quoted field holds a line break: map record index -> true physical line, then redo the reduction.
        lf = ascend_kernels.with_exact_lines(kf, lf, n_rows)
        groups, _, _ = _reduce_rows(lf, kf, pipes, exact, starts)
        if keep:
            rows = lf.collect()
    return groups, {"rows": n_rows, "skipped": n_bad}, rows


def load_rank(rs: RankSource, root: Path, pack: RulePack, *, peers: bool = True) -> RankData:
    """Read everything profan uses from one rank. Input errors propagate as ProfanInputError.

    ``peers``: other ranks are analysed with this one. Only then are the collectives and their pre-collective
    windows read — they serve cross-rank alignment alone, and on a big kernel file the windows cost a second
    pass."""
    rd = RankData(rank=int(rs.rank or 0), path=relpath(rs.path, root) or ".", kind=rs.kind,
                  rank_origin=rs.rank_origin, files={k: relpath(p, root) for k, p in rs.files.items()})
    if "profiler_info" in rs.files:
        try:
            info = ascend_meta.read_info(rs.files["profiler_info"])
            rd.info = {k: v for k, v in vars(info).items() if v is not None}
        except ProfanInputError as exc:
            rd.warnings.append(f"ignored {rd.files['profiler_info']}: {exc.problem}")
    if "profiler_metadata" in rs.files:
        try:
            rd.metadata = ascend_meta.read_metadata(rs.files["profiler_metadata"])
        except ProfanInputError as exc:
            rd.warnings.append(f"ignored {rd.files['profiler_metadata']}: {exc.problem}")
    timed = None  # a small kernel file's timed rows, for the collectives
    if "kernel_details" in rs.files:
        try:
            # without communication.json the collectives take the HCCL rows' starts from the groups
            starts = peers and "communication" not in rs.files
            kp = reduce_kernels(rs.files["kernel_details"], pack, starts=starts, timed=peers and rs.kind == "ascend")
        except pl.exceptions.PolarsError as exc:  # malformed beyond what the tolerant reader accepts
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ProfanInputError(rs.files["kernel_details"], f"cannot be parsed as CSV ({first})") from None
        rd.groups, rd.kernel_variant, rd.has_pipe_ratios = kp.groups, kp.variant, kp.has_pipe_ratios
        timed = kp.timed
        rd.count("kernel_details", kp.counts["rows"], kp.counts["skipped"],
                 "rows whose duration is not a number of 0 or more, or whose block dim is text (truncated or "
                 "misaligned rows)")
    if "op_statistic" in rs.files:
        rd.op_stats, skipped = ascend_opstat.read(rs.files["op_statistic"])
        rd.count("op_statistic", rd.op_stats.height + skipped, skipped, "unreadable rows",
                 empty="no data rows (header only); kernel rows not cross-checked")
    if "step_trace_time" in rs.files:
        rd.steps, skipped = ascend_steps.read(rs.files["step_trace_time"])
        rd.count("step_trace_time", rd.steps.height + skipped, skipped, "unreadable rows",
                 empty="no data rows (header only); no step times from it")
    if "communication" in rs.files:
        items, bad = ascend_comm.entries(rs.files["communication"])
        rd.comm_ops, rd.comm_bw, skipped = ascend_comm.tables(items, bad)
        rd.count("communication", rd.comm_ops.height + skipped, skipped, "entries of unexpected shape",
                 empty="holds no communication ops")
        rd.comm_packets = ascend_packets.read(items)
    if "communication_matrix" in rs.files:
        links, skipped = ascend_matrix.read(rs.files["communication_matrix"])
        rd.comm_links = ascend_matrix.link_totals(ascend_matrix.map_ranks(links, rd.metadata))
        rd.count("communication_matrix", links.height + skipped, skipped, "entries of unexpected shape")
    if peers:
        _load_collectives(rd, rs, pack, timed)
    if "kineto_trace" in rs.files:
        from profan.sources import kineto

        kineto.load_rank_trace(rd, rs.files["kineto_trace"], pack)
    if "trace_view" in rs.files:
        from profan.sources import trace_view

        trace_view.load_rank_trace(rd, rs.files["trace_view"])
        from profan.sources import hccl_tasks

        rd.trace_tasks = hccl_tasks.plane_tasks(rs.files["trace_view"])
    platform = ascend_device.platform_version(rs.path)
    if platform is not None:
        rd.info["platform_version"] = platform
    return rd

def _load_collectives(rd: RankData, rs: RankSource, pack: RulePack, timed: pl.DataFrame | None = None) -> None:
    """The rank's communication ops and their pre-collective windows, for cross-rank alignment and stragglers.
    ``timed``: the kernel file's timed rows when the kernel pass kept them (`KernelPass.timed`)."""
    from profan.collectives import ascend_collectives

    if rs.kind == "kineto" and "kineto_trace" in rs.files:
        from profan.collectives import kineto_collectives

        rd.collectives, rd.windows = kineto_collectives(rs.files["kineto_trace"], rd.files["kineto_trace"], pack)
        return
    if rs.kind != "ascend" or not ({"kernel_details", "communication"} & set(rs.files)):
        return
    rd.collectives, rd.windows = ascend_collectives(
        rs.files.get("kernel_details"), rd.files.get("kernel_details"), rd.rows_read.get("kernel_details"),
        rd.comm_ops, rd.files.get("communication"), pack, rd.groups, timed)
