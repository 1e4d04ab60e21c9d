"""Reader for Ascend ``kernel_details.csv`` and msprof ``op_summary_*.csv``.

Columns are matched by name (every header variant K1–K8 of the format reference), never by position; metric
columns are matched by suffix so ``aic_mac_ratio`` and un-prefixed ``mac_ratio`` both count. Each row keeps the
physical line it came from (``src_line``), the locator every piece of evidence cites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import polars as pl

from profan.model.errors import ProfanInputError
from profan.rulepack import limits
from profan.rulepack.roles import defaults as default_roles
from profan.sources.common.csvtext import (
    count_lines,
    is_bad_number,
    missing_columns,
    num,
    read_header,
    record_start_lines,
    scan_text_csv,
    text,
)

# canonical name -> accepted header names (torch_npu kernel_details first, msprof op_summary second)
ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("Step Id",),
    "device_id": ("Device_id",),
    "name": ("Name", "Op Name"),
    "type": ("Type", "OP Type"),
    "op_state": ("OP State",),
    "core": ("Accelerator Core", "Task Type"),
    "start_us": ("Start Time(us)", "Task Start Time(us)"),
    "dur_us": ("Duration(us)", "Task Duration(us)"),
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
}
REQUIRED = ("name", "start_us", "dur_us")
# Kernel files up to this size are read into memory at once (exact top rows per group, no streaming set-up);
# bigger ones are streamed, so memory stays bounded by the groups, never by the file.
IN_MEMORY_BYTES = 64 << 20
PIPES = ("mac", "vec", "scalar", "mte1", "mte2", "mte3", "fixpipe")


@dataclass
class KernelFile:
    """What the header of one kernel file told us."""

    path: Path
    header: list[str]
    columns: dict[str, str]  # canonical -> header name
    pipe_columns: dict[str, list[str]] = field(default_factory=dict)  # pipe -> ratio columns (aic_/aiv_/bare)

    @property
    def has_pipe_ratios(self) -> bool:
        return bool(self.pipe_columns)

    @property
    def variant(self) -> str:
        parts = [f"{len(self.header)} columns"]
        for canon, label in (("step", "Step Id"), ("device_id", "Device_id"), ("op_state", "OP State")):
            parts.append(label if canon in self.columns else f"no {label}")
        parts.append("pipe ratios" if self.pipe_columns else "no pipe ratios")
        return ", ".join(parts)


def inspect(path: Path) -> KernelFile:
    header = read_header(path)
    cols: dict[str, str] = {}
    for canon, names in ALIASES.items():
        for name in names:
            if name in header:
                cols[canon] = name
                break
    missing = [ALIASES[c][0] for c in REQUIRED if c not in cols]
    if missing:
        raise missing_columns(path, missing, header, [name for names in ALIASES.values() for name in names])
    pipes: dict[str, list[str]] = {}
    for pipe in PIPES:
        matches = [h for h in header if h in (f"{pipe}_ratio", f"aic_{pipe}_ratio", f"aiv_{pipe}_ratio")]
        if matches:
            pipes[pipe] = matches
    return KernelFile(path=path, header=header, columns=cols, pipe_columns=pipes)


def key_exprs(kernel_file: KernelFile) -> list[pl.Expr]:
    """The text columns kernels are grouped by (step, name, type, core, input_shapes), as expressions over the
    raw header columns. Shared by `scan` (per row) and the reduction in `profan.ranks.rankmap` (per distinct raw value,
    after grouping — far fewer evaluations than rows on big files)."""
    c = kernel_file.columns
    return [
        # a cell that is no step number makes its row bad (`number_exprs`): never cast here
        (num(c["step"]).cast(pl.Int64, strict=False) if "step" in c else pl.lit(None, pl.Int64)).alias("step"),
        text(c["name"]).alias("name"),
        (text(c["type"]) if "type" in c else pl.lit("N/A")).alias("type"),
        (text(c["core"]) if "core" in c else pl.lit("N/A")).alias("core"),
        # shapes are written as """4096,1024""": drop the quote characters
        (
            pl.col(c["input_shapes"]).cast(pl.String).str.strip_chars(' \t\r"')
            if "input_shapes" in c
            else pl.lit(None, pl.Utf8)
        ).alias("input_shapes"),
    ]


def raw_key_columns(kernel_file: KernelFile) -> list[str]:
    """Header names of the key columns present in this file (what `key_exprs` reads)."""
    return [
        kernel_file.columns[k] for k in ("step", "name", "type", "core", "input_shapes") if k in kernel_file.columns
    ]


def float_columns(kernel_file: KernelFile) -> tuple[str, ...]:
    """Columns a fast scan lets the CSV reader parse as numbers (see `scan_text_csv`): step id, duration, wait
    time, the block dims and the pipe ratios. Not start time: torch_npu appends a TAB the reader refuses. Text in any of
    them (a misaligned row, ``NA``) makes the fast scan raise and the caller re-reads them as text."""
    names = [
        kernel_file.columns[k]
        for k in ("step", "dur_us", "wait_us", "block_dim", "mix_block_dim")
        if k in kernel_file.columns
    ]
    return tuple(names + [col for cols_ in kernel_file.pipe_columns.values() for col in cols_])


def number_exprs(kernel_file: KernelFile, *, typed: tuple[str, ...] = ()) -> list[pl.Expr]:
    """Per-row numbers: start_us, dur_us, wait_us, ``bad``, and one column per pipe (the larger of its aic_/aiv_
    ratios). ``typed``: columns the scan already parsed as floats.

    ``bad`` marks a row that cannot be sized — no duration as a number (a truncated row, or ``N/A``), or one that
    is not finite (``nan``, ``inf``), negative, or longer than ``max_duration_us`` (1e300 µs is no measurement:
    summed, it would drown every real row) — or that holds text in a block-dim column: a row one field short
    shifts every later value and "NO" lands in Mix Block Dim. Block dims are integers or N/A in every variant.
    A Step Id that is written but is no step number (text, negative, a fraction, past int64) makes the row bad
    too: its time belongs to a step no one can name, and read as "no step" it would make a step of its own.
    Bad rows are skipped and counted. The start time does not decide: a start of ``N/A`` or any other text that
    is not a number reads as null, and the row's duration still counts (it only has no place in time) — the
    same on both scans, so whether a row counts never depends on another cell of the file."""
    c = kernel_file.columns

    def number(col: str) -> pl.Expr:
        return pl.col(col) if col in typed else num(col)

    start, dur = num(c["start_us"]), number(c["dur_us"])
    longest = limits.active().max_duration_us
    exprs = [
        start.alias("start_us"),
        dur.alias("dur_us"),
        (number(c["wait_us"]) if "wait_us" in c else pl.lit(None, pl.Float64)).alias("wait_us"),
        pl.any_horizontal(
            dur.is_null(),
            (~dur.is_finite() | (dur < 0) | (dur > longest)).fill_null(False),
            *[
                is_bad_number(c[k])
                if c[k] not in typed
                # typed: text there makes the reader raise — the column must be read for that, so
                # the check names it (an unused column would be pruned from the scan)
                else pl.col(c[k]).is_infinite().fill_null(False)
                for k in ("block_dim", "mix_block_dim")
                if k in c
            ],
            *([_bad_step(c["step"], typed)] if "step" in c else []),
        ).alias("bad"),
    ]
    for pipe, cols in kernel_file.pipe_columns.items():
        exprs.append(pl.max_horizontal([number(x) for x in cols]).alias(pipe))
    return exprs


def _bad_step(col: str, typed: tuple[str, ...]) -> pl.Expr:
    """True where a Step Id cell holds something but no step number: a whole number from 0 below 2**63. Read as
    text (not in ``typed``), a cell that is no number is a bad one too; the fast reader refuses it instead."""
    step = pl.col(col) if col in typed else num(col)
    odd = (~step.is_finite() | (step < 0) | (step >= 2.0**63) | (step != step.floor())).fill_null(False)
    return odd if col in typed else is_bad_number(col) | odd


def _scan_raw(kernel_file: KernelFile, floats: tuple[str, ...] = (), categorical: tuple[str, ...] = ()) -> pl.LazyFrame:
    c = kernel_file.columns
    wanted = sorted(set(c.values()) | {col for cols in kernel_file.pipe_columns.values() for col in cols})
    return scan_text_csv(kernel_file.path, wanted, floats, categorical).with_row_index("src_line", offset=2)


def scan(kernel_file: KernelFile, *, line_offset_check: bool = True) -> pl.LazyFrame:
    """Canonical lazy table: src_line, step, name, type, core, start_us, dur_us, wait_us, input_shapes,
    op_state, pipe ratios, and ``bad`` (row whose start/duration cannot be parsed).

    ``src_line`` assumes one physical line per record; ``verify_lines`` checks that and the caller falls back to
    ``exact_line_map`` when a quoted field holds a line break.
    """
    c = kernel_file.columns
    keys, nums = key_exprs(kernel_file), number_exprs(kernel_file)
    exprs: list[pl.Expr] = [
        pl.col("src_line").cast(pl.Int64),
        *keys[:4],  # step, name, type, core
        *nums[:3],  # start_us, dur_us, wait_us
        keys[4],  # input_shapes
        (text(c["op_state"]) if "op_state" in c else pl.lit(None, pl.Utf8)).alias("op_state"),
        *nums[3:],  # bad, pipes
    ]
    return _scan_raw(kernel_file).select(exprs).with_columns(op_expr())


def scan_for_groups(kernel_file: KernelFile, *, fast: bool = True, categories: bool = True) -> pl.LazyFrame:
    """The lean per-row table a reduction streams: src_line, the *raw* key columns (under their header names,
    untouched — apply `key_exprs` after grouping), and `number_exprs`. Reading big files, the per-row text
    clean-up of the keys and the op derivation are what this saves; ``fast`` also lets the CSV reader parse
    `float_columns` (raises on a cell it cannot take). ``categories`` reads the key columns as Categorical:
    grouping millions of rows on them then hashes integers, not strings (raises on text that is not UTF-8, which
    polars reads as text with U+FFFD in place of the bad bytes, `not_utf8_rows`). `scanned` tries them in turn."""
    floats = float_columns(kernel_file) if fast else ()
    raw = raw_key_columns(kernel_file)
    return _scan_raw(kernel_file, floats, tuple(raw) if categories else ()).select(
        pl.col("src_line").cast(pl.Int64), *raw, *number_exprs(kernel_file, typed=floats)
    )


T = TypeVar("T")
READINGS = (
    {"fast": True, "categories": True},
    {"fast": False, "categories": True},
    {"fast": False, "categories": False},
)


def scanned(kernel_file: KernelFile, query: Callable[[pl.LazyFrame], T]) -> T:
    """``query`` over the file's `scan_for_groups` scan, read the cheapest way its cells allow: numbers parsed by
    the CSV reader and keys as categories; else numbers as text (a cell that fast reader refuses); else keys as
    text too (text that is not UTF-8). The last reading's error is the file's."""
    for reading in READINGS[:-1]:
        try:
            return query(scan_for_groups(kernel_file, **reading))
        except pl.exceptions.PolarsError:
            continue
    return query(scan_for_groups(kernel_file, **READINGS[-1]))


def not_utf8_rows(groups: pl.DataFrame) -> int:
    """Rows of a kernel file's groups (`profan.ranks.kernel_pass`) whose text holds U+FFFD: the CSV reader puts it
    in place of bytes that are not UTF-8, and the report says how many rows it changed so."""
    text = [c for c in ("name", "type", "core", "input_shapes") if c in groups.columns]
    if not text or groups.is_empty():
        return 0
    hit = pl.any_horizontal(pl.col(c).cast(pl.String).str.contains("\ufffd", literal=True) for c in text)
    return int(groups.filter(hit.fill_null(False))["count"].sum())


def timed_rows(kernel_file: KernelFile, rows: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """The usable rows of a `scan_for_groups` table (read in memory) with their place in time: step, op, name,
    type, core, start_us, dur_us, loc (the CSV line) — what `scan` gives the collectives, without a second read
    of the file. ``by``: columns kept in front (the file index of a batch of files)."""
    return (
        rows.lazy()
        .filter(~pl.col("bad") & pl.col("dur_us").is_not_null())
        .select(*by, *key_exprs(kernel_file)[:4], "start_us", "dur_us", pl.col("src_line").alias("loc"))
        .with_columns(op_expr())
        .select(*by, "step", "op", "name", "type", "core", "start_us", "dur_us", "loc")
        .collect(engine="in-memory")
    )


def op_expr() -> pl.Expr:
    """The op type a rule matches on: ``Type`` where present, else derived from the kernel name.

    Level0 files write ``Type`` = N/A; their names still carry the op: ``aclnnAdd_AddAiCore_Add`` -> Add,
    ``trans_TransData_0`` -> TransData, ``Conv2D1`` -> Conv2D, ``hcom_allReduce__868_0_1`` -> hcom_allReduce_ (the
    Type newer files write for the same op). The name forms are roles ``ascend_name_ops`` (the first that matches
    gives the op); any other name is its op without the trailing index.
    """
    name = pl.col("name")
    derived = name.str.replace(r"\d+$", "")
    for pattern in reversed(default_roles().ascend_name_ops):  # built from the last, so the first match wins
        derived = pl.when(name.str.contains(pattern)).then(name.str.extract(pattern, 1)).otherwise(derived)
    typ = pl.col("type")
    return (pl.when(typ.is_null() | typ.is_in(["N/A", "", "0"])).then(derived).otherwise(typ)).alias("op")


def verify_lines(kernel_file: KernelFile, n_records: int) -> bool:
    """True when the file has exactly one physical line per record (the fast src_line is then exact)."""
    return count_lines(kernel_file.path) == n_records + 1


def exact_line_map(kernel_file: KernelFile, n_records: int) -> pl.DataFrame:
    """record index (as the fast src_line) -> true physical line, for files with multi-line quoted fields. The
    exact reader must find the records the CSV reader found: where they disagree (a quote that is never closed,
    which each reader ends its own way), no row can be told its line, and the file is one line naming it."""
    starts = record_start_lines(kernel_file.path)
    if len(starts) != n_records:
        raise ProfanInputError(
            kernel_file.path,
            f"its records cannot be matched to their lines ({n_records} read as CSV, {len(starts)} found line by "
            "line): a quoted field is not closed",
        )
    return pl.DataFrame(
        {
            "src_line": pl.Series(range(2, len(starts) + 2), dtype=pl.Int64),
            "true_line": pl.Series(starts, dtype=pl.Int64),
        }
    )


def with_exact_lines(kernel_file: KernelFile, lazy: pl.LazyFrame, n_records: int) -> pl.LazyFrame:
    """`lf` with src_line corrected to the true physical line when quoted fields hold line breaks."""
    if verify_lines(kernel_file, n_records):
        return lazy
    line_map = exact_line_map(kernel_file, n_records).lazy()
    return (
        lazy.join(line_map, on="src_line", how="left")
        .with_columns(pl.col("true_line").alias("src_line"))
        .drop("true_line")
    )
