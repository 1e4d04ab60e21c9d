"""Reports at scale: the JSON report and the workbook cut big per-rank tables to the rows their diagnosis names plus
summaries per class, ``--tables DIR`` writes every table in full as Parquet, and the Markdown of a cluster stays
short: what was read per file kind, the named ranks' rows and sources first, and where the rest is.

Expected values are recomputed from the full tables of the in-memory report (which no renderer changes) and from
the planted faults, not taken from the renderer under test."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import replace

import openpyxl
import polars as pl
import pytest
from conftest import run_cli
from test_hostile_outputs import EVIL, _assert_inert

import profan
from profan.render import render
from profan.render.json_report import CLASSES, by_class, cut_tables, render_json
from profan.render.markdown import render_markdown
from profan.synth import generate

pytestmark = pytest.mark.slow  # large generated inputs or many examples: left out of the fast loop


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


def test_by_class_ties_ranks_whose_sums_differ_in_their_last_bits(qwen3_report):
    """Two ranks of the same rows (a rank's profile copied) sum to values that differ in their last bits when a
    parallel grouping adds the rows in another order: they tie, to the lower rank, run after run."""
    real = qwen3_report.breakdown.filter(pl.col("rank") == 0)
    noisy = real.with_columns(
        pl.lit(1, real.schema["rank"]).alias("rank"), pl.col("time_us") * (1 + 2e-16), pl.col("share") * (1 - 2e-16)
    )
    assert (noisy["time_us"] != real["time_us"]).any()  # the noise is there
    got = by_class(pl.concat([noisy, real]), ["step", "bucket"], ["time_us", "share"])
    assert got.height == real.height
    for col in ("time_us_min_rank", "time_us_max_rank", "share_min_rank", "share_max_rank"):
        assert got[col].to_list() == [0] * got.height
    # two values one ulp apart on either side of a rounding boundary tie too, whichever rank holds which
    for low, high in ((0, 1), (1, 0)):
        pair = pl.DataFrame({"rank": [low, high], "k": ["a", "a"], "v": [1.0000000000149998, 1.000000000015]})
        assert by_class(pair, ["k"], ["v"]).row(0, named=True)["v_max_rank"] == 0


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
    assert "a link is neither written through nor replaced" in done.stderr and victim.read_bytes() == before
    file = tmp_path / "a-file"
    file.write_text("x")
    done = run_cli("analyze", str(root), "-q", "--tables", str(file))
    assert done.returncode == 2 and "takes a folder" in done.stderr


@pytest.fixture(scope="module")
def slow64(tmp_path_factory):
    """64 ranks, 2 steps, with a compute straggler (rank 33): per-rank tables of thousands of rows."""
    root = tmp_path_factory.mktemp("scale") / "c64"
    generate(root, ranks=64, layers=1, steps=2, seed=5, trace=False, straggler_rank=33, tp=8)
    return root, profan.analyze(root)


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}")[1].split("\n## ")[0]


def _table_rows(section: str) -> list[list[str]]:
    """The cells of the first Markdown table of ``section``, header first."""
    lines = re.search(r"(?m)^\|.*\|\n\|[-:|]+\|\n(?:\|.*\n?)*", section)[0].strip("\n").split("\n")
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines[:1] + lines[2:]]


def test_markdown_of_64_ranks_is_short_and_says_where_the_rest_is(slow64):
    _root, rep = slow64
    text = render_markdown(rep) or ""
    assert len(text.encode("utf-8")) <= 100_000
    assert "64 ranks: this Markdown lists" in text and "--tables OUT_DIR" in text
    # the top-kernel rows shown are those of the named straggler and of the first rank, and all of theirs
    top = rep.tables["top_kernels"]
    section = _section(text, "Top kernels per bucket")
    lines = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert {int(line.split(" | ")[0][2:]) for line in lines} == {0, 33}
    assert len(lines) == top.filter(pl.col("rank").is_in([0, 33])).height
    assert rep.causes and 33 in rep.causes[0].ranks
    # the verdict cites the straggler's own rows
    straggler = next(rk["path"] for rk in rep.source["ranks"] if rk["rank"] == 33)
    verdict = text.split("\n## What was read")[0]
    assert f"- **Evidence:** {straggler}/" in verdict.replace("\\", "")


def test_markdown_at_scale_lists_the_first_named_ranks_in_full(slow64):
    """A cause naming six ranks: the top kernels of the first rank and of the first four it names are listed."""
    _root, rep = slow64
    cause = replace(rep.causes[0], ranks=(33, 40, 12, 41, 42, 43))
    text = render_markdown(replace(rep, causes=[cause, *rep.causes[1:]])) or ""
    section = _section(text, "Top kernels per bucket")
    listed = {int(line.split(" | ")[0][2:]) for line in section.splitlines() if re.match(r"\| \d", line)}
    assert listed == {0, 12, 33, 40, 41}
    assert "top-kernel rows of ranks 0, 12, 33, 40, 41 only" in text


def test_markdown_at_scale_summarises_what_was_read(slow64):
    """One row per file kind with the rows read over all ranks (and the least and most of a rank), the ranks
    grouped by where their id came from, and only the named and first ranks listed one by one."""
    _root, rep = slow64
    read = _section(render_markdown(rep) or "", "What was read")
    ranks = rep.source["ranks"]
    for kind in ("kernel_details", "communication_matrix", "step_trace_time"):
        rows = [rk["rows_read"][kind] for rk in ranks]
        assert f"| {kind} | 64 | {sum(rows):,} | {min(rows):,}–{max(rows):,} | 0 |" in read
    assert "- **Rank id from:** file name profiler_info_N.json — ranks 0–63." in read
    per_rank = [line for line in read.splitlines() if re.match(r"\| \d+ \| `", line)]
    assert [int(line.split(" | ")[0][2:]) for line in per_rank] == [0, 33]
    assert "**Ranks with skipped rows:** none." in read


def test_markdown_at_scale_keeps_the_named_rows_and_a_summary_per_class(slow64):
    """A cut detail table shows rows of the straggler only and says how many it has; its summary per class matches
    the full table recomputed by hand; a finding citing every rank lists the straggler's source among a few."""
    _root, rep = slow64
    text = render_markdown(rep) or ""
    full = rep.tables["comm_links"]
    mine = full.filter(pl.col("rank") == 33)
    links = _section(text, "Links (communication_matrix.json)")
    assert f"*10 of {full.height:,} rows: those of rank 33 ({mine.height:,} rows), with a summary" in links
    head, *rows = _table_rows(links)
    assert len(rows) == 10 and {r[head.index("rank")] for r in rows} == {"33"}
    summary = _table_rows(links.split("Per class (")[1])
    keys, values = CLASSES["comm_links"]
    # the class keys as the table names them, then the counts, then each value with its unit (render/table_text.py)
    assert summary[0][: len(keys) + 2] == [*keys, "rows", "ranks"] and len(summary[0]) == len(keys) + 2 + len(values)
    for row in summary[1:]:
        cls = full.filter(pl.all_horizontal([pl.col(k).cast(pl.String) == row[i] for i, k in enumerate(keys)]))
        assert int(row[len(keys)]) == cls.height > 0
        low = cls.sort(["bandwidth_gbps", "rank"]).row(0, named=True)
        high = cls.sort(["bandwidth_gbps", "rank"], descending=[True, False]).row(0, named=True)
        bw = row[len(keys) + 2]
        assert bw.startswith(f"{low['bandwidth_gbps']:,.3f} (rank {low['rank']}) · ")
        assert bw.endswith(f" · {high['bandwidth_gbps']:,.3f} (rank {high['rank']})")
    # a finding citing the step time of every rank: a few sources, the straggler's among them, and the count left
    wide = next(f for f in rep.findings if len(f.evidence) == 64)
    block = text.split(f'<a id="{wide.id}"></a>')[1].split("\n#### ")[0]
    shown = re.findall(r"(?m)^- (\S+step_trace_time\.csv):", block.split("Evidence:")[1].replace("\\", ""))
    straggler = next(rk["path"] for rk in rep.source["ranks"] if rk["rank"] == 33)
    assert len(shown) == 4 and f"{straggler}/ASCEND_PROFILER_OUTPUT/step_trace_time.csv" in shown
    assert re.search(rf"- … 60 more sources: `profan evidence \S+ {wide.id}` prints every one", block), block[-400:]


def test_markdown_at_scale_writes_rank_lists_as_runs(slow64):
    """A note listing every rank reads as runs, in the report (the link-prior note) and in the Markdown, which also
    folds a list of ranks a note spells out one by one."""
    from dataclasses import replace

    _root, rep = slow64
    assert any("no absolute link-bandwidth prior applied on rank(s) 0–63:" in n for n in rep.notes)
    listed = ", ".join(str(r) for r in range(64))
    spelled = replace(rep, notes=[*rep.notes, f"communication: a note on rank(s) {listed}"])
    notes = _section(render_markdown(spelled) or "", "Notes")
    assert listed[:20] not in notes and "a note on rank(s) 0–63" in notes


def test_markdown_at_scale_lists_a_few_members_and_counts_the_rest(slow16):
    _root, rep = slow16
    text = render_markdown(rep) or ""
    group = max(rep.findings, key=lambda f: len(f.members))
    block = text.split(f'<a id="{group.id}"></a>')[1].split("\n#### ")[0]
    ids = re.findall(rf"(?m)^\| ({group.id}\.\d+) \|", block)
    assert len(group.members) > 10 and len(ids) == 10
    assert f"*{len(group.members) - 10} more members (those of the named ranks shown first)" in block


def test_hostile_names_in_class_summaries_stay_text(slow16):
    """An op name in a summary per class (a cut table's class key) forms no link, image or HTML."""
    _root, rep = slow16
    tables = dict(rep.tables)
    tables["communication"] = tables["communication"].with_columns(pl.lit(EVIL).alias("op_name"))
    text = render_markdown(replace(rep, tables=tables)) or ""
    summary = _section(text, "Communication ops (communication.json)").split("Per class (")[1]
    assert "![x]" not in summary and "!\\[x\\]" in summary
    _assert_inert(text)


def test_workbook_of_64_ranks_cuts_big_tables_and_says_so(slow64, tmp_path):
    """Tables over the workbook's row limit keep the straggler's rows; the sheet Tables cut and the Summary say
    what was cut and where the full tables are; a summary sheet per class holds every row."""
    from profan.render.xlsx import ROW_LIMIT

    _root, rep = slow64
    out = tmp_path / "r.xlsx"
    render(rep, "xlsx", out)
    wb = openpyxl.load_workbook(out)
    big = [n for n, df in rep.tables.items() if df.height > ROW_LIMIT and "rank" in df.columns]
    assert "comm_links" in big
    rows = list(wb["Tables cut"].iter_rows(min_row=2, values_only=True))
    assert [r[0] for r in rows] == big
    for name, sheet, total, kept, ranks, _summary, full in rows:
        mine = rep.tables[name].filter(pl.col("rank") == 33)
        assert (total, kept, ranks) == (rep.tables[name].height, mine.height, "33")
        assert f"OUT_DIR/{name}.parquet" in full
        got = list(wb[sheet].iter_rows(min_row=2, values_only=True))
        assert len(got) == mine.height and {r[0] for r in got} == {33}
    assert wb["Tables cut"]["B2"].hyperlink.location == f"'{rows[0][1]}'!A1"
    by_class = wb["Comm links by class"]
    head = [c.value for c in by_class[1]]
    assert {"bandwidth gbps min", "bandwidth gbps min rank", "size max (MB)"} <= set(head)
    assert by_class.cell(row=2, column=head.index("size max (MB)") + 1).number_format == '#,##0.00" MB"'
    total = sum(r[head.index("rows")] for r in by_class.iter_rows(min_row=2, values_only=True))
    assert total == rep.tables["comm_links"].height
    line = next(r for r in wb["Summary"].iter_rows() if r[0].value == "Tables cut")[1]
    assert line.value.startswith("Ranks the verdict names: 33. ") and "--tables OUT_DIR" in line.value
    assert line.hyperlink.location == "'Tables cut'!A1"


def test_workbook_lists_the_first_members_of_a_big_group_and_those_of_the_named_ranks(slow16, tmp_path, monkeypatch):
    from profan.render import xlsx

    _root, rep = slow16
    monkeypatch.setattr(xlsx, "MEMBER_LIMIT", 5)
    out = tmp_path / "r.xlsx"
    render(rep, "xlsx", out)
    wb = openpyxl.load_workbook(out)
    listed = [r[1] for r in wb["Members"].iter_rows(min_row=2, values_only=True)]
    cut = {r[0]: r for r in wb["Tables cut"].iter_rows(min_row=2, values_only=True)}
    big = [f for f in rep.findings if len(f.members) > 5]
    assert big
    for f in big:
        want = [m.id for i, m in enumerate(f.members) if i < 5 or 11 in m.ranks]
        assert [i for i in listed if i.partition(".")[0] == f.id] == want
        _name, sheet, total, kept, ranks, _summary, full = cut[f"members of {f.id}"]
        assert (sheet, total, kept, ranks) == ("Members", len(f.members), len(want), "11")
        assert f"profan evidence DATA_DIR {f.id}.N" in full
    line = next(r for r in wb["Summary"].iter_rows() if r[0].value == "Tables cut")[1].value
    assert f"The group findings {', '.join(f.id for f in big)} list their first 5 members" in line


def test_workbook_under_the_row_limit_is_whole(slow16, tmp_path):
    _root, rep = slow16
    out = tmp_path / "r.xlsx"
    render(rep, "xlsx", out)
    wb = openpyxl.load_workbook(out)
    assert "Tables cut" not in wb.sheetnames
    assert wb["Comm links"].max_row == rep.tables["comm_links"].height + 1
