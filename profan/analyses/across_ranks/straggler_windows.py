"""Why a rank is late: its pre-collective windows (end of its previous communication op -> start of this one) at
the collectives it is an outlier at, against a typical rank's at the same collectives.

The extra window time splits into extra device work (by bucket and kernel, "more kernels" or "slower kernels of
the same name") and time with no device work at all (a host-side gap: dispatch, data loading, Python), with the
longest idle stretch and the rows around it. On a CPU-only trace the work is the main thread's ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from profan.analyses.across_ranks.straggler_arrivals import CHECK, KEY
from profan.model.rank import RankData
from profan.rulepack.pack import RulePack


def _window(ranks_by: dict[int, RankData], rank: int, cids: list[int]) -> tuple[float, pl.DataFrame | None]:
    """(summed window length, summed kernels per (op, name)) over the given ops of one rank."""
    r = ranks_by[rank]
    frame = r.collectives.filter(pl.col("cid").is_in(cids))
    length = float((frame["start_us"] - frame["win_start_us"]).fill_null(0).sum())
    if r.windows is None or r.windows.is_empty():
        return length, None
    w = (
        r.windows.filter(pl.col("cid").is_in(cids))
        .group_by("op", "name", "bucket")
        .agg(
            pl.col("count").sum(),
            pl.col("time_us").sum(),
            pl.col("locs").list.explode(keep_nulls=False, empty_as_null=False).alias("locs"),
            pl.col("loc_file").first(),
            pl.col("loc_kind").first(),
        )
    )
    return length, w


@dataclass(frozen=True)
class WindowComparison:
    """What `explain` found: the slow rank's pre-collective windows against the typical rank's at the same
    collectives, and the extra time split into device work and time with no device work.

    ``cause_class``: "compute" (more or slower kernels), "host_gap" (the device sat idle) or "unknown" (kernel
    rows missing on one rank: then the split fields stay None)."""

    window_us: float
    typical_window_us: float
    extra_window_us: float
    cause_class: str = "unknown"
    kernels: list[dict] = field(default_factory=list)  # the kernels with the most extra time, largest first
    by_bucket: dict[str, float] = field(default_factory=dict)  # extra time per bucket, largest first
    kernel_rows: pl.DataFrame | None = None  # the rows of ``kernels`` on both ranks, for evidence
    extra_compute_us: float | None = None
    extra_idle_us: float | None = None
    gap: dict | None = None  # the slow rank's longest idle stretch (`_largest_gap`)
    cpu: bool = False  # a CPU-only trace: the work is the main thread's ops, not device kernels (wording)

    @property
    def split(self) -> bool:
        return self.extra_compute_us is not None

    def metrics(self) -> dict:
        """The comparison as finding metrics (the kernel rows are evidence, not numbers)."""
        out = {
            "window_us": self.window_us,
            "typical_window_us": self.typical_window_us,
            "extra_window_us": self.extra_window_us,
            "cause_class": self.cause_class,
            "kernels": self.kernels,
            "by_bucket": self.by_bucket,
        }
        if self.split:
            out.update(extra_compute_us=self.extra_compute_us, extra_idle_us=self.extra_idle_us, gap=self.gap)
        return out


def explain(
    ranks_by: dict[int, RankData], late: pl.DataFrame, slow: int, typical: int, inst: pl.DataFrame, pack: RulePack
) -> WindowComparison:
    """Compare the pre-collective windows of the slow and the typical rank at the flagged collectives."""
    chk = pack.check(CHECK)
    rows = late.join(inst.select(KEY), on=KEY, how="semi")
    len_s, w_s = _window(ranks_by, slow, rows.filter(pl.col("rank") == slow)["cid"].to_list())
    len_t, w_t = _window(ranks_by, typical, rows.filter(pl.col("rank") == typical)["cid"].to_list())
    lengths = {
        "window_us": round(len_s, 3),
        "typical_window_us": round(len_t, 3),
        "extra_window_us": round(len_s - len_t, 3),
    }
    lengths["cpu"] = _cpu_only(ranks_by[slow])
    if w_s is None or w_t is None:
        return WindowComparison(**lengths)
    busy_s, busy_t = float(w_s["time_us"].sum()), float(w_t["time_us"].sum())
    extra_busy = busy_s - busy_t
    extra_idle = (len_s - busy_s) - (len_t - busy_t)
    both = _kernel_deltas(w_s, w_t)
    top = both.filter(pl.col("delta_us") > max(1.0, 0.05 * max(extra_busy, 0.0))).head(5)
    total = max(len_s - len_t, extra_busy + max(extra_idle, 0.0), 1e-9)
    return WindowComparison(
        **lengths,
        cause_class="host_gap" if extra_idle >= chk["host_gap_share"] * total else "compute",
        kernels=[_kernel_delta(row) for row in top.iter_rows(named=True)],
        by_bucket={
            b: round(v, 3)
            for b, v in both.group_by("bucket")
            .agg(pl.col("delta_us").sum())
            .sort(["delta_us", "bucket"], descending=[True, False])
            .iter_rows()
            if abs(v) >= 1.0
        },
        kernel_rows=top,
        extra_compute_us=round(extra_busy, 3),
        extra_idle_us=round(extra_idle, 3),
        gap=_largest_gap(ranks_by, rows, slow, typical),
    )


def _cpu_only(r: RankData) -> bool:
    """Whether the rank's trace measured the CPU only (its step split says so): then its "kernels" are the main
    thread's ops and idle time is time the main thread ran none."""
    t = r.trace_steps
    return t is not None and "device" in t.columns and t.height > 0 and (t["device"] == "CPU").all()


def _kernel_deltas(slow: pl.DataFrame, typical: pl.DataFrame) -> pl.DataFrame:
    """Kernels per (op, name, bucket) of both windows side by side (typical: ``_t``), most extra time first."""
    both = slow.join(typical, on=["op", "name", "bucket"], how="full", coalesce=True, suffix="_t").with_columns(
        pl.col("time_us").fill_null(0.0),
        pl.col("time_us_t").fill_null(0.0),
        pl.col("count").fill_null(0),
        pl.col("count_t").fill_null(0),
    )
    # ties by bucket and name: the kernels named must not depend on the grouping's row order
    return both.with_columns((pl.col("time_us") - pl.col("time_us_t")).alias("delta_us")).sort(
        ["delta_us", "bucket", "op", "name"], descending=[True, False, False, False], nulls_last=True
    )


def _kernel_delta(r: dict) -> dict:
    return {
        "op": r["op"],
        "name": r["name"],
        "bucket": r["bucket"],
        "delta_us": round(r["delta_us"], 3),
        "time_us": round(r["time_us"], 3),
        "typical_time_us": round(r["time_us_t"], 3),
        "count": int(r["count"]),
        "typical_count": int(r["count_t"]),
        "how": "slower kernels of the same name" if r["count"] == r["count_t"] else "extra kernels",
    }


def _largest_gap(ranks_by: dict[int, RankData], rows: pl.DataFrame, slow: int, typical: int) -> dict | None:
    """The slow rank's longest stretch without device work over the compared windows, and the typical rank's
    longest stretch in the same window: the kernel rows on either side are the evidence of a host gap."""
    cs = ranks_by[slow].collectives
    if cs is None or "gap_us" not in cs.columns:
        return None
    mine = (
        rows.filter(pl.col("rank") == slow)
        .select(*KEY, "cid")
        .join(cs.select("cid", "gap_us", "gap_prev_loc", "gap_loc", "kfile"), on="cid")
    )
    mine = mine.filter(pl.col("gap_us").is_not_null()).sort("gap_us", descending=True)
    if mine.is_empty():
        return None
    top = mine.row(0, named=True)
    out = {
        "rank": slow,
        "gap_us": round(top["gap_us"], 3),
        "file": top["kfile"],
        "lines": [x for x in (top["gap_prev_loc"], top["gap_loc"]) if x is not None],
        "step": top["step"],
        "group": top["group"],
        "seq": top["seq"],
    }
    ct = ranks_by[typical].collectives
    trow = rows.filter(
        (pl.col("rank") == typical)
        & (pl.col("step").eq_missing(top["step"]))
        & (pl.col("group") == top["group"])
        & (pl.col("seq") == top["seq"])
    )
    if ct is not None and trow.height and "gap_us" in ct.columns:
        t = ct.filter(pl.col("cid") == trow["cid"][0]).row(0, named=True)
        out["typical"] = {
            "rank": typical,
            "gap_us": t["gap_us"],
            "file": t["kfile"],
            "lines": [x for x in (t["gap_prev_loc"], t["gap_loc"]) if x is not None],
        }
    return out
