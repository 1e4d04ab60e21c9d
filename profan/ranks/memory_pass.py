"""The per-rank memory reduction: a rank's memory rows (millions on a long capture) in, three small tables out.

Why here, in the map: the allocated/reserved curve, the peak and what is live at the peak need every row of the
rank, but the analyses and the report need only a bounded curve (min/max per time bucket, so every peak and dip of
the shape survives, the rank's peaks exactly) and the few largest holders. Only these travel between processes.

Input, whatever the format (`profan.sources.ascend_text.memory`, `profan.sources.trace.kineto_memory`):

* ``points``: ts_us, allocated_mb, reserved_mb (null: not recorded), loc (CSV line or event index);
* ``allocs``: name (the op that allocated), size_mb, alloc_us, release_us (null: not freed in the capture), loc.

Output (`reduce`), the keys of ``RankData.memory``:

* ``curve``: ts_us, allocated_mb, reserved_mb, loc, op, event (alloc / free: what happened at that time, where
  the allocation rows tell) — at most about ``curve_points`` rows;
* ``peak``: one row — peak_allocated_mb, peak_us, peak_loc, reserved_at_peak_mb, peak_reserved_mb,
  peak_reserved_us, peak_reserved_loc, start_us, end_us, points, peak_op, peak_op_loc, live_mb, live_count,
  allocs (plus the format's own columns: device, files, step, phase, capacity …);
* ``holders``: the ops whose allocations are live at the peak, largest first — name, live_mb, count,
  largest_mb, locs (their allocation rows, largest first).
"""

from __future__ import annotations

import hashlib
import json

import polars as pl

from profan.model.evidence import MAX_CITED

POINTS_SCHEMA = {"ts_us": pl.Float64, "allocated_mb": pl.Float64, "reserved_mb": pl.Float64, "loc": pl.Int64}
ALLOCS_SCHEMA = {
    "name": pl.Utf8,
    "size_mb": pl.Float64,
    "alloc_us": pl.Float64,
    "release_us": pl.Float64,
    "loc": pl.Int64,
}


def downsample(points: pl.DataFrame, most: int) -> pl.DataFrame:
    """At most about ``most`` points of the curve: per time bucket the rows of least and most allocated and of
    most reserved, so the shape's peaks and dips stay, and the rank's peaks (a bucket's maximum) exactly."""
    if points.height <= most:
        return points
    buckets = max(1, most // 3)
    t0, t1 = points["ts_us"].min(), points["ts_us"].max()
    width = (t1 - t0) / buckets or 1.0
    idx = points.with_row_index("_i").with_columns(
        ((pl.col("ts_us") - t0) / width).floor().clip(0, buckets - 1).cast(pl.Int64).alias("_b")
    )
    keep = idx.group_by("_b").agg(
        pl.col("_i").get(pl.col("allocated_mb").arg_max()).alias("hi"),
        pl.col("_i").get(pl.col("allocated_mb").arg_min()).alias("lo"),
        pl.col("_i").get(pl.col("reserved_mb").fill_null(-1.0).arg_max()).alias("res"),
    )
    rows = pl.concat([keep["hi"], keep["lo"], keep["res"]]).drop_nulls().unique()
    return idx.filter(pl.col("_i").is_in(rows.implode())).drop("_i", "_b")


def curve_ops(curve: pl.DataFrame, allocs: pl.DataFrame) -> pl.DataFrame:
    """Each curve point with the op whose allocation (``event`` "alloc") or free ("free") happened at its time,
    where the allocation rows record one: what a chart names on hover."""
    made = allocs.select(pl.col("alloc_us").alias("ts_us"), pl.col("name").alias("_made")).unique("ts_us", keep="first")
    freed = (
        allocs.filter(pl.col("release_us").is_not_null())
        .select(pl.col("release_us").alias("ts_us"), pl.col("name").alias("_freed"))
        .unique("ts_us", keep="first")
    )
    joined = curve.join(made, on="ts_us", how="left").join(freed, on="ts_us", how="left")
    return joined.select(
        *curve.columns,
        pl.coalesce("_made", "_freed").alias("op"),
        pl.when(pl.col("_made").is_not_null())
        .then(pl.lit("alloc"))
        .when(pl.col("_freed").is_not_null())
        .then(pl.lit("free"))
        .alias("event"),
    )


def live_at(allocs: pl.DataFrame, t: float) -> pl.DataFrame:
    """Allocations made at or before ``t`` and not freed by then: what holds memory at that moment."""
    return allocs.filter((pl.col("alloc_us") <= t) & (pl.col("release_us").is_null() | (pl.col("release_us") > t)))


HOLDERS_SCHEMA = {
    "name": pl.Utf8,
    "live_mb": pl.Float64,
    "count": pl.Int64,
    "largest_mb": pl.Float64,
    "locs": pl.List(pl.Int64),
}


def holders(live: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` ops by live size, each with its allocation rows (largest first, ties: the earlier row)."""
    return (
        live.sort(["size_mb", "loc"], descending=[True, False])
        .group_by("name", maintain_order=True)
        .agg(
            pl.col("size_mb").sum().alias("live_mb"),
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("size_mb").first().alias("largest_mb"),
            pl.col("loc").head(MAX_CITED).alias("locs"),
        )
        .sort(["live_mb", "name"], descending=[True, False])
        .head(top)
    )


def reduce(points: pl.DataFrame, allocs: pl.DataFrame, most: int, top: int) -> dict[str, pl.DataFrame] | None:
    """The curve, the peak row and the holders of one rank; None when no point has an allocated value."""
    pts = points.filter(pl.col("allocated_mb").is_not_null()).sort("ts_us", "loc")
    if pts.is_empty():
        return None
    peak = pts.row(int(pts["allocated_mb"].arg_max()), named=True)
    res = pts.filter(pl.col("reserved_mb").is_not_null())
    rpeak = res.row(int(res["reserved_mb"].arg_max()), named=True) if not res.is_empty() else {}
    live = live_at(allocs, peak["ts_us"])
    before = allocs.filter(pl.col("alloc_us") <= peak["ts_us"]).sort(["alloc_us", "size_mb"], descending=True)
    op = before.row(0, named=True) if not before.is_empty() else {}
    row = {
        "peak_allocated_mb": peak["allocated_mb"],
        "peak_us": peak["ts_us"],
        "peak_loc": peak["loc"],
        "reserved_at_peak_mb": peak["reserved_mb"],
        "peak_reserved_mb": rpeak.get("reserved_mb"),
        "peak_reserved_us": rpeak.get("ts_us"),
        "peak_reserved_loc": rpeak.get("loc"),
        "start_us": pts["ts_us"].min(),
        "end_us": pts["ts_us"].max(),
        "points": pts.height,
        "peak_op": op.get("name"),
        "peak_op_loc": op.get("loc"),
        "live_mb": float(live["size_mb"].sum()),
        "live_count": live.height,
        "allocs": allocs.height,
    }
    return {
        "curve": curve_ops(downsample(pts, most).select(list(POINTS_SCHEMA)), allocs),
        "peak": pl.DataFrame([row], schema=PEAK_SCHEMA),
        "holders": holders(live, top),
    }


PEAK_SCHEMA = {
    "peak_allocated_mb": pl.Float64,
    "peak_us": pl.Float64,
    "peak_loc": pl.Int64,
    "reserved_at_peak_mb": pl.Float64,
    "peak_reserved_mb": pl.Float64,
    "peak_reserved_us": pl.Float64,
    "peak_reserved_loc": pl.Int64,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "points": pl.Int64,
    "peak_op": pl.Utf8,
    "peak_op_loc": pl.Int64,
    "live_mb": pl.Float64,
    "live_count": pl.Int64,
    "allocs": pl.Int64,
}


# The format's own columns of the peak row: which files the locators point into and how ("lines" / "events"),
# the device, the step and phase of the peak (traces), the device's capacity where the capture records it, and the
# process's whole reservation on the device (Ascend's APP component).
FACTS_SCHEMA = {
    "device": pl.Utf8,
    "component": pl.Utf8,
    "locator": pl.Utf8,
    "peak_file": pl.Utf8,
    "holders_file": pl.Utf8,
    "step": pl.Int64,
    "phase": pl.Utf8,
    "phase_loc": pl.Int64,
    "capacity_mb": pl.Float64,
    "capacity_source": pl.Utf8,
    "process_reserved_mb": pl.Float64,
    "process_reserved_loc": pl.Int64,
}


def with_facts(tables: dict[str, pl.DataFrame], facts: dict[str, object]) -> dict[str, pl.DataFrame]:
    """The peak row with `FACTS_SCHEMA` columns added (absent facts null), the same columns for every format."""
    unknown = set(facts) - set(FACTS_SCHEMA)
    if unknown:
        raise KeyError(f"memory facts not in FACTS_SCHEMA: {sorted(unknown)}")
    peak = tables["peak"].with_columns(
        pl.lit(facts.get(key), dtype=value).alias(key) for key, value in FACTS_SCHEMA.items()
    )
    return {**tables, "peak": peak}


# --------------------------------------------------------------------------- per format: rows in, tables out


def read_rank(rd, rs, pack) -> None:
    """Fill ``rd.memory`` (`reduce`'s tables, the peak row with its facts) from the rank's memory files: Ascend
    memory_record.csv / operator_memory.csv / npu_module_mem.csv, or a Kineto trace's memory events. Rows that
    cannot be used are counted in the rank's warnings; a rank without memory data keeps ``rd.memory`` None.

    A memory file that cannot be read at all (a missing column, text that is no CSV or no trace) is a warning
    naming the file and the problem, not the rank's error: the memory analysis is then left out for the rank, and
    everything else is analysed as before."""
    from profan.model.errors import ProfanInputError

    chk = pack.check("memory-peak")
    try:
        if rs.kind == "ascend" and "memory_record" in rs.files:
            rd.memory = _ascend(rd, rs, chk)
        elif rs.kind == "ascend" and "ascend_db" in rs.files:
            rd.memory = _ascend_db(rd, rs, chk)
        elif rs.kind == "kineto" and "kineto_trace" in rs.files:
            rd.memory = _kineto(rd, rs, chk, pack.roles)
    except ProfanInputError as exc:
        rd.memory = None
        shown = {str(value): rd.files[key] for key, value in rs.files.items()}.get(str(exc.path), "a memory file")
        rd.warnings.append(f"{shown}: {exc.problem}; memory not analysed for this rank")


def _ascend(rd, rs, chk) -> dict[str, pl.DataFrame] | None:
    from profan.sources.ascend_text import memory as ascend_memory

    got = {}
    for logical, kind in (("memory_record", "records"), ("operator_memory", "ops"), ("npu_module_mem", "modules")):
        if logical not in rs.files:
            continue
        r = ascend_memory.read(rs.files[logical], kind)
        rd.count(logical, r.table.height + r.skipped, r.skipped, "rows whose time or size is not a number")
        if r.rounded_times:
            rd.warnings.append(
                f"{rd.files[logical]}: {r.rounded_times} row(s) hold a time in scientific notation (a spreadsheet "
                "rounded them): their order in time and the time of the peak are not exact"
            )
        got[kind] = r.table
    return ascend_tables(got["records"], got.get("ops"), got.get("modules"), chk)


def _ascend_db(rd, rs, chk) -> dict[str, pl.DataFrame] | None:
    """The same tables from torch_npu's SQLite export: its MEMORY_RECORD / OP_MEMORY / NPU_MODULE_MEM tables,
    cited as rows of those tables (``<db>#TABLE`` files, whose line numbers are row ids)."""
    from profan.sources.ascend_db import memory as ascend_db_memory

    got = ascend_db_memory.memory_tables(rs.files["ascend_db"])
    if "records" not in got:
        return None
    frames = {}
    for kind, logical in (("records", "memory_record"), ("ops", "operator_memory"), ("modules", "npu_module_mem")):
        if kind not in got:
            continue
        table = ascend_db_memory.TABLES[kind][0]
        rd.files[logical] = f"{rd.files['ascend_db']}#{table}"
        r = got[kind]
        rd.count(logical, r.table.height + r.skipped, r.skipped, "rows whose time or size is not a number")
        frames[kind] = r.table
    return ascend_tables(frames["records"], frames.get("ops"), frames.get("modules"), chk)


def ascend_tables(
    records: pl.DataFrame,
    ops: pl.DataFrame | None,
    modules: pl.DataFrame | None,
    chk,
    files: tuple[str, str, str] = ("memory_record", "operator_memory", "lines"),
) -> dict[str, pl.DataFrame] | None:
    """The memory tables of an Ascend rank from the frames of `profan.sources.ascend_text.memory`'s schema — whichever
    reader made them (the text export's CSVs, or the SQLite export's tables). ``files``: the logical names (keys of
    ``RankData.files``) the records' and ops' ``src_line`` point into, and the locator kind ("lines" / "events").
    The curve is the first of the check's ``ascend_curve_components`` present; None when there is none."""
    present = set(records["component"].drop_nulls().unique().to_list())
    component = next((c for c in chk["ascend_curve_components"] if c in present), None)
    if component is None:
        return None
    pts = records.filter(pl.col("component") == component).select(
        "ts_us", "allocated_mb", "reserved_mb", pl.col("src_line").alias("loc")
    )
    allocs = (
        pl.DataFrame(schema=ALLOCS_SCHEMA)
        if ops is None
        else ops.select(
            "name",
            (pl.col("size_kb") / 1024).alias("size_mb"),
            "alloc_us",
            "release_us",
            pl.col("src_line").alias("loc"),
        )
    )
    tables = reduce(pts, allocs, chk["curve_points"], chk["top_holders"])
    if tables is None:
        return None
    app = records.filter((pl.col("component") == chk["ascend_process_component"]) & pl.col("reserved_mb").is_not_null())
    app_row = app.row(int(app["reserved_mb"].arg_max()), named=True) if not app.is_empty() else {}
    devices = records["device"].drop_nulls()
    facts = {
        "device": devices[0] if devices.len() else None,
        "component": component,
        "locator": files[2],
        "peak_file": files[0],
        "holders_file": files[1] if ops is not None else None,
        "process_reserved_mb": app_row.get("reserved_mb"),
        "process_reserved_loc": app_row.get("src_line"),
    }
    tables = with_facts(tables, facts)
    if modules is not None:
        tables["modules"] = _modules(modules)
    return tables


def _modules(modules: pl.DataFrame) -> pl.DataFrame:
    """Per CANN component, the most device memory it reserved (and the row of that sample), components that
    reserved none left out."""
    return (
        modules.filter(pl.col("reserved_mb") > 0)
        .sort(["reserved_mb", "src_line"], descending=[True, False])
        .group_by("component", maintain_order=True)
        .agg(pl.col("reserved_mb").first(), pl.col("src_line").first().alias("loc"))
        .sort(["reserved_mb", "component"], descending=[True, False])
    )


def _kineto(rd, rs, chk, roles) -> dict[str, pl.DataFrame] | None:
    """A Kineto rank's memory tables, cached per trace (`profan.sources.common.cache.cached_table`) under the settings
    that shape them: a second analysis does not read the trace again for its memory events."""
    from profan.sources.common.cache import cached_table

    path = rs.files["kineto_trace"]
    settings = {k: chk[k] for k in ("event_name", "device_types", "phases", "curve_points", "top_holders")}
    settings["roles"] = [roles.kineto_cpu_op_cat, roles.kineto_annotation_cat, roles.kineto_step]
    kind = "kineto_memory/" + hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    curve, facts, _hit = cached_table(path, kind, lambda: _kineto_build(path, chk, roles))
    if facts["skipped"]:
        rd.warnings.append(
            f"{rd.files['kineto_trace']}: skipped {facts['skipped']} memory event(s) without a time or a "
            "Total Allocated"
        )
    if facts["peak"] is None:
        return None
    return {
        "curve": curve,
        "peak": pl.DataFrame([facts["peak"]], schema={**PEAK_SCHEMA, **FACTS_SCHEMA}),
        "holders": pl.DataFrame(facts["holders"], schema=HOLDERS_SCHEMA),
    }


def _kineto_build(path, chk, roles) -> tuple[pl.DataFrame, dict]:
    """(the curve, {skipped, peak row, holders rows}) of one trace: what `_kineto` caches."""
    from profan.sources.trace import kineto_memory as km

    empty = pl.DataFrame(schema={**POINTS_SCHEMA, "op": pl.Utf8, "event": pl.Utf8})
    tm = km.read(path, chk["event_name"], (roles.kineto_cpu_op_cat, roles.kineto_annotation_cat))
    if tm is None or tm.events.is_empty():
        return empty, {"skipped": 0 if tm is None else tm.skipped, "peak": None, "holders": []}
    evidence, label = km.device_events(tm, chk["device_types"])
    allocs = km.allocations(evidence, tm.spans, roles.kineto_cpu_op_cat)
    tables = reduce(km.points(evidence), allocs, chk["curve_points"], chk["top_holders"])
    if tables is None:
        return empty, {"skipped": tm.skipped, "peak": None, "holders": []}
    peak = tables["peak"].row(0, named=True)
    tid = evidence.filter(pl.col("event_idx") == peak["peak_loc"])["tid"][0]
    step, _ = km.step_at(tm.spans, peak["peak_us"], roles.kineto_step, roles.kineto_annotation_cat)
    phase, phase_loc = km.phase_at(tm.spans, tid, peak["peak_us"], chk["phases"])
    cap = km.capacity_mb(tm.meta, evidence["device_id"][0])
    facts = {
        "device": label,
        "locator": "events",
        "peak_file": "kineto_trace",
        "holders_file": "kineto_trace",
        "step": step,
        "phase": phase,
        "phase_loc": phase_loc,
        "capacity_mb": cap,
        "capacity_source": "deviceProperties.totalGlobalMem" if cap is not None else None,
    }
    tables = with_facts(tables, facts)
    return tables["curve"], {
        "skipped": tm.skipped,
        "peak": tables["peak"].row(0, named=True),
        "holders": tables["holders"].to_dicts(),
    }
