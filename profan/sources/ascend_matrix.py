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

import re
from pathlib import Path

import polars as pl

from profan.evidence import make_pointer
from profan.sources import ascend_comm
from profan.sources.ascend_meta import Metadata, double_hash
from profan.sources.rowframe import rows_frame

_AGG_KEY = re.compile(r"^([A-Za-z]+)-(top\d+|middle|bottom\d+|total)@(\d+)$")
_LINK = re.compile(r"^(\d+)-(\d+)$")
# torch_npu's op-type regex (first hit wins), so per-op keys get the same coarse type as aggregated ones
_OP_TYPE = re.compile(r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|alltoall|"
                      r"alltoallv|alltoallvc|batchsendrecv")

SCHEMA = {
    "step": pl.Int64, "kind": pl.Utf8, "key": pl.Utf8, "shape": pl.Utf8, "op_type": pl.Utf8, "rank_class": pl.Utf8,
    "op_name": pl.Utf8, "group_hash": pl.Utf8, "src_local": pl.Int64, "dst_local": pl.Int64, "transport": pl.Utf8,
    "size_mb": pl.Float64, "time_ms": pl.Float64, "bandwidth_gbps": pl.Float64, "pointer": pl.Utf8,
}


def op_type(op_name: str) -> str:
    """torch_npu's coarse type of an op name: ``hcom_reduceScatter__1`` → ``reduce`` (its first regex hit)."""
    m = _OP_TYPE.search(op_name.lower())
    return m.group(0) if m else "unknown"


def read(path: Path) -> tuple[pl.DataFrame, int]:
    """(one row per link entry, skipped entries). Rows are built as tuples and each op's pointer prefix once:
    a cluster's matrix holds thousands of links per rank."""
    items, skipped = ascend_comm.entries(path)
    rows: list[tuple] = []
    for step_key, step, kind, key, links in items:
        if not isinstance(links, dict):
            skipped += 1
            continue
        agg = _AGG_KEY.match(key)
        if agg:
            shape, typ, rank_class, group = "aggregated", agg.group(1).lower(), agg.group(2), agg.group(3)
            name = None
        else:
            name, _, group = key.partition("@")
            shape, typ, rank_class = "per-op", op_type(name), None
        prefix = make_pointer(step_key, kind, key) + "/"
        for link, v in links.items():
            lm = _LINK.match(link)
            if not lm or not isinstance(v, dict):
                skipped += 1
                continue
            rows.append((
                step, kind, key, shape, typ, rank_class, v.get("Op Name") if agg else name, group or None,
                # numbers as the JSON holds them: rows_frame coerces a value of another type (text, a list) to
                # the column's float or null — one conversion per column instead of a call per value
                int(lm.group(1)), int(lm.group(2)), str(v.get("Transport Type", "")), v.get("Transit Size(MB)"),
                v.get("Transit Time(ms)"), v.get("Bandwidth(GB/s)"),
                prefix + link))  # "src-dst" holds neither "~" nor "/": no escaping
    return rows_frame(rows, SCHEMA), skipped


def group_table(meta: Metadata | None) -> pl.DataFrame:
    """HCCL group hash → framework group name and sorted global ranks, from parallel_group_info."""
    schema = {"group_hash": pl.Utf8, "group_name": pl.Utf8, "hccl_group": pl.Utf8, "group_ranks": pl.List(pl.Int64)}
    if meta is None or not meta.groups:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame([{"group_hash": str(double_hash(g.hccl_name)), "group_name": g.group_name,
                          "hccl_group": g.hccl_name, "group_ranks": sorted(g.global_ranks)} for g in meta.groups],
                        schema=schema, orient="row").unique("group_hash", keep="first")


def map_ranks(links: pl.DataFrame, meta: Metadata | None) -> pl.DataFrame:
    """Add group_name, group_ranks and global src_rank/dst_rank (null where the group is not in the metadata)."""
    groups = group_table(meta)
    out = links.join(groups, on="group_hash", how="left")
    return out.with_columns(
        pl.col("group_ranks").list.get(pl.col("src_local"), null_on_oob=True).alias("src_rank"),
        pl.col("group_ranks").list.get(pl.col("dst_local"), null_on_oob=True).alias("dst_rank"),
    )


NOT_LINKS = ("LOCAL", "", "N/A", "INVALID_TYPE")  # matrix entries that are on-chip copies, not links
LINK_KEYS = ["step", "kind", "op_type", "group_hash", "group_name", "src_local", "dst_local", "src_rank", "dst_rank",
             "transport"]


def link_totals(links: pl.DataFrame) -> pl.DataFrame:
    """Per link (step, op type, group, source → destination, transport) of one rank: bytes, time and the pointers
    of the entries summed — what the cross-rank link comparison reads (`profan.analyses.bandwidth.link_table`).

    Runs in the per-rank map, so only this travels back from a worker: the raw links of a 64-rank group repeat
    the group's rank list on every row (2 MB per rank). Aggregated matrices contribute their ``-total`` entries
    (top/middle/bottom are picks of the same ops); per-op matrices are summed per link. Entries without bytes or
    time, and on-chip copies, are not links."""
    m = links.filter(~pl.col("transport").is_in(NOT_LINKS) & (pl.col("size_mb").fill_null(0) > 0)
                     & (pl.col("time_ms").fill_null(0) > 0))
    m = m.filter((pl.col("shape") == "per-op") | (pl.col("rank_class") == "total"))
    return (m.group_by(LINK_KEYS, maintain_order=True)
            .agg(pl.col("size_mb").sum(), pl.col("time_ms").sum(), pl.col("pointer").alias("pointers"),
                 pl.col("shape").first()))
