"""The trust boundary: profan reads only inside the data the user named, writes only the output the user named,
and a report (someone else's, or edited) cannot widen that. Each case is a real sample with one hostile change."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import QWEN3, assert_one_line_error, one_rank, run_cli

import profan
from profan.app import output

KD = "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
CANARY = "TOP-SECRET-CANARY-7f3a"


def _canary(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.csv"
    secret.parent.mkdir()
    secret.write_text(f"Name,Duration(us)\n{CANARY},1\n")
    return secret


def _report(data: Path, out: Path) -> dict:
    res = run_cli("analyze", str(data), "-f", "json", "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def _lines_finding(doc: dict) -> tuple[str, dict]:
    f = next(f for f in doc["findings"] if "lines" in f["evidence"][0])
    return f["id"], f["evidence"][0]


def test_a_report_cannot_choose_its_data_root(tmp_path):
    """root '/' (or '.') written into a report someone hands over: refused unless the user names the root."""
    out = tmp_path / "elsewhere" / "r.json"
    out.parent.mkdir()
    doc = _report(QWEN3, out)
    fid, ev = _lines_finding(doc)
    ev["file"] = "etc/passwd"
    doc["source"]["root"] = doc["source"]["root_abs"] = "/"
    doc["source"]["file_bytes"]["etc/passwd"] = Path("/etc/passwd").stat().st_size
    out.write_text(json.dumps(doc))
    res = run_cli("evidence", str(out), fid)
    assert_one_line_error(res, "lies outside the report's folder", "pass --root DIR")
    assert "root:" not in res.stdout and "/bin/" not in res.stdout
    # the user names the data: only files inside it, and only those the analysis read
    assert_one_line_error(run_cli("evidence", str(out), fid, "--root", str(QWEN3)), "etc/passwd")


def test_a_sealed_report_reads_its_data_from_anywhere_an_edited_one_does_not(tmp_path):
    """A report this user's profan wrote finds its data wherever the report is saved; change its root or the
    files it lists and the seal no longer holds."""
    out = tmp_path / "reports" / "r.json"
    out.parent.mkdir()
    doc = _report(QWEN3, out)
    assert doc["source"]["root_seal"]
    fid, ev = _lines_finding(doc)
    res = run_cli("evidence", str(out), fid, "--format", "json")
    assert res.returncode == 0, res.stderr
    raw = (QWEN3 / ev["file"]).read_text().splitlines()
    assert [r["text"] for r in json.loads(res.stdout)["evidence"][0]["rows"]] == [raw[n - 1] for n in ev["lines"]]

    copy = tmp_path / "copy"
    shutil.copytree(QWEN3, copy)
    doc["source"]["root_abs"] = str(copy)  # points at another folder: the seal does not cover it
    out.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("evidence", str(out), fid), "pass --root DIR")
    doc["source"]["root_abs"] = str(QWEN3)
    doc["source"]["file_bytes"]["extra.csv"] = 1  # one more file listed: the seal breaks too
    out.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("evidence", str(out), fid), "pass --root DIR")


def _unsealed_beside(folder: Path) -> tuple[Path, Path, dict, str, dict]:
    """A real job copied into `folder`, its report written beside it with the seal removed (someone else's)."""
    data = folder / "job"
    shutil.copytree(QWEN3, data)
    out = folder / "r.json"
    doc = _report(data, out)
    fid, ev = _lines_finding(doc)
    del doc["source"]["root_seal"]
    return data, out, doc, fid, ev


def test_a_report_beside_its_data_needs_no_seal(tmp_path):
    """A report shipped in the folder holding its data (no seal: someone else wrote it) reads from there."""
    data, out, doc, fid, ev = _unsealed_beside(tmp_path / "bundle")
    out.write_text(json.dumps(doc))
    res = run_cli("evidence", str(out), fid, "--format", "json")
    assert res.returncode == 0, res.stderr
    raw = (data / ev["file"]).read_text().splitlines()
    assert [r["text"] for r in json.loads(res.stdout)["evidence"][0]["rows"]] == [raw[n - 1] for n in ev["lines"]]


def test_an_unsealed_report_prints_only_profiler_files_it_lists(tmp_path):
    """A report handed over and saved in a folder of private files cannot make `evidence` print one of them: an
    unsealed report's list of files read is only its word, so a cited file must be listed there and be named as a
    profiler file."""
    _, out, doc, fid, ev = _unsealed_beside(tmp_path / "home")
    (tmp_path / "home" / ".ssh").mkdir()
    (tmp_path / "home" / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{CANARY}\n-----END KEY-----\n")
    finding = next(f for f in doc["findings"] if f["id"] == fid)
    for listed in (False, True):
        d = json.loads(json.dumps(doc))
        d["source"]["root_abs"] = str(tmp_path / "home")
        d["source"]["root"] = "."
        if listed:
            d["source"]["file_bytes"][".ssh/id_rsa"] = (tmp_path / "home" / ".ssh" / "id_rsa").stat().st_size
        f = next(f for f in d["findings"] if f["id"] == fid)
        f["evidence"] = [{**finding["evidence"][0], "file": ".ssh/id_rsa", "lines": [1, 2, 3], "row_count": 3}]
        out.write_text(json.dumps(d))
        res = run_cli("evidence", str(out), fid)
        assert_one_line_error(res, "no profiler file and the report is not sealed")
        assert CANARY not in res.stdout + res.stderr
    # A profiler file the report does not list as read is refused too: the list is what makes a citation checkable.
    d = json.loads(json.dumps(doc))
    d["source"]["file_bytes"].pop(ev["file"])
    out.write_text(json.dumps(d))
    assert_one_line_error(run_cli("evidence", str(out), fid), "does not list it as read")


def test_a_symlink_out_of_the_data_is_neither_analysed_nor_printed(tmp_path):
    secret = _canary(tmp_path)
    data = tmp_path / "data"
    rank = one_rank(data)
    (rank / KD).unlink()
    (rank / KD).symlink_to(secret)
    report = profan.analyze(data)
    (said,) = [w for w in report.warnings if "outside the analysed folder" in w]
    assert said.startswith("skipped 1 link(s)") and f"rank_0_ascend_pt/{KD}" in said
    assert "kernel_details" not in report.source["ranks"][0]["files"]
    assert CANARY not in json.dumps(report.to_dict(), default=str)

    # a report that cites the linked file anyway (crafted, in the data folder): refused, the secret not shown
    out = data / "r.json"
    doc = _report(data, out)
    doc["findings"][0]["evidence"] = [{"file": f"rank_0_ascend_pt/{KD}", "lines": [2], "row_count": 1, "select": {}}]
    doc["source"]["file_bytes"][f"rank_0_ascend_pt/{KD}"] = secret.stat().st_size
    out.write_text(json.dumps(doc))
    res = run_cli("evidence", str(out), doc["findings"][0]["id"])
    assert_one_line_error(res, "outside the analysed folder; refused")
    assert CANARY not in res.stdout + res.stderr


def test_a_linked_rank_folder_outside_is_said(tmp_path):
    outside = tmp_path / "outside"
    one_rank(outside)
    data = tmp_path / "data"
    one_rank(data)
    (data / "rank_1_ascend_pt").symlink_to(outside / "rank_0_ascend_pt")
    report = profan.analyze(data)
    assert [r["rank"] for r in report.source["ranks"]] == [0]
    assert any(w.startswith("skipped 1 link(s)") and "rank_1_ascend_pt" in w for w in report.warnings)


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("fmt", ["md", "json", "html", "xlsx"])
@pytest.mark.parametrize("target", [KD, "ASCEND_PROFILER_OUTPUT/communication.json", "rules"])
def test_output_never_overwrites_an_input(tmp_path, fmt, target):
    data = tmp_path / "data"
    rank = one_rank(data)
    rules = tmp_path / "rules.toml"
    rules.write_text("")
    before, rules_before = _digest(data), rules.read_bytes()
    out = rules if target == "rules" else rank / target
    res = run_cli("analyze", str(data), "-f", fmt, "-o", str(out), "--rules", str(rules), "-q")
    if out.suffix == ".json" and fmt != "json":  # refused before any work: the extension names another format
        assert_one_line_error(res, f"-f {fmt} disagrees with -o")
    else:
        assert_one_line_error(res, "is a file the analysis read; refusing to overwrite it")
    assert _digest(data) == before and rules.read_bytes() == rules_before


@pytest.mark.parametrize("target", ["ASCEND_PROFILER_OUTPUT/l2_cache.csv", "../NOTES.md"])
def test_output_never_replaces_a_file_of_the_data_it_did_not_read(tmp_path, target):
    """A profiler file profan does not need, or the user's notes beside the data: inputs all the same."""
    data = tmp_path / "data"
    rank = one_rank(data)
    out = rank / target
    out.write_text("Device_id,Hit Rate\n0,0.5\n")
    before = _digest(data)
    fmt = ["-f", "json"] if out.suffix == ".csv" else []  # -o's extension names the format, but for .csv
    res = run_cli("analyze", str(data), *fmt, "-o", str(out), "-q")
    assert_one_line_error(res, "is in the analysed folder and is not a profan report; refusing to replace it")
    assert _digest(data) == before


@pytest.mark.parametrize("fmt", ["md", "json", "html", "xlsx"])
def test_a_report_in_the_data_folder_is_replaced_by_the_next_run(tmp_path, fmt):
    """``profan analyze . -o report.md`` run twice: the second run replaces the report the first one wrote."""
    data = tmp_path / "data"
    one_rank(data)
    out = data / f"report.{fmt}"
    assert run_cli("analyze", str(data), "-o", str(out), "-q").returncode == 0
    first = out.stat().st_mtime_ns
    res = run_cli("analyze", str(data), "-o", str(out), "-q")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_mtime_ns >= first and output.is_report(out)


def test_tables_in_the_data_folder_are_replaced_by_the_next_run_and_a_foreign_one_is_not(tmp_path):
    """``--tables DIR`` inside the data, twice: profan's own parquet files (marked in their footer) are replaced;
    a parquet file of the user's under a table's name is refused, naming the option that chose it."""
    data = tmp_path / "data"
    one_rank(data)
    tables = data / "tables"
    args = ("analyze", str(data), "-f", "json", "-o", str(data / "r.json"), "--tables", str(tables), "-q")
    assert run_cli(*args).returncode == 0
    written = sorted(p.name for p in tables.iterdir())
    assert "steps.parquet" in written and all(output.is_report(tables / n) for n in written)
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr
    pl.DataFrame({"mine": [1, 2]}).write_parquet(tables / "steps.parquet")
    assert_one_line_error(run_cli(*args), "is not a profan report; refusing to replace it (name another --tables)")
    assert pl.read_parquet(tables / "steps.parquet")["mine"].to_list() == [1, 2]


def test_a_folder_named_like_a_pattern_is_read_as_named(tmp_path):
    """``run[x]`` is a folder name: its kernel file is read, never the sibling ``runx`` a pattern would match."""
    named, sibling = tmp_path / "run[x]", tmp_path / "runx"
    one_rank(named)
    kd = one_rank(sibling) / KD
    kd.write_text(kd.read_text().replace("MatMul", CANARY))
    doc = _report(named, tmp_path / "out.json")
    assert CANARY not in json.dumps(doc)
    assert doc["source"]["ranks"][0]["rows_read"]["kernel_details"] == 2463


def test_output_through_a_link_to_an_input_touches_neither_the_link_nor_the_input(tmp_path):
    """A link at -o is neither written through nor replaced (tests/hostile/test_hostile_targets.py has the rest)."""
    data = tmp_path / "data"
    rank = one_rank(data)
    before = _digest(data)
    link = tmp_path / "report.md"
    link.symlink_to(rank / KD)
    res = run_cli("analyze", str(data), "-o", str(link), "-q")
    assert_one_line_error(res, f"is a symbolic link to the file {rank / KD}")
    assert _digest(data) == before and os.readlink(link) == str(rank / KD)
    other = tmp_path / "other.md"
    other.symlink_to(tmp_path / "elsewhere.txt")  # a dangling link that is no input: left as it is
    assert_one_line_error(run_cli("analyze", str(data), "-o", str(other), "-q"), "is a symbolic link to nothing")
    assert other.is_symlink() and not (tmp_path / "elsewhere.txt").exists()


def test_compare_output_never_overwrites_an_input(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(QWEN3, data)
    before = _digest(data)
    out = data / "rank_2_ascend_pt" / KD
    res = run_cli("compare", str(data), "--ranks", "0,2", "-f", "md", "-o", str(out), "-q")
    assert_one_line_error(res, "is a file the analysis read")
    assert _digest(data) == before


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("missing/r.md", "cannot write: the folder"),
        ("afile.txt/r.md", "is not a folder"),
        (".", "is a folder; name the report file"),
        ("x" * 300 + ".md", "File name too long"),
    ],
)
def test_output_that_cannot_be_written_is_one_line_before_any_work(tmp_path, target, said):
    (tmp_path / "afile.txt").write_text("")
    res = run_cli("analyze", str(QWEN3), "-o", str(tmp_path / target), "-q")
    assert_one_line_error(res, said)


def test_a_path_longer_than_the_system_takes_is_one_line(tmp_path):
    assert_one_line_error(run_cli("analyze", str(tmp_path / ("d" * 300))), "File name too long")


def test_a_fifo_named_like_a_trace_does_not_block(tmp_path):
    one_rank(tmp_path)
    os.mkfifo(tmp_path / "trace.json")
    os.mkfifo(tmp_path / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    res = run_cli("analyze", str(tmp_path), "-f", "json")  # run_cli times out rather than hang forever
    assert res.returncode == 0, res.stderr
    (said,) = [w for w in json.loads(res.stdout)["warnings"] if "not regular files" in w]
    assert said.startswith("skipped 2 entr(ies)") and "trace.json" in said
    assert_one_line_error(run_cli("analyze", str(tmp_path / "trace.json")), "nor a regular file")


def test_empty_rank_folders_are_counted_not_ranks(tmp_path):
    one_rank(tmp_path)
    for i in range(1, 301):
        (tmp_path / f"rank_{i}" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    report = profan.analyze(tmp_path)
    assert [r["rank"] for r in report.source["ranks"]] == [0]
    assert any(
        w.startswith("skipped 300 folder(s) that look like rank folders but hold no profiler file")
        for w in report.warnings
    )
    empty = tmp_path / "empty"
    for i in range(3):
        (empty / f"rank_{i}" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    assert_one_line_error(run_cli("analyze", str(empty)), "3 folder(s) look like rank folders but hold no")


@pytest.mark.parametrize(
    ("limit", "value", "said"),
    [
        ("max_ranks", 3, "holds more than 3 ranks"),
        ("max_entries", 10, "holds more than 10 files and folders"),
    ],
)
def test_walk_bounds_are_one_line(tmp_path, limit, value, said):
    rules = tmp_path / "limits.toml"
    rules.write_text(f"[limits]\n{limit} = {value}\n")
    res = run_cli("analyze", str(QWEN3), "--rules", str(rules))
    assert_one_line_error(res, str(QWEN3), said, "[limits]")


def test_folders_deeper_than_the_walk_goes_are_said(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    one_rank(deep)
    one_rank(tmp_path / "x")
    rules = tmp_path / "limits.toml"
    rules.write_text("[limits]\nmax_depth = 2\n")
    report = profan.analyze(tmp_path, rules=[rules])
    assert [r["path"] for r in report.source["ranks"]] == ["x/rank_0_ascend_pt"]
    assert any(
        w.startswith("did not walk 1 folder(s) more than 2 levels down") and "a/b/c" in w for w in report.warnings
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[limits]\nmax_rank = 3\n", "[limits] has no setting 'max_rank'"),
        ("[limits]\nmax_ranks = -1\n", "max_ranks must be a whole number"),
        ("limits = 3\n", "[limits] must be a table"),
    ],
)
def test_a_misspelled_or_bad_limit_is_refused(tmp_path, text, said):
    rules = tmp_path / "limits.toml"
    rules.write_text(text)
    assert_one_line_error(run_cli("analyze", str(QWEN3), "--rules", str(rules)), str(rules), said)


def test_rank_ids_no_profiler_writes_are_no_rank_ids(tmp_path):
    rank = one_rank(tmp_path)
    info = next(rank.glob("profiler_info_*.json"))
    huge = rank / f"profiler_info_{'9' * 30}.json"
    info.rename(huge)
    huge.write_text("[" * 100_000 + "]" * 100_000)  # nested past any parser's depth
    report = profan.analyze(tmp_path)
    (r,) = report.source["ranks"]
    assert r["rank"] == 0 and r["rank_origin"] == "folder name rank_0_ascend_pt"


def test_control_characters_in_names_reach_the_terminal_escaped(tmp_path):
    bad = tmp_path / "run\x1b]0;pwn\x07\x1b[2J"
    bad.mkdir()
    res = run_cli("analyze", str(bad))
    assert_one_line_error(res, "\\x1b]0;pwn\\x07\\x1b[2J", "no profiler output found")
    assert "\x1b" not in res.stderr


def test_a_crafted_report_of_the_wrong_types_is_one_line(tmp_path):
    out = tmp_path / "r.json"
    doc = _report(QWEN3, out)
    _, ev = _lines_finding(doc)
    for mutate, said in [
        (lambda d: d["source"]["file_bytes"].__setitem__(ev["file"], "big"), "not a byte count"),
        (lambda d: d["source"].__setitem__("root_abs", ["x"]), "pass --root DIR"),
        (lambda d: d.__setitem__("findings", {"F1": 1}), "not a profan JSON report"),
        (lambda d: d["findings"][0]["evidence"][0].__setitem__("lines", "12"), "not a profan JSON report"),
    ]:
        d = json.loads(json.dumps(doc))
        mutate(d)
        out.write_text(json.dumps(d))
        res = run_cli("evidence", str(out), d["findings"][0]["id"] if isinstance(d["findings"], list) else "F1")
        assert_one_line_error(res, said)


@pytest.mark.parametrize("fmt", ["html", "xlsx"])
def test_nothing_is_written_unasked(tmp_path, fmt):
    """A file format without -o is refused, not written to ./report.html behind the user's back."""
    assert_one_line_error(run_cli("analyze", str(QWEN3), "-f", fmt, cwd=tmp_path), "name it with -o")
    assert_one_line_error(run_cli("compare", str(QWEN3), "--ranks", "0,2", "-f", fmt, cwd=tmp_path), "name it with -o")
    assert list(tmp_path.iterdir()) == []
