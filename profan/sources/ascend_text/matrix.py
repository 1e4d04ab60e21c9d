"""Reader for ``communication_matrix.json``: bytes and time per link (source rank → destination rank, transport).

Two shapes exist (format reference §6):

* **per op** (torch_npu ≤ 2023): ``step → p2p|collective → "<op>@<group hash>" → "src-dst" → link``;
* **aggregated** (current torch_npu): ``"<type>-top1|middle|bottomN|total@<group hash>" → "src-dst" → link``,
  where ``<type>`` is torch_npu's coarse op type (``reduce`` for reduce-scatter) and ``-total`` sums all ops of
  that type and group.

``src``/``dst`` are **group-local** ranks; :func:`map_ranks` turns them into global ranks with the rank's
``profiler_metadata.json`` ``parallel_group_info`` (the ``@`` suffix is ``double_hash`` of the HCCL group name,
and local rank i is ``sorted(global_ranks)[i]``). Without that file the global ranks stay unknown (null) and the
report says so. ``Total Op Info`` aggregates are skipped: they are not links of one op.

Every row keeps the RFC 6901 pointer of its link object, the evidence locator.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec
import polars as pl

from profan.model.evidence import make_pointer
from profan.model.files import open_regular
from profan.model.rank import Metadata
from profan.rulepack import limits
from profan.rulepack.roles import defaults as default_roles
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.ascend_text.meta import double_hash
from profan.sources.common.rowframe import columns_frame, rows_frame, stack

_AGG_KEY = re.compile(r"^([A-Za-z]+)-(top\d+|middle|bottom\d+|total)@(\d+)$")

SCHEMA = {
    "step": pl.Int64,
    "kind": pl.Utf8,
    "key": pl.Utf8,
    "shape": pl.Utf8,
    "op_type": pl.Utf8,
    "rank_class": pl.Utf8,
    "op_name": pl.Utf8,
    "group_hash": pl.Utf8,
    "src_local": pl.Int64,
    "dst_local": pl.Int64,
    "transport": pl.Utf8,
    "size_mb": pl.Float64,
    "time_ms": pl.Float64,
    "bandwidth_gbps": pl.Float64,
    "pointer": pl.Utf8,
}


def op_type(op_name: str) -> str:
    """torch_npu's coarse type of an op name: ``hcom_reduceScatter__1`` → ``reduce`` (the first hit of its regex,
    roles ``hccl_matrix_op_types``), so per-op keys get the same coarse type as aggregated ones."""
    match = re.search(default_roles().hccl_matrix_op_types, op_name.lower())
    return match.group(0) if match else "unknown"


def read(path: Path) -> tuple[pl.DataFrame, int]:
    """(one row per link entry, skipped entries)."""
    links, _, skipped = _read(path, totals_only=False)
    return links, skipped


def read_for_totals(path: Path) -> tuple[pl.DataFrame, int, int]:
    """(the link entries `link_totals` reads, entries read, entries skipped). An aggregated matrix's top, middle
    and bottom entries are picks of the ops its ``-total`` entry sums: they are checked and counted, but no row
    is built for them — three quarters of a current matrix."""
    return _read(path, totals_only=True)


_LINKS = re.compile(r"[0-9]{1,18}-[0-9]{1,18}(?:,[0-9]{1,18}-[0-9]{1,18})*")  # ranks that fit an int64


def _count_valid(links: dict) -> int:
    """How many entries of ``links`` are links (`_valid_link`): every one, checked by one regex over the joined
    keys, in the usual case — a matrix of a large group has thousands per op — else entry by entry."""
    if _keys_are_links(links) and all(isinstance(value, _OBJECTS) for value in links.values()):
        return len(links)
    return sum(1 for link, value in links.items() if _valid_link(link, value))


def _keys_are_links(links: dict) -> bool:
    """Every key of ``links`` is ``"src-dst"``: one regex over the joined keys."""
    joined = ",".join(links)
    return joined.count(",") == len(links) - 1 and bool(_LINKS.fullmatch(joined))


def _valid_link(link: str, v: object) -> bool:
    """A link entry: ``"src-dst"`` (two ASCII rank numbers) holding an object."""
    return _valid_key(link) and isinstance(v, _OBJECTS)


def _valid_key(link: str) -> bool:
    """``"src-dst"``: two ASCII rank numbers that fit an int64 (a longer one used to become a null rank)."""
    s, sep, d = link.partition("-")
    return bool(sep and s.isdigit() and d.isdigit() and s.isascii() and d.isascii() and len(s) <= 18 and len(d) <= 18)


class _Link(msgspec.Struct):
    """The fields of a link object the reader keeps, as the JSON holds them (any value: the frame coerces)."""

    transport: object = msgspec.field(name="Transport Type", default="")
    size_mb: object = msgspec.field(name="Transit Size(MB)", default=None)
    time_ms: object = msgspec.field(name="Transit Time(ms)", default=None)
    bandwidth_gbps: object = msgspec.field(name="Bandwidth(GB/s)", default=None)
    op_name: object = msgspec.field(name="Op Name", default=None)


class _Object(msgspec.Struct):
    """Any JSON object, its contents skipped: a link that is counted, not built."""


_OBJECTS = (dict, _Link, _Object)  # a link object, decoded untyped or typed


# step -> section -> op key -> its links, left undecoded until the reader knows what it needs of them
_DOCUMENT = msgspec.json.Decoder(dict[str, dict[str, dict[str, msgspec.Raw]]])
_BUILT = msgspec.json.Decoder(dict[str, _Link])
_COUNTED = msgspec.json.Decoder(dict[str, _Object])


def _typed_entries(path: Path) -> tuple[list[ascend_comm.Entry], int] | None:
    """`ascend_comm.entries` with each op's links still JSON text, from a document of the usual shape; None for
    anything else (unreadable, not JSON msgspec takes, another nesting), which the untyped reader then reads
    and words. Decoding only what is used is what makes this the fast way: three quarters of a current
    matrix are entries that are only counted, and their links are never made into Python objects."""
    try:
        with open_regular(path) as handle:
            limits.check_size(path, os.fstat(handle.fileno()).st_size, "max_side_file_bytes", "a JSON side file")
            data = handle.read()
        if not data.isascii():
            data.decode("utf-8")  # msgspec checks only the text it decodes, not the text it skips
        doc = _DOCUMENT.decode(data)
    except (OSError, UnicodeDecodeError, RecursionError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    out: list[ascend_comm.Entry] = []
    skipped = 0
    for step_key, sections in doc.items():
        is_step, step = ascend_comm.step_of(step_key)
        if not is_step:
            skipped += 1
            continue
        for kind, items in sections.items():
            out += [(step_key, step, kind, key, body) for key, body in items.items() if key != ascend_comm.TOTAL_KEY]
    return out, skipped


def _read(path: Path, totals_only: bool) -> tuple[pl.DataFrame, int, int]:
    """(link rows, entries read, entries skipped): the typed way (`_typed_entries`) where the document allows,
    else from the untyped document, with the same rows and counts."""
    typed = _typed_entries(path)
    if typed is not None:
        try:
            return _rows(*typed, totals_only, lazy=True)
        except (RecursionError, msgspec.DecodeError, msgspec.ValidationError):  # an op's links: not all objects
            pass
    return _rows(*ascend_comm.entries(path), totals_only, lazy=False)


def _rows(
    items: Iterable[ascend_comm.Entry], skipped: int, totals_only: bool, lazy: bool
) -> tuple[pl.DataFrame, int, int]:
    """The link rows of ``items``. Built column by column, with what is the same for all links of an op repeated
    rather than looked up again: a cluster's matrix holds thousands of links per rank. ``lazy``: each op's links
    are JSON text (`_typed_entries`), decoded here into what is needed."""
    n_read = 0
    cols: dict[str, list] = {name: [] for name in SCHEMA}
    per_op = [cols[c] for c in ("step", "kind", "key", "shape", "op_type", "rank_class", "group_hash")]
    op_name, src, dst, transport = cols["op_name"], cols["src_local"], cols["dst_local"], cols["transport"]
    size, time_ms, bw, pointer = cols["size_mb"], cols["time_ms"], cols["bandwidth_gbps"], cols["pointer"]
    for step_key, step, kind, key, links in items:
        agg = _AGG_KEY.match(key)
        counted = agg and totals_only and agg.group(2) != "total"
        if lazy:
            links = (_COUNTED if counted else _BUILT).decode(links)  # raises unless every link is an object
        elif not isinstance(links, dict):
            skipped += 1
            continue
        if counted:  # counted, not built
            ok = _count_valid(links)
            n_read += ok
            skipped += len(links) - ok
            continue
        if agg:
            fixed = (step, kind, key, "aggregated", agg.group(1).lower(), agg.group(2), agg.group(3) or None)
            name = None
        else:
            name, _, group = key.partition("@")
            fixed = (step, kind, key, "per-op", op_type(name), None, group or None)
        prefix = make_pointer(step_key, kind, key) + "/"
        n = 0
        for link, v in links.items():
            if not _valid_link(link, v):
                skipped += 1
                continue
            n += 1
            s, _, d = link.partition("-")
            src.append(int(s))
            dst.append(int(d))
            if not lazy:  # the rare untyped way: the same fields, by the same names
                v = msgspec.convert(v, _Link)
            # numbers as the JSON holds them: the frame coerces a value of another type (text, a list) to the
            # column's float or null — one conversion per column instead of a call per value
            op_name.append(v.op_name if agg else name)
            transport.append(str(v.transport))
            size.append(v.size_mb)
            time_ms.append(v.time_ms)
            bw.append(v.bandwidth_gbps)
            pointer.append(prefix + link)  # "src-dst" holds neither "~" nor "/": no escaping
        for col, value in zip(per_op, fixed, strict=True):
            col.extend([value] * n)
        n_read += n
    links = columns_frame(cols, SCHEMA)
    usable = links.filter(_usable_numbers())
    unusable = links.height - usable.height
    return usable, n_read - unusable, skipped + unusable


def _usable_numbers() -> pl.Expr:
    """A link whose size, time and bandwidth are each missing or a finite number, its time no longer than
    ``max_duration_us``. ``NaN``/``±Infinity`` are no JSON (the stdlib's reader takes them, torch_npu writes
    with it) and no measurement: a NaN size passes every "> 0" filter (polars orders NaN above all numbers) and
    an infinite one swallows a link's total. Such a link is skipped and counted."""
    ms = limits.active().max_duration_us / 1000
    return pl.all_horizontal(
        [
            pl.col(c).is_null() | (pl.col(c).is_finite() & (pl.col(c).abs() <= most))
            for c, most in (("size_mb", float("inf")), ("time_ms", ms), ("bandwidth_gbps", float("inf")))
        ]
    )


GROUP_SCHEMA = {"group_hash": pl.Utf8, "group_name": pl.Utf8, "hccl_group": pl.Utf8, "group_ranks": pl.List(pl.Int64)}


def group_table(meta: Metadata | None) -> pl.DataFrame:
    """HCCL group hash → framework group name and sorted global ranks, from parallel_group_info."""
    return rank_group_table([(None, meta)]).drop("rank")


def rank_group_table(metas: list[tuple[int | None, Metadata | None]]) -> pl.DataFrame:
    """`group_table` of several ranks in one frame, keyed by (rank, group_hash): the reduce joins all ranks'
    rows at once instead of building one small table per rank. The first group of a hash wins, as in the file."""
    rows, seen = [], set()
    for rank, meta in metas:
        for g in meta.groups if meta is not None else ():
            h = str(double_hash(g.hccl_name))
            if (rank, h) not in seen:
                seen.add((rank, h))
                rows.append((rank, h, g.group_name, g.hccl_name, sorted(g.global_ranks)))
    return rows_frame(rows, {"rank": pl.Int64, **GROUP_SCHEMA})


def map_ranks(links: pl.DataFrame, meta: Metadata | None) -> pl.DataFrame:
    """Add group_name, group_ranks and global src_rank/dst_rank (null where the group is not in the metadata)."""
    return _with_global_ranks(links, group_table(meta), ["group_hash"])


def _with_global_ranks(links: pl.DataFrame, groups: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """`map_ranks` with the group table already built, joined ``on`` its keys (a batch of ranks leads with the
    rank's index)."""
    out = links.join(groups, on=on, how="left", maintain_order="left")
    return out.with_columns(
        pl.col("group_ranks").list.get(pl.col("src_local"), null_on_oob=True).alias("src_rank"),
        pl.col("group_ranks").list.get(pl.col("dst_local"), null_on_oob=True).alias("dst_rank"),
    )


TEXT_KEYS = ["kind", "op_type", "group_hash", "group_name", "shape"]  # categories in `link_totals`
LINK_KEYS = [
    "step",
    "kind",
    "op_type",
    "group_hash",
    "group_name",
    "src_local",
    "dst_local",
    "src_rank",
    "dst_rank",
    "transport",
]


def link_totals(links: pl.DataFrame, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Per link (step, op type, group, source → destination, transport) of one rank: bytes, time and the pointers
    of the entries summed — what the cross-rank link comparison reads (`communication.bandwidth.link_table`).

    Runs in the per-rank map, so only this travels back from a worker: the raw links of a 64-rank group repeat
    the group's rank list on every row (2 MB per rank). Aggregated matrices contribute their ``-total`` entries
    (top/middle/bottom are picks of the same ops); per-op matrices are summed per link. Entries without bytes or
    time, and on-chip copies, are not links. ``by``: keys leading the link's (the rank of a batch of ranks)."""
    not_links = [*default_roles().ascend_not_links, "", "N/A"]  # on-chip copies, waits, no transport recorded
    frame = links.filter(
        ~pl.col("transport").is_in(not_links)
        & (pl.col("size_mb").fill_null(0) > 0)
        & (pl.col("time_ms").fill_null(0) > 0)
    )
    frame = frame.filter((pl.col("shape") == "per-op") | (pl.col("rank_class") == "total"))
    totals = frame.group_by([*by, *LINK_KEYS], maintain_order=True).agg(
        pl.col("size_mb").sum(), pl.col("time_ms").sum(), pl.col("pointer").alias("pointers"), pl.col("shape").first()
    )
    # a cluster's ranks hold ranks² of these rows, their text a few values repeated: as categories, 4 bytes a value
    return totals.with_columns(pl.col(TEXT_KEYS).cast(pl.Categorical))


def rank_link_totals(parts: list[tuple[pl.DataFrame, Metadata | None]]) -> list[pl.DataFrame]:
    """`link_totals` of `map_ranks` for each (links, metadata) of several ranks, computed as one table keyed by
    rank: one query per step for the batch, instead of one per rank (a polars query's fixed cost is most of the
    work on a rank's few thousand links). Each result equals the rank's computed alone."""
    if len(parts) <= 1 or len({tuple(lk.schema.items()) for lk, _ in parts}) > 1:
        return [_own_pointers(link_totals(map_ranks(lk, meta))) for lk, meta in parts]
    links = stack([lk for lk, _ in parts], {"_f": list(range(len(parts)))}, how="vertical")
    groups = rank_group_table([(index, meta) for index, (_, meta) in enumerate(parts)]).rename({"rank": "_f"})
    totals = link_totals(_with_global_ranks(links, groups, ["_f", "group_hash"]), by=("_f",))
    out = totals.partition_by("_f", as_dict=True, include_key=False, maintain_order=True)
    empty = totals.clear().drop("_f")
    return [_own_pointers(out.get((index,), empty)) for index in range(len(parts))]


def _own_pointers(totals: pl.DataFrame) -> pl.DataFrame:
    """The pointers as strings of their own. polars keeps a string cut from a column as a view into that column's
    buffer — here every matrix entry of the batch, most of them dropped — so a rank's few hundred link rows would
    keep the whole batch's pointer text alive and pickle it with them (26x their size). A new string is made for
    each (appending nothing)."""
    return totals.with_columns(pl.col("pointers").list.eval(pl.element() + pl.lit("")))
