"""communication.json's tables from torch_npu's DB export, in `ascend_comm`'s and `ascend_packets`' schemas:
``analysis.db``'s ``CommAnalyzerTime`` and ``CommAnalyzerBandwidth`` (communication.json's own numbers) when it
has them, else ``COMMUNICATION_OP`` with its elapsed and wait time only (transit, synchronisation and bandwidth
unknown). Rows are cited as ``/TABLE/ROWID`` pointers into the file they were read from.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.rulepack import limits
from profan.sources.ascend_db.sqlite import Db, connect, frame, quote, schema, strings
from profan.sources.ascend_db.steps import step_spans, with_steps
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.ascend_text import packets as ascend_packets


def comm_tables(db: Db, analysis: Path | None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, Path]:
    """(ops, bandwidth rows, packet sizes, the file they are cited in) in `ascend_comm`'s and
    `ascend_packets`' schemas: from analysis.db when it has them (communication.json's numbers), else from
    COMMUNICATION_OP (elapsed and wait time; transit, synchronisation and bandwidth unknown)."""
    if analysis is not None:
        try:
            got = _from_analysis_db(analysis)
        except (ProfanInputError, sqlite3.Error, pl.exceptions.PolarsError) as exc:
            why = exc.problem if isinstance(exc, ProfanInputError) else str(exc).splitlines()[0][:160]
            got = None
            db.notes.append(f"{analysis.name} not read ({why}): communication from COMMUNICATION_OP")
        if got is not None:
            ops, bw, packets, untyped = got
            if untyped:
                db.notes.append(
                    f"{analysis.name}: {untyped} CommAnalyzerBandwidth row(s) without a transport_type skipped "
                    "(their bytes cannot be held to a link)"
                )
            return *_measured(ops, bw, packets, f"{analysis.name}: CommAnalyzerTime", db.notes), analysis
        if not any(analysis.name in note for note in db.notes):
            db.notes.append(f"{analysis.name} has no CommAnalyzerTime table: communication from COMMUNICATION_OP")
    no_bw, no_packets = pl.DataFrame(schema=ascend_comm.BW_SCHEMA), pl.DataFrame(schema=ascend_packets.SCHEMA)
    return *_measured(_op_comm(db), no_bw, no_packets, "COMMUNICATION_OP", db.notes), db.path


def _measured(
    ops: pl.DataFrame, bw: pl.DataFrame, packets: pl.DataFrame, table: str, notes: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The ops whose numbers are measurements, with their bandwidth rows and packet sizes, as communication.json's
    reader keeps them (`ascend_comm.op_measured`, `ascend_comm.bandwidth_measured`): a NaN, infinite or negative
    time read as a number would flip the findings here as there (SQLite keeps ±Inf and a negative REAL, and
    COMMUNICATION_OP's elapse time is end − start). The skipped ops are said in a note naming the table."""
    keys = ["step", "kind", "op"]
    bad = pl.concat(
        [
            ops.filter(~ascend_comm.op_measured()).select(keys),
            bw.filter(~ascend_comm.bandwidth_measured()).select(keys),
        ]
    ).unique()
    if bad.is_empty():
        return ops, bw, packets

    def drop(rows: pl.DataFrame) -> pl.DataFrame:
        return rows.join(bad, on=keys, how="anti", nulls_equal=True, maintain_order="left")

    kept = drop(ops)
    notes.append(
        f"{table}: skipped {ops.height - kept.height} of {ops.height} communication ops holding NaN/Infinity, a "
        "negative number or a time past max_duration_us"
    )
    return kept, drop(bw), drop(packets)


def _from_analysis_db(analysis: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, int] | None:
    """communication.json's tables from analysis.db and how many bandwidth rows named no transport (skipped);
    None when it has no CommAnalyzerTime table."""
    adb = Db(analysis, connect(analysis), {})
    try:
        adb.tables = schema(adb.conn)
        cols = ("hccl_op_name", "group_name", "start_timestamp", "elapse_time", "step", "type")
        if not adb.has("CommAnalyzerTime", *cols):
            return None
        for table in ("CommAnalyzerTime", "CommAnalyzerBandwidth"):
            _refuse_long_text(adb, table)
        return _analysis_comm(adb)
    finally:
        adb.conn.close()


def _refuse_long_text(adb: Db, table: str) -> None:
    """analysis.db's text is read whole by polars: a table holding a value longer than ``max_string_bytes`` is
    refused (the caller notes it and reads COMMUNICATION_OP), counted in SQLite before any row is fetched."""
    if table not in adb.tables:
        return
    most = limits.active().max_string_bytes
    long = " OR ".join(f"length({quote(c)}) > {most}" for c in adb.tables[table])
    count = adb.conn.execute(f"SELECT count(*) FROM {quote(table)} WHERE {long}").fetchone()[0]
    if count:
        raise ProfanInputError(
            adb.path, f"{table} has {count} row(s) with a text value longer than max_string_bytes ({most:,} bytes)"
        )


def _op_comm(db: Db) -> pl.DataFrame:
    """communication.json's op rows from COMMUNICATION_OP: one per op, its step by STEP_TIME, cited as
    ``/COMMUNICATION_OP/<opId>``. Every op is filed as ``collective``: the DB has no p2p section, and which op
    names are point-to-point is rule-pack knowledge (roles ``p2p_ops``) that the collectives apply themselves."""
    if not db.has("COMMUNICATION_OP", "opName", "startNs", "endNs", "opId"):
        return pl.DataFrame(schema=ascend_comm.OP_SCHEMA)
    sql = (
        "SELECT o.opId, o.startNs, o.endNs, o.opName, "
        + db.col("COMMUNICATION_OP", "groupName", "group_id", "o.")
        + ", "
        + db.col("COMMUNICATION_OP", "waitNs", "wait_ns", "o.")
        + " FROM COMMUNICATION_OP o ORDER BY o.startNs"
    )
    sch = {"op_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "name_id": pl.Int64, "group_id": pl.Int64}
    rows = frame(db.conn, sql, {**sch, "wait_ns": pl.Float64})
    names = strings(db, pl.concat([rows["name_id"], rows["group_id"]]))
    rows = with_steps(rows.lazy(), step_spans(db)).collect()
    name = pl.col("name_id").replace_strict(names, default=None, return_dtype=pl.Utf8)
    group = pl.col("group_id").replace_strict(names, default=None, return_dtype=pl.Utf8)
    return rows.sort("start_ns").select(
        "step",
        pl.lit("collective").alias("kind"),
        pl.concat_str(name, pl.lit("@"), group.fill_null("")).alias("op"),
        name.alias("op_name"),
        group.alias("group_hash"),
        (pl.col("start_ns") / 1000).alias("start_us"),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("elapse_ms"),
        pl.lit(None, pl.Float64).alias("transit_ms"),
        (pl.col("wait_ns") / 1e6).alias("wait_ms"),
        pl.lit(None, pl.Float64).alias("sync_ms"),
        pl.lit(None, pl.Float64).alias("idle_ms"),
        pl.format("/COMMUNICATION_OP/{}", pl.col("op_id")).alias("pointer"),
    )


def _step_number(col: str) -> pl.Expr:
    """``step50`` -> 50, as communication.json's step keys (`ascend_comm.step_of`); ``step`` alone -> null."""
    return pl.col(col).cast(pl.Utf8).str.extract(r"^step(\d{1,18})$", 1).cast(pl.Int64)


def _analysis_comm(adb: Db) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, int]:
    """communication.json's three tables from analysis.db's CommAnalyzerTime and CommAnalyzerBandwidth (one
    bandwidth row per op, transport and packet size there: the totals repeat on each, the packets do not)."""
    t = pl.read_database(
        "SELECT rowid AS rid, step, type, hccl_op_name, group_name, start_timestamp, elapse_time, "
        + ", ".join(adb.col("CommAnalyzerTime", c, c) for c in ("transit_time", "wait_time", "synchronization_time"))
        + ", "
        + adb.col("CommAnalyzerTime", "idle_time", "idle_time")
        + " FROM CommAnalyzerTime ORDER BY start_timestamp",
        adb.conn,
        infer_schema_length=None,
    )
    op = pl.concat_str(pl.col("hccl_op_name").cast(pl.Utf8), pl.lit("@"), pl.col("group_name").cast(pl.Utf8))
    ops = t.select(
        _step_number("step").alias("step"),
        pl.col("type").cast(pl.Utf8).alias("kind"),
        op.alias("op"),
        pl.col("hccl_op_name").cast(pl.Utf8).alias("op_name"),
        pl.col("group_name").cast(pl.Utf8).alias("group_hash"),
        *[
            pl.col(src).cast(pl.Float64, strict=False).alias(dst)
            for src, dst in (
                ("start_timestamp", "start_us"),
                ("elapse_time", "elapse_ms"),
                ("transit_time", "transit_ms"),
                ("wait_time", "wait_ms"),
                ("synchronization_time", "sync_ms"),
                ("idle_time", "idle_ms"),
            )
        ],
        pl.format("/CommAnalyzerTime/{}", pl.col("rid")).alias("pointer"),
    )
    bw_cols = ("transport_type", "transit_size", "transit_time", "bandwidth", "large_packet_ratio")
    if not adb.has("CommAnalyzerBandwidth", "hccl_op_name", "group_name", "step", "type", *bw_cols):
        return ops, pl.DataFrame(schema=ascend_comm.BW_SCHEMA), pl.DataFrame(schema=ascend_packets.SCHEMA), 0
    b = pl.read_database(
        "SELECT rowid AS rid, * FROM CommAnalyzerBandwidth ORDER BY rowid", adb.conn, infer_schema_length=None
    )
    typed = b.filter(pl.col("transport_type").is_not_null())
    return ops, *_bandwidth(typed, op), b.height - typed.height


def _bandwidth(b: pl.DataFrame, expr: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(bandwidth rows: one per op and transport, citing its first row; packet sizes: one per row that has a
    packet size and count)."""
    f = pl.Float64
    b = b.with_columns(_step_number("step").alias("step"), pl.col("type").cast(pl.Utf8).alias("kind"), expr.alias("op"))
    bw = (
        b.group_by("step", "kind", "op", pl.col("transport_type").cast(pl.Utf8).alias("transport"), maintain_order=True)
        .agg(
            pl.col("transit_size").first().cast(f, strict=False).alias("size_mb"),
            pl.col("transit_time").first().cast(f, strict=False).alias("time_ms"),
            pl.col("bandwidth").first().cast(f, strict=False).alias("bandwidth_gbps"),
            pl.col("large_packet_ratio").first().cast(f, strict=False).alias("large_packet_ratio"),
            pl.format("/CommAnalyzerBandwidth/{}", pl.col("rid").min()).alias("pointer"),
        )
        .select(list(ascend_comm.BW_SCHEMA))
    )
    if not {"package_size", "count", "total_duration"} <= set(b.columns):
        return bw, pl.DataFrame(schema=ascend_packets.SCHEMA)
    ptr = pl.format("/CommAnalyzerBandwidth/{}", pl.col("rid"))
    packets = b.filter(pl.col("count").cast(pl.Int64, strict=False) > 0).select(
        "step",
        "kind",
        "op",
        pl.col("transport_type").cast(pl.Utf8).alias("transport"),
        pl.col("package_size").cast(f, strict=False).alias("packet_mb"),
        pl.col("count").cast(pl.Int64, strict=False).alias("count"),
        pl.col("total_duration").cast(f, strict=False).alias("time_ms"),
        ptr.alias("pointer"),
        ptr.alias("transport_pointer"),
    )
    return bw, packets
