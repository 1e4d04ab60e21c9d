"""The kernel pass: one read of a kernel file (kernel_details.csv / op_summary) reduced to classified groups.

A group is one (step, op, name, type, core, input_shapes) with its count, time, longest row and the lines to cite;
this is what every kernel analysis reads, and it is small however big the file. `reduce_kernel_files` reads the
kernel files of a batch of ranks (one rank is a batch of one): small files of one header as one table, since a
polars query has a fixed cost that dominates files of a few hundred kB, and any other file on its own. The same
read also gives what the rank needs of its rows' place in time — the timed rows for the collectives' windows, a
streamed file's steps' blocks — so no file is parsed twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

import polars as pl

from profan.model.errors import ProfanInputError
from profan.rulepack import limits
from profan.rulepack.classify import NEIGHBORS, classify_distinct, uses_neighbors, with_neighbors
from profan.rulepack.pack import RulePack
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text import kernels as ascend_kernels
from profan.sources.common import intervals
from profan.sources.common.csvtext import check_lines, count_lines

TOP_LINES = 20  # largest rows kept per kernel group, for evidence

KEYS = ["step", "op", "name", "type", "core", "input_shapes"]
T = TypeVar("T")


def _aggs(pipes: list[str], exact: bool, starts: bool) -> list[pl.Expr]:
    """Aggregations over the kernel rows of one group.

    ``exact`` (small files, grouped in memory): ``lines`` holds the TOP_LINES largest rows, largest first, ties in
    file order, with their durations in ``line_durs``. Otherwise (big files, polars' streaming group-by, which
    holds one row of state per group and cannot keep per-group lists): the longest row and the first row of the
    group — ``_merge_samples`` makes them ``lines``. Either way every cited line is a row of the group, and the
    group's count and select say what the claim covers.

    ``starts``: also each group's first start (``first_start_us``), which lets `profan.ranks.collectives` take the HCCL
    rows from the groups instead of a pass of its own over the file. Parsing every row's start costs time on every
    row (bench/README.md), so a big file pays it only when the collectives need it (no communication.json gives
    the ops)."""
    dur = pl.col("dur_us")
    aggs = [  # every aggregate costs time on every row of a GB file: only what the analyses read
        pl.len().alias("count"),
        dur.sum().alias("time_us"),
        dur.max().alias("max_us"),
        *([pl.col("start_us").min().alias("first_start_us")] if starts else []),
    ]
    if exact:
        aggs += [
            pl.col("src_line")  # ties by line: rows may reach a group in any order (a DB's, a parallel read's)
            .sort_by(["dur_us", "src_line"], descending=[True, False], nulls_last=True)
            .head(TOP_LINES)
            .alias("lines"),
            dur.sort(descending=True, nulls_last=True).head(TOP_LINES).alias("line_durs"),
        ]
    else:  # the longest row (ties: the later line; deterministic) and the first row
        aggs += [
            pl.col("src_line").sort_by(["dur_us", "src_line"]).last().alias("_top_line"),
            pl.col("src_line").min().alias("_first_line"),
            dur.sort_by("src_line").first().alias("_first_dur"),
        ]
    aggs += [(pl.col(pipe) * dur).sum().alias(f"{pipe}_wsum") for pipe in pipes]  # their weights: see `_pmu_mask`
    return aggs


def _pmu_mask(pipes: list[str]) -> pl.Expr:
    """Which pipe ratios a row has (bit i: ``pipes[i]`` is not null), a grouping key beside the kernel's keys.

    A pipe's duration-weighted mean needs the duration of the rows that have that ratio. Grouping by the mask
    makes that the group's own ``time_us`` (every row of the group has the same ratios), so no per-pipe weight
    is aggregated over millions of rows; `_pmu_weights` derives the weights and `_merge` folds the masks."""
    if not pipes:
        return pl.lit(0, pl.Int32).alias("_pmu")
    return pl.sum_horizontal(
        [pl.col(pipe).is_not_null().cast(pl.Int32) * (1 << index) for index, pipe in enumerate(pipes)]
    ).alias("_pmu")


def _pmu_weights(frame: pl.DataFrame, pipes: list[str]) -> pl.DataFrame:
    """``{pipe}_wden``: the duration of the group's rows that have the pipe's ratio (see `_pmu_mask`)."""
    bit = pl.col("_pmu")
    return frame.with_columns(
        pl.when((bit & (1 << index)) != 0).then(pl.col("time_us")).otherwise(0.0).alias(f"{pipe}_wden")
        for index, pipe in enumerate(pipes)
    ).drop("_pmu")


def _merge_samples(frame: pl.DataFrame) -> pl.DataFrame:
    """Streaming groups: ``lines`` = [longest row, first row] (one when they coincide), durations alike."""
    same = pl.col("_top_line") == pl.col("_first_line")
    return frame.with_columns(
        pl.when(same)
        .then(pl.concat_list(pl.col("_top_line")))
        .otherwise(pl.concat_list("_top_line", "_first_line"))
        .alias("lines"),
        pl.when(same)
        .then(pl.concat_list(pl.col("max_us")))
        .otherwise(pl.concat_list("max_us", "_first_dur"))
        .alias("line_durs"),
    ).drop("_top_line", "_first_line", "_first_dur")


def _merge(frame: pl.DataFrame, pipes: list[str], keys: list[str] = KEYS) -> pl.DataFrame:
    """One row per key: raw keys that clean up to the same key (``"A "`` and ``"A"``) are combined — sums add,
    min/max fold, the sample lines are re-ranked. ``keys``: `KEYS`, led by the file index in a batch."""
    sums = ["count", "time_us", *[f"{pipe}_{s}" for pipe in pipes for s in ("wsum", "wden")]]
    starts = ["first_start_us"] if "first_start_us" in frame.columns else []
    cols = [
        "count",
        "time_us",
        "max_us",
        *starts,
        *[f"{pipe}_{s}" for pipe in pipes for s in ("wsum", "wden")],
        "lines",
        "line_durs",
    ]
    frame = frame.select(*keys, *cols)
    split = frame.select(keys).is_duplicated()
    if not split.any():
        return frame
    s = frame.filter(split)
    scalars = s.group_by(keys).agg(
        *[pl.col(c).sum() for c in sums], pl.col("max_us").max(), *[pl.col(c).min() for c in starts]
    )
    tops = (
        s.select(*keys, "lines", "line_durs")
        .explode(["lines", "line_durs"])
        .sort(["line_durs", "lines"], descending=[True, False], nulls_last=True)
        .group_by(keys, maintain_order=True)
        .agg(pl.col("lines").head(TOP_LINES), pl.col("line_durs").head(TOP_LINES))
    )
    merged = scalars.join(tops, on=keys, how="left", nulls_equal=True)
    return pl.concat([frame.filter(~split), merged.select(*keys, *cols)])


@dataclass(frozen=True)
class Grouping:
    """How one pass groups kernel rows: the PMU pipe columns it averages, ``exact`` (in memory: the TOP_LINES
    largest rows of each group) or streamed, ``starts`` (each group's first start, see `_aggs`), and ``by``, keys
    that lead every group (the file index of a batch)."""

    pipes: list[str]
    exact: bool
    starts: bool
    by: tuple[str, ...] = ()


def _group_rows(
    lazy: pl.LazyFrame,
    kernel_file: ascend_kernels.KernelFile | None,
    grouping: Grouping,
    keyed: tuple[list[str], list[pl.Expr]] | None = None,
    also: list[pl.LazyFrame] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, list[pl.DataFrame]]:
    """One pass over the rows: (groups, per-``by`` row counts ``rows`` and ``bad``, the ``also`` queries over the
    same rows collected with the groups, sharing their scan).

    Grouping runs on the raw key text plus ``bad``, so bad rows are counted by the same pass and then dropped;
    the key clean-up (`key_exprs`) and the op derivation run once per distinct raw key instead of once per row.
    Big files (not ``grouping.exact``) go through polars' streaming engine: memory is bounded by the groups, never
    by the file. ``keyed``: (raw key columns, `KEYS` expressions over them) of a table that is no kernel file
    (`reduce_table`), in place of ``kf``'s."""
    pipes, by = grouping.pipes, grouping.by
    raw, keys = (
        keyed
        if keyed is not None
        else (ascend_kernels.raw_key_columns(kernel_file), ascend_kernels.key_exprs(kernel_file))
    )
    query = lazy.group_by(*by, *raw, "bad", _pmu_mask(pipes)).agg(_aggs(pipes, grouping.exact, grouping.starts))
    groups, *more = pl.collect_all([query, *(also or [])], engine="auto" if grouping.exact else "streaming")
    counts = (
        groups.group_by(*by).agg(
            pl.col("count").sum().alias("rows"), pl.col("count").filter(pl.col("bad")).sum().alias("bad")
        )
        if by
        else pl.DataFrame(
            {"rows": [int(groups["count"].sum())], "bad": [int(groups["count"].filter(groups["bad"]).sum())]}
        )
    )
    groups = _pmu_weights(groups.filter(~pl.col("bad")).drop("bad"), pipes)
    if not grouping.exact:
        groups = _merge_samples(groups)
    groups = groups.select(*by, *keys, pl.exclude(*raw, *by)).with_columns(ascend_kernels.op_expr())
    return _merge(groups, pipes, [*by, *KEYS]), counts, more


def _reduce_rows(
    lazy: pl.LazyFrame, kernel_file: ascend_kernels.KernelFile, grouping: Grouping
) -> tuple[pl.DataFrame, int, int]:
    """One file's pass (`_group_rows`): (groups, rows, bad rows)."""
    groups, counts, _ = _group_rows(lazy, kernel_file, grouping)
    return groups, int(counts["rows"][0]), int(counts["bad"][0])


def group_neighbors(
    groups: pl.DataFrame,
    rows: pl.DataFrame | None,
    kernel_file: ascend_kernels.KernelFile | None,
    rules: list,
    by: tuple = (),
    keys: list[pl.Expr] | None = None,
) -> pl.DataFrame:
    """``groups`` with ``neighbors``, where the rules read it and the rows were read: each row's nearest layer
    anchors in its step (`classify.with_neighbors`, from a first verdict without it), the most common value over
    a group's rows. The kernels of one group (one op and input shape in a step) hold one place in every layer, so
    the mode is that place. Grouping keeps no order, so this needs the rows: files reduced by streaming or from
    the cache go without it, and their matmuls stay `gemm`."""
    if rows is None or not uses_neighbors(rules) or rows.is_empty():
        return groups
    frame = (
        rows.lazy()
        .filter(~pl.col("bad") & pl.col("start_us").is_not_null())
        .select(*by, *(keys or ascend_kernels.key_exprs(kernel_file)), "start_us", "src_line")
        .with_columns(ascend_kernels.op_expr())
        .collect()
    )
    frame = classify_distinct(frame, rules)
    anchors = default_roles().layer_anchor_buckets
    frame = with_neighbors(frame, ["start_us", "src_line"], [*by, "step"], anchors, "op")
    group_keys = [*by, *KEYS]
    place = frame.group_by(group_keys).agg(pl.col(NEIGHBORS).drop_nulls().mode().sort().first())
    return groups.join(place, on=group_keys, how="left", nulls_equal=True, maintain_order="left")


CACHE_BYTES = (
    16 << 20
)  # kernel files from this size keep their reduced groups in the cache (profan.sources.common.cache)
BATCH_BYTES = 64 << 20  # kernel text one query over several files holds in memory at once


@dataclass
class KernelPass:
    """One kernel file, read: its classified groups, row counts, header variant, whether it has pipe ratios, and
    — for a small file when asked — ``timed``, its usable rows with their place in time (step, op, name, type,
    core, start_us, dur_us, loc), which the collectives' windows need (they read the file themselves otherwise);
    and for a file it streams when asked, ``blocks``: its steps' blocks in time (`intervals.kernel_blocks`) and how
    many rows had no place in time, cut from the rows of the scan that groups the file."""

    groups: pl.DataFrame
    counts: dict[str, int]
    variant: str
    has_pipe_ratios: bool
    timed: pl.DataFrame | None = None
    blocks: tuple[pl.DataFrame, int] | None = None


@dataclass(frozen=True)
class KernelRequest:
    """A kernel file to reduce and what its rank needs besides the groups. ``starts``: each group's first start
    even when the file is streamed (see `_aggs`). ``timed``: its timed rows, for the collectives' windows (other
    ranks are analysed with it). ``blocks``: its steps' blocks in time (an Ascend rank with no trace_view.json to
    give them): a file read in memory keeps its timed rows, which they are cut from; a streamed one has them cut
    from the rows of the scan that groups it. Either way a streamed file is parsed once: its timed rows, when
    asked, come from that scan too."""

    path: Path
    starts: bool = False
    timed: bool = False
    blocks: bool = False

    @property
    def rows_in_time(self) -> bool:
        """Whether a file read in memory keeps its timed rows."""
        return self.timed or self.blocks


def reduce_kernel_files(files: list[KernelRequest], pack: RulePack) -> list[KernelPass | ProfanInputError]:
    """Each file's `KernelPass`, or its input error: one file's error never stops the others.

    Small files of one header are read as one table keyed by file index, and grouped, counted and classified
    by one query each: a polars query has a fixed cost that dominates files of a few hundred kB, and here it is
    paid once for the files, not once per file. A file that cannot be read that way — big (cached, or
    streamed), a header the reader refuses, a cell the fast reader refuses, a quoted line break, no data rows —
    is read alone (`_reduce_alone`), which also words any error: reading files together never changes what a
    file reads as or what is said about it."""
    rules = pack.rules_for("ascend")
    out: list[KernelPass | ProfanInputError | None] = [None] * len(files)
    for part in _together(files):
        for key, value in _reduce_same_header(
            [kernel_file for _, kernel_file, _ in part], rules, files[part[0][0]].rows_in_time
        ).items():
            out[part[key][0]] = value
    return [
        value if value is not None else _reduce_alone(file, rules, pack.roles)
        for file, value in zip(files, out, strict=True)
    ]


_Member = tuple[int, ascend_kernels.KernelFile, int]  # (index in the request list, file, bytes)


def _together(files: list[KernelRequest]) -> list[list[_Member]]:
    """The small files that may be read together: of one header and one `rows_in_time`, in runs of at most
    `BATCH_BYTES` of text (a run of files just under `CACHE_BYTES` stays bounded by the cap, not the count)."""
    same: dict[tuple, list[_Member]] = {}
    for index, file in enumerate(files):
        try:
            size = file.path.stat().st_size
            if size >= CACHE_BYTES or size > ascend_kernels.IN_MEMORY_BYTES:
                continue
            kernel_file = ascend_kernels.inspect(file.path)
            check_lines(file.path)  # a file the CSV reader must not see is refused by `_reduce_alone`
        except (OSError, ProfanInputError):
            continue
        same.setdefault((tuple(kernel_file.header), file.rows_in_time), []).append((index, kernel_file, size))
    parts: list[list[_Member]] = []
    for members in same.values():
        parts.append([])
        held = 0
        for member in members:
            if parts[-1] and held + member[2] > BATCH_BYTES:
                parts.append([])
                held = 0
            parts[-1].append(member)
            held += member[2]
    return parts


def _reduce_alone(f: KernelRequest, rules: list, roles: Roles) -> KernelPass | ProfanInputError:
    """`_reduce_one`, its input error as the value; a file polars cannot parse at all is one too."""
    try:
        return _reduce_one(f, rules, roles)
    except ProfanInputError as exc:
        return exc
    except pl.exceptions.PolarsError as exc:  # malformed beyond what the tolerant reader accepts
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ProfanInputError(f.path, f"cannot be parsed as CSV ({first})")


def _reduce_one(f: KernelRequest, rules: list, roles: Roles) -> KernelPass:
    """One file read on its own, as any file can be. The groups of a big file are cached (before classification,
    so a changed rule pack never meets a stale verdict), and so are a streamed file's blocks in time: analysing it
    again — ``profan evidence DIR F3``, an agent's follow-up question — skips the pass (but for the timed rows,
    when asked: they are too big to cache)."""
    kernel_file = ascend_kernels.inspect(f.path)
    size = f.path.stat().st_size
    starts = f.starts or size <= ascend_kernels.IN_MEMORY_BYTES  # in memory the starts cost next to nothing
    streamed = size > ascend_kernels.IN_MEMORY_BYTES
    rows = timed = blocks = None
    if size >= CACHE_BYTES:
        from profan.sources.common.cache import cached_table

        # one pass for the groups and the timed rows, run only for what the cache does not hold
        placed = f.timed or f.blocks
        scan = cache(lambda: _reduce_file(kernel_file, starts, placed=streamed and placed, loc=f.timed))
        # the rows a group sums depend on the duration bound: a changed bound is another table
        kind = f"{'kernel_groups+starts' if starts else 'kernel_groups'}/dur<={limits.active().max_duration_us}"
        groups, counts, _ = cached_table(f.path, kind, lambda: scan()[:2])
        if streamed and f.timed:
            timed = _for_windows(_placed(kernel_file, scan()[3], roles))
        if streamed and f.blocks:
            blocks = intervals.kernel_file_blocks(
                f.path, roles.comm_variant(), lambda: _for_blocks(kernel_file, scan()[3], roles)
            )
    else:
        groups, counts, rows, _ = _reduce_file(kernel_file, starts, f.rows_in_time or uses_neighbors(rules))
        groups = group_neighbors(groups, rows, kernel_file, rules)
        timed = None if rows is None or not f.rows_in_time else ascend_kernels.timed_rows(kernel_file, rows)
    # one order for the same input: a hash grouping's order varies from run to run, and with it the order of
    # every later float sum — enough to swap two kernels of equal time in a ranking
    groups = classify_distinct(groups, rules).sort(KEYS, nulls_last=True)
    return KernelPass(
        groups,
        {"rows": counts["rows"], "skipped": counts["skipped"]},
        kernel_file.variant,
        kernel_file.has_pipe_ratios,
        timed,
        blocks,
    )


def streamed_blocks(path: Path, roles: Roles) -> tuple[pl.DataFrame, int]:
    """A streamed kernel file's blocks in time (cached) when its kernel pass did not cut them (its rank was to
    take them from trace_view.json, which gave none): the timed rows read by a scan of their own."""
    kernel_file = ascend_kernels.inspect(path)

    def rows() -> pl.DataFrame:
        return _for_blocks(
            kernel_file,
            ascend_kernels.scanned(
                kernel_file, lambda lazy: _timed_rows(kernel_file, lazy).collect(engine="streaming")
            ),
            roles,
        )

    return intervals.kernel_file_blocks(path, roles.comm_variant(), rows)


def _timed_rows(kernel_file: ascend_kernels.KernelFile, lazy: pl.LazyFrame, loc: bool = False) -> pl.LazyFrame:
    """The usable rows of a `scan_for_groups` scan with their place in time: the raw step, name, type and core
    (Categorical: a few bytes a row) and start_us, dur_us — what a streamed file's blocks in time are cut from —
    and, with ``loc``, each row's line, which the collectives' windows cite."""
    raw = [kernel_file.columns[k] for k in ("step", "name", "type", "core") if k in kernel_file.columns]
    line = [pl.col("src_line").alias("loc")] if loc else []
    return lazy.filter(~pl.col("bad") & pl.col("dur_us").is_not_null()).select(*raw, "start_us", "dur_us", *line)


def _placed(kernel_file: ascend_kernels.KernelFile, timed: pl.DataFrame, roles: Roles) -> pl.LazyFrame:
    """`_timed_rows` with their kernel's keys (step, and op, name, type, core as Categorical: a few bytes a row)
    and ``_comm``, whether the row is communication (`Roles.is_comm`): the key clean-up, the op derivation and
    the roles' test run once per distinct raw value, not per row, and joined back only for the columns a caller
    selects (`_for_windows`)."""
    c, keys = kernel_file.columns, ascend_kernels.key_exprs(kernel_file)
    kind = [c[k] for k in ("name", "type", "core") if k in c]
    kinds = (
        timed.lazy()
        .select(kind)
        .unique()
        .with_columns(*keys[1:4])
        .with_columns(ascend_kernels.op_expr())
        .with_columns(roles.is_comm().alias("_comm"), pl.col("op", "name", "type", "core").cast(pl.Categorical))
    )
    out = timed.lazy().join(kinds, on=kind, how="left", nulls_equal=True, maintain_order="left")
    if "step" in c:
        steps = timed.lazy().select(c["step"]).unique().with_columns(keys[0])
        return out.join(steps, on=c["step"], how="left", nulls_equal=True, maintain_order="left")
    return out.with_columns(keys[0])


def is_comm_row(rows: pl.DataFrame | pl.LazyFrame | list[pl.DataFrame], roles: Roles) -> pl.Expr:
    """Whether a kernel row communicates: the kernel pass's verdict where its rows carry one (``_comm``, decided
    once per distinct kernel by `Roles.is_comm`, `_placed`), else the roles' test on each row."""
    if isinstance(rows, list):
        rows = rows[0] if rows else pl.DataFrame()
    return pl.col("_comm") if "_comm" in rows.collect_schema().names() else roles.is_comm()


def _for_blocks(kernel_file: ascend_kernels.KernelFile, timed: pl.DataFrame, roles: Roles) -> pl.DataFrame:
    """`_timed_rows` as a streamed file's blocks in time are cut from (`intervals.kernel_file_blocks`): step,
    start_us, dur_us and ``_comm`` (`Roles.is_comm`, null where it says nothing), decided once per distinct
    kernel and found per row by a lookup of the few communication kernels — not a join of every row back to its
    kernel, which cost 5× as much on a 1 GB file (bench/README.md). A step the CSV reader parsed is cast, not
    cleaned as text."""
    cols, keys = kernel_file.columns, ascend_kernels.key_exprs(kernel_file)
    kind = [cols[key] for key in ("name", "type", "core") if key in cols]
    verdicts = (
        timed.lazy()
        .select(kind)
        .unique()
        .with_columns(*keys[1:4])
        .with_columns(ascend_kernels.op_expr())
        .select(pl.struct(kind).alias("_kind"), roles.is_comm().alias("_comm"))
        .collect()
    )

    def among(verdict: pl.Expr) -> pl.Expr:
        return pl.struct(kind).is_in(verdicts.filter(verdict)["_kind"].implode())

    comm = among(pl.col("_comm"))
    if verdicts["_comm"].null_count():
        comm = pl.when(among(pl.col("_comm").is_null())).then(pl.lit(None, pl.Boolean)).otherwise(comm)
    numeric = "step" in cols and timed.schema[cols["step"]].is_numeric()
    step = pl.col(cols["step"]).cast(pl.Int64, strict=False).alias("step") if numeric else keys[0]
    return timed.select(step, "start_us", "dur_us", comm.alias("_comm"))


def _for_windows(placed: pl.LazyFrame) -> pl.DataFrame | None:
    """The timed rows as the collectives' windows take them (`ascend_kernels.timed_rows`, with ``_comm``), or None
    when the rows' lines are not known (a quoted line break: the windows read the file again, mapping records to
    lines)."""
    if "loc" not in placed.collect_schema().names():
        return None
    return placed.select("step", "op", "name", "type", "core", "start_us", "dur_us", "loc", "_comm").collect()


EXACT_ROWS = 1 << 20  # kernel rows of a table grouped exactly (about the rows of a kernel file of IN_MEMORY_BYTES)


def reduce_table(
    rows: pl.DataFrame, keyed: tuple[list[str], list[pl.Expr]], pipes: list[str], rules: list, variant: str, timed: bool
) -> KernelPass:
    """A kernel table that is no CSV file — torch_npu's DB export (`profan.sources.ascend_db.reader`), rows keyed by
    integer ids — reduced as a kernel file is: the same groups, cited lines (here the table's row ids), counts
    and verdicts, so the analyses cannot tell the sources apart. ``keyed``: (raw key columns, `KEYS` expressions
    over them). ``timed``: also the rows with their place in time, for the collectives' windows."""
    exact = rows.height <= EXACT_ROWS  # as a kernel file: the largest rows per group when few, else streamed
    groups, counts, _ = _group_rows(rows.lazy(), None, Grouping(pipes, exact, starts=True), keyed=keyed)
    groups = group_neighbors(groups, rows if exact else None, None, rules, keys=keyed[1])
    groups = classify_distinct(groups, rules).sort(KEYS, nulls_last=True)
    frame = None
    if timed:
        frame = (
            rows.lazy()
            .filter(~pl.col("bad"))
            .select(*keyed[1][:4], "start_us", "dur_us", pl.col("src_line").alias("loc"))
            .with_columns(ascend_kernels.op_expr())
            .select("step", "op", "name", "type", "core", "start_us", "dur_us", "loc")
            .collect()
        )
    return KernelPass(
        groups, {"rows": int(counts["rows"][0]), "skipped": int(counts["bad"][0])}, variant, bool(pipes), frame
    )


def _reduce_same_header(kfs: list[ascend_kernels.KernelFile], rules: list, timed: bool) -> dict[int, KernelPass]:
    """Small files of one header read as one table: {index in ``kfs``: KernelPass} of the files that need nothing
    more (one line per record, at least one row); the others are left to `_reduce_alone`. Any cell polars
    refuses — the fast reader's numbers, a step id that is no integer — leaves every file of the run to it."""
    try:
        return _reduce_same_header_rows(kfs, rules, timed)
    except pl.exceptions.PolarsError:
        return {}


def _reduce_same_header_rows(kfs: list[ascend_kernels.KernelFile], rules: list, timed: bool) -> dict[int, KernelPass]:
    kernel_file, by = kfs[0], ("_f",)
    pipes = list(kernel_file.pipe_columns)
    rows = pl.concat(
        [
            ascend_kernels.scan_for_groups(k).with_columns(pl.lit(index, pl.Int64).alias("_f"))
            for index, k in enumerate(kfs)
        ]
    ).collect()
    groups, counts, _ = _group_rows(rows.lazy(), kernel_file, Grouping(pipes, exact=True, starts=True, by=by))
    n_rows = dict(zip(counts["_f"].to_list(), counts["rows"].to_list(), strict=True))
    bad = dict(zip(counts["_f"].to_list(), counts["bad"].to_list(), strict=True))
    # one line per record (else src_line is not the physical line) and at least one row: what reading files
    # together can do; the other files' groups are dropped below, and each of them is read alone
    ok = [index for index, k in enumerate(kfs) if n_rows.get(index, 0) and count_lines(k.path) == n_rows[index] + 1]
    if not ok:
        return {}
    if len(ok) < len(kfs):
        rows = rows.filter(pl.col("_f").is_in(ok))
    groups = group_neighbors(groups, rows, kernel_file, rules, by)
    groups = classify_distinct(groups, rules).sort(["_f", *KEYS], nulls_last=True)
    parts = groups.partition_by("_f", as_dict=True, include_key=False, maintain_order=True)
    empty = groups.clear().drop("_f")
    times: dict = {}
    if timed:
        t = ascend_kernels.timed_rows(kernel_file, rows, by)
        times = t.partition_by("_f", as_dict=True, include_key=False, maintain_order=True)
        t_empty = t.clear().drop("_f")
    return {
        index: KernelPass(
            parts.get((index,), empty),
            {"rows": n_rows[index], "skipped": int(bad[index])},
            kfs[index].variant,
            kfs[index].has_pipe_ratios,
            times.get((index,), t_empty) if timed else None,
        )
        for index in ok
    }


def _reduce_file(
    kernel_file: ascend_kernels.KernelFile,
    starts: bool,
    keep_rows: bool = False,
    placed: bool = False,
    loc: bool = False,
) -> tuple[pl.DataFrame, dict[str, int], pl.DataFrame | None, pl.DataFrame | None]:
    """(unclassified groups, {"rows", "skipped"}, the per-row table when ``keep_rows`` and the file is read in
    memory, the timed rows of a streamed file when ``placed`` (`_timed_rows`; with ``loc``, their lines) of one
    kernel file.

    A streamed file's timed rows come from the scan that groups it (`pl.collect_all` shares one parse between the
    two queries), so placing its kernels in time costs no second parse. The physical line count that proves one
    line per record comes from the pass `csvtext.check_lines` makes before polars may read the file (it refuses a
    line past ``max_line_bytes`` and a lone CR first, which the CSV parser must never see), so it costs no second
    read."""
    path = kernel_file.path
    pipes = list(kernel_file.pipe_columns)
    exact = path.stat().st_size <= ascend_kernels.IN_MEMORY_BYTES  # in memory: the TOP_LINES largest rows
    keep = keep_rows and exact
    grouping = Grouping(pipes, exact, starts)
    rows = timed = None

    def reduce(lazy: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.DataFrame, int, int]:
        nonlocal rows, timed
        if keep:
            rows = lazy.collect()
            lazy = rows.lazy()
        also = [_timed_rows(kernel_file, lazy, loc)] if placed and not exact else []
        groups, counts, also = _group_rows(lazy, kernel_file, grouping, also=also)
        timed = also[0] if also else None
        return lazy, groups, int(counts["rows"][0]), int(counts["bad"][0])

    lazy, groups, n_rows, n_bad = ascend_kernels.scanned(kernel_file, reduce)
    one_line_per_record = count_lines(path) == n_rows + 1
    if n_rows == 0:
        raise ProfanInputError(path, "no data rows (header only)")
    if not one_line_per_record:
        # A quoted field holds a line break: map record index -> true physical line, then redo the reduction.
        lazy = ascend_kernels.with_exact_lines(kernel_file, lazy, n_rows)
        groups, _, _ = _reduce_rows(lazy, kernel_file, grouping)
        if keep:
            rows = lazy.collect()
        if timed is not None:  # its lines are records, not lines: left out (`_for_windows`)
            timed = timed.drop("loc", strict=False)
    return groups, {"rows": n_rows, "skipped": n_bad}, rows, timed
