"""Reader for torch_npu's DB export: ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db`` (SQLite, written
with ``export_type=db``) and the ``analysis.db`` beside it.

It yields the tables the text readers yield — the kernel groups of `profan.ranks.kernel_pass`, the step split of
``step_trace_time.csv``, the ops, bandwidth rows and packet sizes of ``communication.json`` — so every analysis
runs unchanged and a report from a DB export reads like one from text. The DB holds the same facts as rows:

* kernel rows: ``TASK`` (startNs/endNs) joined to ``COMPUTE_TASK_INFO`` (name, op type, core, shapes, all ids into
  ``STRING_IDS``), pipe ratios from ``TASK_PMU_INFO``, and one row per ``COMMUNICATION_OP`` on the communication
  core, as kernel_details.csv writes them;
* steps: ``STEP_TIME`` spans; Computing / Communication(Not Overlapped) / Free are the interval unions of the
  compute tasks and the communication ops in each step, as the profiler's own overlap analysis computes them
  (``OVERLAP_ANALYSIS`` is not in every level's DB);
* communication: ``analysis.db`` (``CommAnalyzerTime``, ``CommAnalyzerBandwidth``: communication.json's numbers),
  else ``COMMUNICATION_OP`` with its elapsed and wait time only.

Tables and columns are read by name: extra columns and unknown schema versions are fine; a missing optional table
is said once, a missing required one is the file's one-line error. Rows reach polars as integer ids (names are
joined from ``STRING_IDS`` after grouping, on the distinct ids only): bench/README.md has the measurements.

Evidence cites rows as ``/TABLE/ROWID`` pointers into the DB file (`profan.sources.ascend_db_rows` reads them
back); the rank's logical files are ``<db>#TASK`` and ``<db>#STEP_TIME`` (see `profan.model.evidence`).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from profan.model.errors import ProfanInputError
from profan.rulepack import limits
from profan.sources import ascend_comm, ascend_kernels, ascend_packets, ascend_steps

SQLITE_MAGIC = b"SQLite format 3\x00"
FETCH_ROWS = 1 << 18  # rows fetched per batch: memory holds one batch of Python tuples, never the table
KERNEL_TABLES = ("TASK", "COMPUTE_TASK_INFO", "STRING_IDS")
# canonical kernel column -> COMPUTE_TASK_INFO column (ids into STRING_IDS): only what the kernel pass groups by
COMPUTE_COLUMNS = {"name_id": "name", "type_id": "opType", "core_id": "taskType", "shape_id": "inputShapes"}
ID_KEYS = ("name_id", "type_id", "core_id", "shape_id")


def is_sqlite(path: Path) -> bool:
    """Whether a file starts with SQLite's magic header (a report may cite any file; only a DB is read by SQL)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection that never writes beside the file (``immutable``: no lock, journal or WAL files
    in the user's folder, which may be read-only). A file that is no SQLite database is one line naming it."""
    if not is_sqlite(path):
        raise ProfanInputError(path, "is not an SQLite database (no SQLite header); refused")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as an SQLite database ({exc})") from None
    return conn


def schema(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Table name -> column names, as the DB declares them (extra columns are kept, never required)."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({quote(t)})")] for t in tables}


def quote(name: str) -> str:
    """An SQL identifier, quoted (table names come from the DB or from a report: never pasted raw)."""
    return '"' + name.replace('"', '""') + '"'


def frame(conn: sqlite3.Connection, sql: str, schema_: dict[str, pl.DataType], params: tuple = ()) -> pl.DataFrame:
    """A query's rows as a DataFrame of ``schema_`` (column order = the query's), fetched in batches of
    `FETCH_ROWS` so the Python tuples alive at once stay bounded."""
    cur = conn.execute(sql, params)
    parts = []
    while rows := cur.fetchmany(FETCH_ROWS):
        parts.append(pl.DataFrame(rows, schema=schema_, orient="row"))
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema_)


def _adbc():  # -> the ADBC SQLite DB-API module, or None
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:
        return None
    return adbc


def big_frame(db: Db, sql: str, schema_: dict[str, pl.DataType]) -> pl.DataFrame:
    """A query of millions of rows as a DataFrame of ``schema_``: through the ADBC SQLite driver when it is
    installed (the rows reach polars as Arrow columns, never as Python tuples: half the CPU time of the stdlib
    cursor on the 1 GB DB of bench/bench_db.py), else through `frame`. The same rows and types either way
    (tests/test_ascend_db.py compares them)."""
    adbc = _adbc() if not NO_ADBC else None
    if adbc is None:
        return frame(db.conn, sql, schema_)
    try:
        with adbc.connect(f"{db.path.resolve().as_uri()}?mode=ro&immutable=1") as conn, conn.cursor() as cur:
            cur.execute(sql)
            table = cur.fetch_arrow_table()
    except adbc.Error as exc:
        raise ProfanInputError(db.path, f"cannot be read as an SQLite database ({exc})") from None
    got = pl.from_arrow(table)
    assert isinstance(got, pl.DataFrame)
    return got.rename(dict(zip(got.columns, schema_, strict=True))).cast(schema_)


NO_ADBC = False  # tests set it to read through the stdlib cursor


@dataclass
class Db:
    """One DB export file, opened: its path, connection, schema and what was skipped (said as warnings)."""

    path: Path
    conn: sqlite3.Connection
    tables: dict[str, list[str]]
    version: str = ""
    notes: list[str] = field(default_factory=list)

    def has(self, table: str, *cols: str) -> bool:
        return table in self.tables and all(c in self.tables[table] for c in cols)

    def col(self, table: str, column: str, alias: str, prefix: str = "") -> str:
        """``prefix.column AS alias``, or NULL when the column is not in this version of the table."""
        return f"{prefix}{quote(column)} AS {alias}" if self.has(table, column) else f"NULL AS {alias}"


def open_db(path: Path) -> Db:
    """The DB with the tables the kernel rows need checked (names in the error); the schema version noted."""
    conn = connect(path)
    try:
        tables = schema(conn)
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as an SQLite database ({exc})") from None
    db = Db(path, conn, tables)
    missing = [t for t in KERNEL_TABLES if t not in tables]
    if missing:
        raise ProfanInputError(
            path,
            f"has no {', '.join(missing)} table (is it torch_npu's ascend_pytorch_profiler_*.db?); "
            f"it holds {', '.join(sorted(tables)[:8]) or 'no table'}",
        )
    for table, cols in (("TASK", ("startNs", "endNs", "globalTaskId")), ("COMPUTE_TASK_INFO", ("globalTaskId",))):
        lacking = [c for c in cols if not db.has(table, c)]
        if lacking:
            raise ProfanInputError(path, f"table {table} has no column {', '.join(lacking)}")
    if db.has("META_DATA", "name", "value"):
        got = conn.execute("SELECT value FROM META_DATA WHERE name = 'SCHEMA_VERSION'").fetchone()
        db.version = str(got[0]) if got else ""
    return db


KERNEL_SCHEMA = {
    "src_line": pl.Int64,
    "task_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    **{k: pl.Int64 for k in ID_KEYS},
}


def compute_rows(db: Db) -> pl.DataFrame:
    """One row per compute task: TASK joined to COMPUTE_TASK_INFO in SQLite (the join uses its primary key),
    ids for every text column. ``src_line`` is the TASK rowid the evidence cites."""
    c = [db.col("COMPUTE_TASK_INFO", src, key, "c.") for key, src in COMPUTE_COLUMNS.items()]
    sql = (
        "SELECT t.rowid, t.globalTaskId, t.startNs, t.endNs, "
        + ", ".join(c)
        + " FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
    )
    return big_frame(db, sql, KERNEL_SCHEMA)


def comm_op_rows(db: Db) -> tuple[pl.DataFrame, int]:
    """One kernel row per COMMUNICATION_OP, as kernel_details.csv writes one per HCCL op (name, type); its
    ``src_line`` is the TASK rowid of the op's first device task (`first_tasks`), the TASK row evidence reads back
    with the op's name and span. (rows, ops with no device task: not cited, so skipped and counted)."""
    if not db.has("COMMUNICATION_OP", "opName", "startNs", "endNs", "opId"):
        return pl.DataFrame(schema=KERNEL_SCHEMA), 0
    sql = (
        "SELECT o.opId, NULL, o.startNs, o.endNs, o.opName, "
        + db.col("COMMUNICATION_OP", "opType", "type_id", "o.")
        + ", NULL, NULL FROM COMMUNICATION_OP o"
    )
    rows = frame(db.conn, sql, KERNEL_SCHEMA)
    first = first_tasks(db)
    rows = rows.with_columns(pl.col("src_line").replace_strict(first, default=None, return_dtype=pl.Int64))
    uncited = rows.filter(pl.col("src_line").is_null()).height
    return rows.filter(pl.col("src_line").is_not_null()), uncited


def first_tasks(db: Db) -> dict[int, int]:
    """opId -> the TASK rowid of the op's first device task (its lowest globalTaskId in COMMUNICATION_TASK_INFO).
    Two scans, never a lookup per task: TASK has no index on globalTaskId, and a join per row costs as much as
    the compute tasks' join."""
    if not (db.has("COMMUNICATION_TASK_INFO", "globalTaskId", "opId") and db.has("TASK", "globalTaskId")):
        return {}
    firsts = dict(db.conn.execute("SELECT opId, min(globalTaskId) FROM COMMUNICATION_TASK_INFO GROUP BY opId"))
    if not firsts:
        return {}
    want = json.dumps(sorted({int(t) for t in firsts.values() if isinstance(t, int)}))
    rowid = dict(
        db.conn.execute(
            "SELECT globalTaskId, min(rowid) FROM TASK WHERE globalTaskId IN (SELECT value FROM json_each(?)) "
            "GROUP BY globalTaskId",
            (want,),
        )
    )
    return {int(op): rowid[t] for op, t in firsts.items() if isinstance(op, int) and t in rowid}


def pmu_ratios(db: Db) -> pl.DataFrame | None:
    """Per task, each pipe's ratio (the larger of its aic_/aiv_ form, as the text reader takes it) from
    TASK_PMU_INFO, rows of the ratio metrics only (their ids looked up first, so SQLite filters by integer)."""
    if not db.has("TASK_PMU_INFO", "globalTaskId", "name", "value"):
        return None
    names = {f"{pre}{p}_ratio": p for p in ascend_kernels.PIPES for pre in ("", "aic_", "aiv_")}
    marks = ",".join("?" * len(names))
    ids = dict(db.conn.execute(f"SELECT id, value FROM STRING_IDS WHERE value IN ({marks})", tuple(names)))
    if not ids:
        return None
    sql = f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({','.join('?' * len(ids))})"
    rows = frame(db.conn, sql, {"task_id": pl.Int64, "metric": pl.Int64, "value": pl.Float64}, tuple(ids))
    if rows.is_empty():
        return None
    pipe = {i: names[v] for i, v in ids.items()}
    rows = rows.with_columns(pl.col("metric").replace_strict(pipe, return_dtype=pl.Utf8).alias("pipe"))
    # Float32: a ratio of 0..1 needs no more, and millions of kernel rows carry seven of them
    got = rows.pivot("pipe", index="task_id", values="value", aggregate_function="max")
    return got.with_columns(pl.exclude("task_id").cast(pl.Float32))


def strings(db: Db, ids: pl.Series) -> dict[int, str]:
    """STRING_IDS values of the given ids (the distinct ids of the groups: never the whole table)."""
    want = [int(i) for i in ids.drop_nulls().unique().to_list()]
    out: dict[int, str] = {}
    for k in range(0, len(want), 30_000):  # below SQLite's bound on bound parameters
        part = want[k : k + 30_000]
        sql = f"SELECT id, value FROM STRING_IDS WHERE id IN ({','.join('?' * len(part))})"
        out.update((int(i), "" if v is None else str(v)) for i, v in db.conn.execute(sql, part))
    return out


def step_spans(db: Db) -> pl.DataFrame:
    """STEP_TIME rows: rowid (the locator), step id, start and end in ns; empty without the table."""
    sch = {"src_line": pl.Int64, "step": pl.Int64, "s0": pl.Int64, "s1": pl.Int64}
    if not db.has("STEP_TIME", "id", "startNs", "endNs"):
        return pl.DataFrame(schema=sch)
    return frame(db.conn, "SELECT rowid, id, startNs, endNs FROM STEP_TIME ORDER BY startNs", sch)


def with_steps(rows: pl.LazyFrame, spans: pl.DataFrame, keep_index: bool = False) -> pl.LazyFrame:
    """``step``: the STEP_TIME span a row starts in (null outside every span, as kernel_details.csv leaves it);
    ``_i`` (with ``keep_index``): that span's index in time order. A binary search of each start in the sorted
    span starts and a gather of the span's id and end: the rows are never sorted nor joined (either copies every
    column of millions of rows)."""
    if spans.is_empty():
        got = rows.with_columns(pl.lit(None, pl.Int64).alias("step"), pl.lit(None, pl.Int64).alias("_i"))
        return got if keep_index else got.drop("_i")
    sp = spans.sort("s0")
    at = pl.lit(sp["s0"]).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64) - 1
    got = rows.with_columns(at.alias("_i")).with_columns(
        pl.when((pl.col("_i") >= 0) & (pl.col("start_ns") <= pl.lit(sp["s1"]).gather(pl.col("_i").clip(0))))
        .then(pl.col("_i"))
        .alias("_i")
    )
    got = got.with_columns(pl.lit(sp["step"]).gather(pl.col("_i").fill_null(0)).alias("step")).with_columns(
        pl.when(pl.col("_i").is_not_null()).then(pl.col("step")).alias("step")
    )
    return got if keep_index else got.drop("_i")


def bad_expr() -> pl.Expr:
    """A row that cannot be sized: no start or end, an end before its start, or longer than max_duration_us —
    the same rule as a kernel_details.csv row's duration."""
    dur = pl.col("dur_us")
    return (dur.is_null() | (dur < 0) | (dur > limits.active().max_duration_us)).fill_null(True).alias("bad")


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
            return (*got, analysis)
        if not any(analysis.name in n for n in db.notes):
            db.notes.append(f"{analysis.name} has no CommAnalyzerTime table: communication from COMMUNICATION_OP")
    ops = _op_comm(db)
    return ops, pl.DataFrame(schema=ascend_comm.BW_SCHEMA), pl.DataFrame(schema=ascend_packets.SCHEMA), db.path


def _from_analysis_db(analysis: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """communication.json's tables from analysis.db; None when it has no CommAnalyzerTime table."""
    adb = Db(analysis, connect(analysis), {})
    try:
        adb.tables = schema(adb.conn)
        cols = ("hccl_op_name", "group_name", "start_timestamp", "elapse_time", "step", "type")
        return _analysis_comm(adb) if adb.has("CommAnalyzerTime", *cols) else None
    finally:
        adb.conn.close()


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


def _analysis_comm(adb: Db) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
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
        return ops, pl.DataFrame(schema=ascend_comm.BW_SCHEMA), pl.DataFrame(schema=ascend_packets.SCHEMA)
    b = pl.read_database(
        "SELECT rowid AS rid, * FROM CommAnalyzerBandwidth ORDER BY rowid", adb.conn, infer_schema_length=None
    )
    return ops, *_bandwidth(b, op)


def _bandwidth(b: pl.DataFrame, op: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(bandwidth rows: one per op and transport, citing its first row; packet sizes: one per row that has a
    packet size and count)."""
    f = pl.Float64
    b = b.with_columns(_step_number("step").alias("step"), pl.col("type").cast(pl.Utf8).alias("kind"), op.alias("op"))
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


def steps_table(spans: pl.DataFrame, compute: pl.DataFrame, comm: pl.DataFrame, device: int | None) -> pl.DataFrame:
    """step_trace_time.csv's rows from the DB: per STEP_TIME span, the interval unions of the compute tasks and
    of the communication ops that start in it. Computing = |compute|, Communication = |comm|, Not Overlapped =
    |compute ∪ comm| − |compute|, Stage = the span from the step's first device task to its last, Free = Stage −
    |compute ∪ comm|, Preparing = the first task's start − the step's start (the profiler's own definitions;
    tests/test_ascend_db.py checks them against OVERLAP_ANALYSIS and analysis.db). ``compute``/``comm``: columns
    ``s``, ``e`` (ns)."""
    if spans.is_empty():
        return pl.DataFrame(schema={**ascend_steps.SCHEMA, "step_us": pl.Float64})

    # each step's intervals shifted past the previous step's (by its index in time order): one running maximum
    # over all rows then never reaches across a step, so no per-step window is needed (it held several copies
    # of every column at once)
    base = int(spans["s0"].min())
    off = max(int(spans["s1"].max()) - base, int(pl.concat([compute["e"], comm["e"]]).max() or base) - base) + 1

    def in_steps(iv: pl.DataFrame) -> pl.LazyFrame:
        lf = with_steps(iv.lazy().rename({"s": "start_ns"}), spans, keep_index=True).rename({"start_ns": "s"})
        shift = pl.col("_i") * off - base
        lf = lf.filter(pl.col("step").is_not_null()).select("step", "_i", pl.col("s") + shift, pl.col("e") + shift)
        return lf.select("step", "_i", "s", pl.max_horizontal("s", "e").alias("e"))

    cp, cm = in_steps(compute).collect(), in_steps(comm).collect()
    both = pl.concat([cp, cm])
    ends = both.group_by("step").agg(
        (pl.col("s").min() - pl.col("_i").first() * off + base).alias("first"),
        (pl.col("e").max() - pl.col("_i").first() * off + base).alias("last"),
    )
    lanes = (
        _covered(both.lazy(), "busy")
        .join(_covered(cp.lazy(), "computing"), on="step", how="left")
        .join(_covered(cm.lazy(), "communication"), on="step", how="left")
        .join(ends.lazy(), on="step", how="left")
        .collect()
    )
    got = spans.join(lanes, on="step", how="left").sort("s0")
    zero = {c: pl.col(c).fill_null(0.0) for c in ("busy", "computing", "communication")}
    stage = ((pl.col("last") - pl.col("first")) / 1000).fill_null(0.0)
    return got.select(
        pl.col("src_line"),
        "step",
        pl.lit(device, pl.Int64).alias("device_id"),
        zero["computing"].alias("computing_us"),
        (zero["busy"] - zero["computing"]).alias("comm_not_overlapped_us"),
        (zero["communication"] - (zero["busy"] - zero["computing"])).alias("overlapped_us"),
        zero["communication"].alias("communication_us"),
        (stage - zero["busy"]).alias("free_us"),
        stage.alias("stage_us"),
        pl.lit(0.0, pl.Float64).alias("bubble_us"),
        pl.lit(None, pl.Float64).alias("comm_not_overlapped_excl_recv_us"),
        ((pl.col("first") - pl.col("s0")) / 1000).alias("preparing_us"),
    ).with_columns((pl.col("stage_us") + pl.col("bubble_us")).alias("step_us"))


def _covered(iv: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """Per step, the µs the union of intervals ``s``..``e`` (ns) covers: in start order, each interval adds what
    it takes the running end past both its start and the end before it (steps are apart: see `steps_table`).
    One sort and a sum, where building the union's intervals would group millions of rows."""
    end = pl.col("e").cum_max()
    gain = (end - pl.max_horizontal("s", end.shift(1))).clip(lower_bound=0)
    return iv.sort("s").with_columns(gain.alias("_g")).group_by("step").agg((pl.col("_g").sum() / 1000).alias(name))


@dataclass
class DbRank:
    """What one rank's DB export yields: the kernel rows (integer keys) with their key expressions and pipes, the
    step, communication and packet tables, the files they are cited in, and the counts and notes to say."""

    kernel_rows: pl.DataFrame
    keyed: tuple[list[str], list[pl.Expr]]
    pipes: list[str]
    steps: pl.DataFrame
    comm_ops: pl.DataFrame
    comm_bw: pl.DataFrame
    comm_packets: pl.DataFrame
    comm_file: Path
    variant: str
    uncited_ops: int = 0
    device_id: int | None = None
    notes: list[str] = field(default_factory=list)


def read(path: Path, analysis: Path | None, comm_core: str) -> DbRank:
    """One rank's DB export, read. ``comm_core``: the core kernel_details.csv files communication ops under (the
    rule pack's first ``comm_cores``), given to the COMMUNICATION_OP rows."""
    db = open_db(path)
    try:
        return _read(db, analysis, comm_core)
    except sqlite3.Error as exc:
        raise ProfanInputError(path, f"cannot be read as torch_npu's DB export ({exc})") from None
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        # SQLite keeps any value in any column: text or a real where the export writes integers
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ProfanInputError(path, f"holds a value of another type than the export writes ({first})") from None
    finally:
        db.conn.close()


def _read(db: Db, analysis: Path | None, comm_core: str) -> DbRank:
    spans = step_spans(db)
    compute = compute_rows(db)
    ops, uncited = comm_op_rows(db)
    # the step split first: it needs the compute tasks' spans alone, and `compute` is dropped once it is read
    comm_iv = _all_op_spans(db) if uncited else ops.select(pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
    compute_iv = compute.select(pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
    device = _device(db)
    steps = steps_table(spans, compute_iv.filter(pl.col("e") >= pl.col("s")), comm_iv, device)
    del compute_iv
    rows, pipes = _kernel_table(db, spans, compute, ops)
    del compute
    names = strings(db, pl.concat([rows[k] for k in ID_KEYS]))
    text = {k: pl.col(k).replace_strict(names, default=None, return_dtype=pl.Utf8) for k in ID_KEYS}
    keys = [
        pl.col("step"),
        text["name_id"].alias("name"),
        text["type_id"].fill_null("N/A").alias("type"),
        pl.when(pl.col("comm")).then(pl.lit(comm_core)).otherwise(text["core_id"].fill_null("N/A")).alias("core"),
        text["shape_id"].str.strip_chars(' \t\r"').alias("input_shapes"),
    ]
    c_ops, c_bw, c_packets, c_file = comm_tables(db, analysis)
    if spans.is_empty():
        db.notes.append("has no STEP_TIME rows: kernels are outside any step and there is no step split")
    return DbRank(
        rows,
        (["step", *ID_KEYS, "comm"], keys),
        pipes,
        steps,
        c_ops,
        c_bw,
        c_packets,
        c_file,
        f"torch_npu DB export, schema {db.version or 'unknown'}, {'pipe ratios' if pipes else 'no pipe ratios'}",
        uncited,
        device,
        db.notes,
    )


def _kernel_table(
    db: Db, spans: pl.DataFrame, compute: pl.DataFrame, ops: pl.DataFrame
) -> tuple[pl.DataFrame, list[str]]:
    """The kernel rows the kernel pass reduces: compute tasks and communication ops with their step, start and
    duration in µs, ``bad`` and the pipe ratios (TASK_PMU_INFO), as one lazy query (only the columns the pass
    reads are made)."""
    pmu = pmu_ratios(db)
    rows = pl.concat(
        [compute.lazy().with_columns(pl.lit(False).alias("comm")), ops.lazy().with_columns(pl.lit(True).alias("comm"))]
    )
    pipes = [p for p in ascend_kernels.PIPES if pmu is not None and p in pmu.columns]
    if pipes:
        rows = rows.join(pmu.lazy().select("task_id", *pipes), on="task_id", how="left")  # row order is no key
    rows = (
        with_steps(rows, spans)
        .with_columns(
            (pl.col("start_ns") / 1000).alias("start_us"),
            ((pl.col("end_ns") - pl.col("start_ns")) / 1000).alias("dur_us"),
        )
        .with_columns(bad_expr())
        .drop("task_id", "start_ns", "end_ns")
        .collect()
    )
    small = {k: pl.Int32 for k in ID_KEYS if (rows[k].max() or 0) < 2**31 and (rows[k].min() or 0) >= -(2**31)}
    return rows.cast(small), pipes  # ids of STRING_IDS fit in 32 bits in practice: half the memory


def _all_op_spans(db: Db) -> pl.DataFrame:
    return frame(db.conn, "SELECT startNs, endNs FROM COMMUNICATION_OP", {"s": pl.Int64, "e": pl.Int64})


def _device(db: Db) -> int | None:
    """The rank's device id (RANK_DEVICE_MAP), as step_trace_time.csv's Device_id column holds it."""
    if not db.has("RANK_DEVICE_MAP", "deviceId"):
        return None
    got = db.conn.execute("SELECT deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
    return int(got[0]) if got and isinstance(got[0], int) else None
