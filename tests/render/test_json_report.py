"""The JSON renderer splices tables that polars encodes into the document msgspec encodes: the bytes must be those
of encoding ``Report.to_dict()`` whole, on real reports and on every column type a table can hold."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import msgspec
import polars as pl

from profan.model.report import records, records_json
from profan.render.json_report import render_json
from profan.synth import generate

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_big_group_keeps_its_worst_members_and_those_of_the_named_ranks(tmp_path):
    """At scale a group finding (one member per rank and step) is cut like a big table: its first members (the
    worst), and every member naming a rank the diagnosis names, ids unchanged; ``meta.members_cut`` says how many
    of how many; asking `profan evidence` for a left-out member is one line that says where to read it, and the
    data directory reads it back."""
    import jsonschema
    from conftest import assert_one_line_error, run_cli

    import profan
    from profan.render.json_report import cut_members, named_ranks

    root = tmp_path / "c16"
    generate(root, ranks=16, layers=1, steps=1, seed=4, trace=False, straggler_rank=11, tp=8)
    rep = profan.analyze(root)
    assert named_ranks(rep) == [11]
    groups = [f for f in rep.findings if len(f.members) > 3]
    assert groups
    doc = json.loads(render_json(cut_members(rep, limit=3)) or "")
    schema = json.loads((ROOT / "profan" / "schema" / "report.schema.json").read_text())
    jsonschema.validate(doc, schema)
    cut = doc["meta"]["members_cut"]
    assert sorted(cut) == sorted(f.id for f in groups)
    by_id = {f["id"]: f for f in doc["findings"]}
    left_out = None
    for f in groups:
        want = [m.id for i, m in enumerate(f.members) if i < 3 or 11 in m.ranks]
        assert [m["id"] for m in by_id[f.id]["members"]] == want
        assert cut[f.id]["members"] == len(f.members) and cut[f.id]["kept"] == len(want)
        left_out = left_out or next((m for m in f.members if m.id not in want), None)
    assert left_out is not None
    written = tmp_path / "report.json"
    written.write_text(render_json(cut_members(rep, limit=3)) or "")
    assert_one_line_error(run_cli("evidence", str(written), left_out.id), left_out.id, "left out", "data directory")
    again = run_cli("evidence", str(root), left_out.id, "--limit", "0", "-f", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["message"] == left_out.message
