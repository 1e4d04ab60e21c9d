"""`intervals.covered_time`: how much of each span a lane's disjoint runs cover, against sums done by hand."""

from __future__ import annotations

import polars as pl

from profan.sources.common.intervals import covered_time, union_runs


def test_covered_time_counts_each_runs_overlap_with_the_span():
    events = pl.DataFrame({"lane": [0] * 4, "ts_us": [0.0, 3.0, 10.0, 20.0], "end_us": [4.0, 5.0, 15.0, 30.0]})
    runs = union_runs(events, ["lane"])  # [0, 5), [10, 15), [20, 30)
    spans = pl.DataFrame({"ts_us": [-5.0, 3.0, 12.0, 16.0, 25.0, 40.0], "end_us": [2.0, 12.0, 22.0, 18.0, 35.0, 50.0]})
    got = covered_time(spans, runs, "covered")["covered"].to_list()
    # [-5, 2): 2 of [0, 5); [3, 12): 2 + 2; [12, 22): 3 + 2; [16, 18): none; [25, 35): 5; [40, 50): none
    assert got == [2.0, 4.0, 5.0, 0.0, 5.0, 0.0]


def test_no_runs_cover_nothing():
    spans = pl.DataFrame({"ts_us": [1.0], "end_us": [9.0]})
    empty = pl.DataFrame(schema={"lane": pl.Int64, "ts_us": pl.Float64, "end_us": pl.Float64})
    assert covered_time(spans, empty, "covered")["covered"].to_list() == [0.0]
