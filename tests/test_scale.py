"""Reports at scale: the JSON report cuts big per-rank tables to the rows its diagnosis names plus summaries per
class, ``--tables DIR`` writes every table in full as Parquet, and a 64-rank Markdown report stays short.

Expected values are recomputed from the full tables of the in-memory report (which no renderer changes) and from
the planted faults, not taken from the renderer under test."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest
from conftest import run_cli

import profan
from profan.render.json_report import by_class, cut_tables, render_json
from profan.render.markdown import render_markdown
from profan.synth import generate


@pytest.fixture(scope="module")
def slow16(tmp_path_factory):
    """16 ranks with a compute straggler (rank 11)."""
    root = tmp_path_factory.mktemp("scale") / "c16"
    generate(root, ranks=16, layers=1, steps=1, seed=4, trace=False, straggler_rank=11, tp=8)
    return root, profan.analyze(root)


def test_json_cuts_big_tables_to_the_named_ranks(slow16):
    _root, rep = slow16
    full = rep.tables["comm_links"]
    doc = json.loads(render_json(cut_tables(rep, limit=full.height - 1)) or "")
    cut = doc["meta"]["tables_cut"]["comm_links"]
    assert cut["ranks_kept"] == [11]  # the straggler the verdict names
    assert cut["rows"] == full.height and cut["summary"] == "comm_links_by_class"
    got = doc["tables"]["comm_links"]
    want = full.filter(pl.col("rank") == 11).height
    assert len(got) == want == cut["kept"] and {r["rank"] for r in got} == {11}
    # the summary of one class, recomputed by hand from the full table
    summary = doc["tables"]["comm_links_by_class"]
    one = summary[0]
    keys = ("step", "kind", "op_type", "group_name", "group_hash", "transport")
    rows = [r for r in full.iter_rows(named=True) if all(r[k] == one[k] for k in keys)]
    bws = [r["bandwidth_gbps"] for r in rows]
    assert one["rows"] == len(rows) and one["ranks"] == len({r["rank"] for r in rows})
    assert one["bandwidth_gbps_min"] == pytest.approx(min(bws), abs=1e-6)
    assert one["bandwidth_gbps_median"] == pytest.approx(statistics.median(bws), abs=1e-6)
    assert one["bandwidth_gbps_min_rank"] == min(rows, key=lambda r: (r["bandwidth_gbps"], r["rank"]))["rank"]
    assert sum(c["rows"] for c in summary) == full.height


def test_json_keeps_the_links_a_finding_names(tmp_path, monkeypatch):
    """With no rank named as a place, the link rows kept are exactly both directions of the slow link."""
    from profan.render import json_report

    generate(tmp_path / "c", ranks=8, layers=1, steps=1, seed=2, trace=False, slow_link=(2, 5))
    rep = profan.analyze(tmp_path / "c")
    assert any(f.check == "comm-slow-link" for f in rep.findings)
    monkeypatch.setattr(json_report, "PLACE_RANKS", 0)
    full = rep.tables["comm_links"]
    got = json.loads(render_json(cut_tables(rep, limit=full.height - 1)) or "")["tables"]["comm_links"]
    want = [r for r in full.iter_rows(named=True) if {r["src_rank"], r["dst_rank"]} == {2, 5}]
    assert len(got) == len(want) > 0 and {(r["src_rank"], r["dst_rank"]) for r in got} == {(2, 5), (5, 2)}


def test_json_keeps_small_tables_whole(slow16):
    """Under the row limit nothing is cut and the document says nothing about cutting."""
    _root, rep = slow16
    doc = json.loads(render_json(rep) or "")
    assert "tables_cut" not in doc["meta"]
    assert len(doc["tables"]["comm_links"]) == rep.tables["comm_links"].height


def test_by_class_takes_the_lowest_rank_on_ties():
    df = pl.DataFrame({"rank": [3, 1, 2], "k": ["a", "a", "a"], "v": [1.0, 1.0, 5.0]})
    got = by_class(df, ["k"], ["v"]).row(0, named=True)
    assert (got["v_min"], got["v_min_rank"], got["v_max"], got["v_max_rank"]) == (1.0, 1, 5.0, 2)


def test_tables_option_writes_every_table_in_full(slow16, tmp_path):
    root, rep = slow16
    out = tmp_path / "tables"
    done = run_cli("analyze", str(root), "-q", "-f", "json", "-o", str(tmp_path / "r.json"), "--tables", str(out))
    assert done.returncode == 0, done.stderr
    assert {p.stem for p in out.glob("*.parquet")} == set(rep.tables)
    links = pl.read_parquet(out / "comm_links.parquet")
    assert links.height == rep.tables["comm_links"].height
    assert links["bandwidth_gbps"].sum() == pytest.approx(rep.tables["comm_links"]["bandwidth_gbps"].sum())


def test_tables_option_refuses_to_overwrite_an_input(slow16, tmp_path):
    """A table file that is (a link to) a file the analysis read is refused, with one line, and the input is kept."""
    root, _rep = slow16
    victim = next(root.glob("*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"))
    before = victim.read_bytes()
    out = tmp_path / "tables"
    out.mkdir()
    (out / "steps.parquet").symlink_to(victim)
    done = run_cli("analyze", str(root), "-q", "--tables", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "refusing to overwrite" in done.stderr and victim.read_bytes() == before
    file = tmp_path / "a-file"
    file.write_text("x")
    done = run_cli("analyze", str(root), "-q", "--tables", str(file))
    assert done.returncode == 2 and "takes a folder" in done.stderr


def test_markdown_of_64_ranks_is_short_and_says_where_the_rest_is(tmp_path):
    root = tmp_path / "c64"
    generate(root, ranks=64, layers=1, steps=2, seed=5, trace=False, straggler_rank=33, tp=8)
    rep = profan.analyze(root)
    text = render_markdown(rep) or ""
    assert len(text.encode("utf-8")) <= 100_000
    assert "64 ranks: this Markdown lists" in text and "--tables OUT_DIR" in text
    # the top-kernel rows shown are those of the named straggler and of the first rank, and all of theirs
    top = rep.tables["top_kernels"]
    section = text.split("## Top kernels per bucket")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert {int(line.split(" | ")[0][2:]) for line in lines} == {0, 33}
    assert len(lines) == top.filter(pl.col("rank").is_in([0, 33])).height
    assert rep.causes and 33 in rep.causes[0].ranks
