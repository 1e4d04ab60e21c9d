"""The JSON renderer splices tables that polars encodes into the document msgspec encodes: the bytes must be those
of encoding ``Report.to_dict()`` whole, on real reports and on every column type a table can hold."""

from __future__ import annotations

import json
from datetime import datetime

import msgspec
import polars as pl

from profan.model.report import records, records_json
from profan.render.json_report import render_json
from profan.synth import generate


def _whole(report) -> str:
    return msgspec.json.format(msgspec.json.encode(report.to_dict()), indent=1).decode("utf-8")


def test_json_report_is_to_dict_encoded_on_a_real_profile(qwen3_report):
    text = render_json(qwen3_report)
    assert text == _whole(qwen3_report)
    doc = json.loads(text)
    # the spliced tables are real tables, in the report's order, with the values the report holds
    assert list(doc["tables"]) == [k for k in qwen3_report.tables if k != "breakdown"]
    first = qwen3_report.breakdown.row(0, named=True)
    assert doc["breakdown"][0] == {k: (round(v, 6) if isinstance(v, float) else v) for k, v in first.items()}


def test_json_report_is_to_dict_encoded_on_a_cluster(tmp_path):
    import profan

    generate(tmp_path / "c", ranks=8, seed=2, trace=False, hot_expert=3, hot_factor=3.0)
    rep = profan.analyze(tmp_path / "c")
    assert {"comm_links", "comm_bandwidth", "moe_balance"} <= set(rep.tables)
    assert render_json(rep) == _whole(rep)


def test_records_json_matches_records_for_every_column_kind():
    df = pl.DataFrame(
        {
            "f": [1.23456789, float("nan"), float("inf"), -0.5, 1764246877001930.25],
            "lf": [[0.1234567, float("nan")], [], None, [2.0], [1e-7]],
            "i": [1, 2, None, 4, 5],
            "s": ['a "quoted" <b>', "é", None, "\\", "\n"],
            "b": [True, False, None, True, False],
            "li": [[1, 2], [], None, [3], [4]],
        }
    )
    got = json.loads(records_json(df))
    assert got == json.loads(msgspec.json.encode(records(df)))
    assert got[0]["f"] == 1.234568 and got[1]["f"] is None and got[2]["f"] is None
    assert got[4]["f"] == 1764246877001930.25  # epoch-µs magnitudes keep their digits
    assert got[0]["lf"] == [0.123457, None]
    assert got[0]["s"] == 'a "quoted" <b>' and got[4]["s"] == "\n"
    # a column type polars' JSON does not share with `clean` (datetimes) takes the Python walk: ISO text
    dt = pl.DataFrame({"t": [datetime(2026, 12, 1, 8, 30)], "x": [0.1 + 0.2]})
    assert json.loads(records_json(dt)) == [{"t": "2026-12-01T08:30:00", "x": 0.3}]
    assert records_json(pl.DataFrame()) == b"[]"
