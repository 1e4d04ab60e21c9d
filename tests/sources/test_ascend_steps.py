"""step_trace_time.csv's reader on rows that are no measurement of one step: each is skipped and counted under
its reason, and every row kept holds the raw file's numbers (read back here with the csv module)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import QWEN3

from profan.sources.ascend_text import steps as ascend_steps

HEADER = (
    "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
    "Communication(Not Overlapped and Exclude Receive),Preparing"
)
REAL = (QWEN3 / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv").read_text().splitlines()[1]


def _row(**cells: str) -> str:
    """Qwen3 rank 0's real row (device 0, step 13) with cells replaced by column name."""
    names = HEADER.split(",")
    parts = REAL.split(",")
    for k, v in cells.items():
        parts[names.index(k)] = v
    return ",".join(parts)


def _write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "step_trace_time.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_each_row_that_is_no_step_is_skipped_under_its_reason(tmp_path):
    path = _write(
        tmp_path,
        REAL,
        _row(Step="14", Computing="-8873.7", Free="-25744.0"),  # negative times
        _row(Step="15", **{k: "0" for k in ("Computing", "Free", "Stage", "Bubble")}),  # a step of no length
        _row(Step=""),  # no step id beside rows that have one
        _row(Computing="1", Free="1", Stage="3"),  # step 13 again
        _row(Step="16", Computing="abc"),  # text
    )
    table, why = ascend_steps.read(path)
    assert why == {"unreadable": 1, "negative": 1, "unsized": 1, "no_step": 1, "repeated": 1}
    assert sum(ascend_steps.read(path)[1].values()) == 5
    raw = next(csv.DictReader(path.open(newline="")))
    (kept,) = table.to_dicts()
    assert (kept["src_line"], kept["step"], kept["device_id"]) == (2, 13, 0)
    assert kept["computing_us"] == float(raw["Computing"]) and kept["free_us"] == float(raw["Free"])
    assert kept["step_us"] == float(raw["Stage"]) + float(raw["Bubble"])
    said = ascend_steps.skipped_what(why)
    assert said.startswith("rows: 1 unreadable") and "1 with a negative time" in said
    assert "1 repeating a (device, step) of an earlier row (the first row is kept)" in said


def test_a_file_without_step_ids_is_the_profilers_own_and_kept(tmp_path):
    """torch_npu writes one row per device with an empty Step cell when the capture marked no steps."""
    path = _write(tmp_path, _row(Step=""), _row(Device_id="1", Step=""))
    table, why = ascend_steps.read(path)
    assert why == {}
    assert table["step"].to_list() == [None, None] and table["device_id"].to_list() == [0, 1]


def test_a_repeated_step_on_another_device_is_its_own_row(tmp_path):
    table, why = ascend_steps.read(_write(tmp_path, REAL, _row(Device_id="1")))
    assert why == {} and table["device_id"].to_list() == [0, 1]


@pytest.mark.parametrize(
    ("cells", "why"),
    [
        ({"Overlapped": "-1e-9"}, {}),  # the profiler's own subtraction, rounded: kept
        ({"Communication(Not Overlapped and Exclude Receive)": "-5.0"}, {}),  # Not Overlapped − Bubble: not summed
        ({"Preparing": "-0.5"}, {"negative": 1}),
        ({"Stage": "N/A", "Free": "N/A"}, {"unsized": 1}),  # nothing left to size the step
    ],
)
def test_what_a_negative_or_missing_cell_does(tmp_path, cells, why):
    table, got = ascend_steps.read(_write(tmp_path, _row(**cells)))
    assert got == why and table.height == 1 - sum(why.values())


def test_without_stage_the_lanes_size_the_step(tmp_path):
    header = "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free"
    table, why = ascend_steps.read(_write(tmp_path, "2,10.5,20.25,1,21.25,3", "3,0,0,0,0,0", header=header))
    assert why == {"unsized": 1} and table["step_us"].to_list() == [10.5 + 20.25 + 3]
