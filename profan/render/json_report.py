"""JSON renderer: the `profan.report/2` document (schema in docs/report-schema.md).

A cluster's per-rank communication tables grow with ranks × ops × links (tens of thousands of rows at 64 ranks,
millions at 1,000), which would make the report hundreds of MB that no reader opens. A table over `ROW_LIMIT` rows
is therefore cut (`cut_tables`) to the rows the diagnosis names — the ranks of the causes and headline findings
that point at a place, the links a finding names — plus a summary per class (`<table>_by_class`: min, median and
max of its values across ranks, with the ranks holding the extremes). ``meta.tables_cut`` says what was cut;
``profan analyze --tables DIR`` writes every table in full as Parquet.

The same holds for a group finding's members: one per rank and step of a check measured everywhere (2,000 at
1,000 ranks and 2 steps, each with its own evidence) would be most of the document. A group over `MEMBER_LIMIT`
members keeps its worst members (they come worst first) and those of the ranks the diagnosis names
(`cut_members`); ``meta.members_cut`` says how many of how many, and ``profan evidence DATA_DIR F3.1500`` reads any
member back from a fresh analysis of the data.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgspec
import polars as pl

from profan.model.findings import Finding
from profan.model.report import Report, records_json

ROW_LIMIT = 5000  # a table with more rows than this is cut in the JSON report
MEMBER_LIMIT = 256  # a group finding keeps at most this many members besides those of the named ranks
PLACE_RANKS = 8  # a cause or headline finding naming this many ranks or fewer points at a place; more is a kind
# of time measured on every rank, which names no rank in particular
# table -> (the columns of a class: the same op or link kind across ranks, the values summarised over it)
CLASSES: dict[str, tuple[list[str], list[str]]] = {
    "breakdown": (["step", "bucket"], ["time_us", "share"]),
    "comm_links": (
        ["step", "kind", "op_type", "group_name", "group_hash", "transport"],
        ["bandwidth_gbps", "peer_ratio", "size_mb"],
    ),
    "comm_bandwidth": (["step", "kind", "op_name", "group_name", "transport"], ["bandwidth_gbps", "size_mb"]),
    "communication": (["step", "kind", "op_name", "group_name", "group_hash"], ["elapse_ms", "wait_ms", "transit_ms"]),
    "top_kernels": (["step", "bucket", "op", "name", "input_shapes", "core"], ["time_us", "count"]),
    "boundness": (["bucket", "op", "name", "input_shapes", "core"], ["time_us", "dominant_ratio"]),
    "comm_packets": (["step", "transport"], ["small_share", "lost_ms"]),
}


def render_json(report: Report, out: Path | None = None) -> str | None:
    """The report as indented JSON, big tables cut (`cut_tables`). The tables are encoded by polars
    (`records_json`) and spliced in as raw JSON; the rest by msgspec, ~10x faster than the stdlib. The bytes equal
    the cut report's ``to_dict()`` encoded whole. Written as bytes: a cluster's report is tens of MB."""
    bounded = cut_members(cut_tables(report, ROW_LIMIT), MEMBER_LIMIT)
    doc = bounded.to_dict(rows=lambda frame: msgspec.Raw(records_json(frame)))
    data = msgspec.json.format(msgspec.json.encode(doc), indent=1)
    if out is not None:
        out.write_bytes(data + b"\n")
        return None
    return data.decode("utf-8")


def cut_tables(report: Report, limit: int = ROW_LIMIT) -> Report:
    """``report`` with each per-rank table over ``limit`` rows cut to the rows of `named_ranks` (and, for links,
    the links findings name), a ``<table>_by_class`` summary beside it for the tables of `CLASSES`, and
    ``meta.tables_cut`` saying what was left out; the report itself is unchanged."""
    big = [key for key, value in report.tables.items() if value.height > limit and "rank" in value.columns]
    if not big:
        return report
    ranks = named_ranks(report)
    tables: dict[str, pl.DataFrame] = {}
    cut: dict[str, dict] = {}
    for name, value in report.tables.items():
        if name not in big:
            tables[name] = value
            continue
        keep = pl.col("rank").is_in(ranks)
        if name == "comm_links":
            keep = keep | _named_links(report)
        tables[name] = value.filter(keep)
        cut[name] = {"rows": value.height, "kept": tables[name].height, "ranks_kept": ranks, "summary": None}
        if name in CLASSES:
            tables[f"{name}_by_class"] = by_class(value, *CLASSES[name])
            cut[name]["summary"] = f"{name}_by_class"
        cut[name]["full"] = f"profan analyze DIR --tables OUT_DIR writes it as OUT_DIR/{name}.parquet"
    return replace(report, tables=tables, meta={**report.meta, "tables_cut": cut})


def cut_members(report: Report, limit: int = MEMBER_LIMIT) -> Report:
    """``report`` with each group finding of more than ``limit`` members cut to its first ``limit`` members (the
    worst) and those naming a rank of `named_ranks`, their ids unchanged, and ``meta.members_cut`` saying what
    was left out; the report itself is unchanged."""
    big = [finding for finding in report.findings if len(finding.members) > limit]
    if not big:
        return report
    ranks = set(named_ranks(report))
    findings, cut = [], {}
    for finding in report.findings:
        if len(finding.members) > limit:
            kept = kept_members(finding, limit, ranks)
            cut[finding.id] = {
                "members": len(finding.members),
                "kept": len(kept),
                "full": f"profan evidence DATA_DIR {finding.id}.N reads any member back from the data",
            }
            finding = replace(finding, members=kept)
        findings.append(finding)
    return replace(report, findings=findings, meta={**report.meta, "members_cut": cut})


def kept_members(finding: Finding, limit: int, ranks: set[int]) -> tuple[Finding, ...]:
    """A group's first ``limit`` members (they come worst first) and every member naming one of ``ranks``."""
    return tuple(
        member
        for index, member in enumerate(finding.members)
        if index < limit or ranks.intersection(member.ranks or ())
    )


def named_ranks(report: Report) -> list[int]:
    """The ranks the diagnosis points at: those of each cause and headline finding naming `PLACE_RANKS` ranks or
    fewer (a straggler, a slow stage, a hot expert's rank, a link's two ends)."""
    out: set[int] = set()
    for item in report.headline:
        ranks = [r for r in (item.ranks or ()) if r is not None]
        if len(ranks) <= PLACE_RANKS:
            out.update(ranks)
    return sorted(out)


def _named_links(report: Report) -> pl.Expr:
    """Link rows (either direction) of the links a finding names by their two global ranks (``link_ranks``)."""
    pairs = [
        sorted(m.metrics["link_ranks"])
        for finding in report.findings
        for m in (finding, *finding.members)
        if len(m.metrics.get("link_ranks") or ()) == 2
    ]
    lo = pl.min_horizontal("src_rank", "dst_rank")
    hi = pl.max_horizontal("src_rank", "dst_rank")
    expr = pl.lit(False)
    for a, b in pairs:
        expr = expr | ((lo == a) & (hi == b)).fill_null(False)
    return expr


TIE_TOLERANCE = 1e-12  # relative to a class's largest value: floats this close hold the same value


def _rank_at(col: pl.Expr, value: pl.Expr, is_float: bool) -> pl.Expr:
    """The lowest rank whose ``col`` is ``value`` (the class's min or max), or the lowest rank when no row has a
    value. Floats within `TIE_TOLERANCE` of it tie: a sum's last bits depend on the order a parallel grouping
    added its rows in, so two ranks of the same rows would otherwise swap from run to run."""
    near = (col - value).abs() <= TIE_TOLERANCE * col.abs().max() if is_float else col == value
    return pl.col("rank").filter(near).min().fill_null(pl.col("rank").min())


def by_class(frame: pl.DataFrame, keys: list[str], values: list[str]) -> pl.DataFrame:
    """One row per class of ``df`` (``keys``): how many rows and ranks, and per value its min, median and max,
    with the rank holding the min and the max (the slowest link, the rank that waited least)."""
    keys = [key for key in keys if key in frame.columns]
    aggs: list[pl.Expr] = [pl.len().alias("rows"), pl.col("rank").n_unique().alias("ranks")]
    for value in (value for value in values if value in frame.columns):
        col = pl.col(value)
        aggs += [
            col.min().alias(f"{value}_min"),
            col.median().alias(f"{value}_median"),
            col.max().alias(f"{value}_max"),
            _rank_at(col, col.min(), frame.schema[value].is_float()).alias(f"{value}_min_rank"),
            _rank_at(col, col.max(), frame.schema[value].is_float()).alias(f"{value}_max_rank"),
        ]
    return frame.group_by(keys, maintain_order=True).agg(aggs).sort(keys, nulls_last=True, maintain_order=True)
