"""Hostile text, round 2, built from the real samples: NaN / Infinity literals in every numeric column of the
Ascend CSVs and in communication.json, a UTF-8 byte-order mark on every CSV, file and folder names that are no
UTF-8, a ``--rules`` TOML nested 100,000 deep, and a stdout that cannot encode profan's own ``·``. Each is analysed
with the bad values skipped and counted (or the name escaped), or refused in one line: never an internal error."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ASCEND, QWEN3, ROOT, assert_one_line_error, one_rank, run_cli

OUT = "ASCEND_PROFILER_OUTPUT"
NAN_WORD = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def _rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def _is_number(cell: str) -> bool:
    try:
        float(cell.strip(' \t"'))
    except ValueError:
        return False
    return True


def _nan_every_numeric_column(path: Path) -> dict[str, int]:
    """Each column that holds numbers gets ``NaN`` in one data row of its own (column k: row 3k); returns
    column name -> the changed row's index among the data rows."""
    rows = _rows(path)
    header, data = rows[0], rows[1:]
    numeric = [j for j, _ in enumerate(header) if all(j < len(r) and _is_number(r[j]) for r in data[:5])]
    changed = {}
    for k, j in enumerate(numeric):
        i = (3 * k) % len(data)
        data[i][j] = "NaN"
        changed[header[j].strip()] = i
    _write_rows(path, [header, *data])
    return changed


def _report(tmp_path: Path, target: Path, fmt: str, name: str = "r") -> str:
    out = tmp_path / f"{name}.{fmt}"
    res = run_cli("analyze", str(target), "-q", "-f", fmt, "-o", str(out))
    assert res.returncode == 0, res.stderr
    return out.read_text(encoding="utf-8")


def test_nan_in_every_numeric_column_is_skipped_and_counted(tmp_path):
    """kernel_details.csv and op_statistic.csv with NaN in every numeric column (a row each): the rows whose
    duration, step or time profan sums hold NaN are skipped and counted, the kernel total is the file's without
    them, and no ``nan`` reaches the Markdown (its warnings aside)."""
    base = json.loads(_report(tmp_path, QWEN3 / "rank_0_ascend_pt", "json", "base"))
    rank = one_rank(tmp_path)
    kd, opstat = rank / OUT / "kernel_details.csv", rank / OUT / "op_statistic.csv"
    original = _rows(kd)[1:]
    kd_nan, op_nan = _nan_every_numeric_column(kd), _nan_every_numeric_column(opstat)
    assert {"Duration(us)", "Step Id", "Start Time(us)", "Block Dim"} <= set(kd_nan) and len(op_nan) == 7
    doc = json.loads(_report(tmp_path, rank, "json"))
    skipped = doc["source"]["ranks"][0]["rows_skipped"]
    at = [h.strip() for h in _rows(QWEN3 / "rank_0_ascend_pt" / OUT / "kernel_details.csv")[0]].index("Duration(us)")
    lost = sum(float(original[kd_nan[c]][at]) for c in ("Duration(us)", "Step Id"))
    assert skipped["kernel_details"] == 2 and skipped["op_statistic"] == 2  # Count and Total Time(us)
    assert any("kernel_details.csv: skipped 2 of 2463" in w for w in doc["warnings"]), doc["warnings"]
    assert any("op_statistic.csv: skipped 2 of 35" in w for w in doc["warnings"]), doc["warnings"]
    total = sum(r["time_us"] for r in doc["breakdown"])
    assert total == pytest.approx(sum(r["time_us"] for r in base["breakdown"]) - lost, rel=1e-9)
    md = _report(tmp_path, rank, "md")
    shown = [line for line in md.splitlines() if NAN_WORD.search(line) and "skipped" not in line]
    assert not shown, shown[:5]


def test_nan_in_step_trace_time_is_skipped_and_counted(tmp_path):
    """step_trace_time.csv of the 2-rank AlexNet capture with NaN in one of its numbers per rank: that step row
    is skipped and counted, none shows as nan."""
    src = ASCEND / "msinsight-alexnet-2rank-2025" / "level0"
    root = Path(shutil.copytree(src, tmp_path / "data"))
    for rank in (0, 1):
        path = root / f"rank{rank}_ascend_pt" / OUT / "step_trace_time.csv"
        rows = _rows(path)
        rows[1][2 + rank] = "NaN"  # Computing on rank 0, Communication(Not Overlapped) on rank 1
        _write_rows(path, rows)
    doc = json.loads(_report(tmp_path, root, "json"))
    said = [w for w in doc["warnings"] if "step_trace_time.csv: skipped 1 of" in w]
    assert len(said) == 2, doc["warnings"]
    md = _report(tmp_path, root, "md")
    assert not [line for line in md.splitlines() if NAN_WORD.search(line) and "skipped" not in line]


def test_nan_and_infinity_in_communication_json_fields_are_skipped_and_counted(tmp_path):
    """NaN / Infinity literals as the transit time and bandwidth of some ops (the elapse time is another class):
    those ops are skipped and counted in a warning naming communication.json, and none reaches the report."""
    rank = one_rank(tmp_path)
    path = rank / OUT / "communication.json"
    doc = json.loads(path.read_text())
    ops = [(step, sec, op) for step, body in doc.items() for sec in body for op in body[sec] if op != "Total Op Info"]
    hit = ops[::4]
    text = path.read_text()
    for k, (step, sec, op) in enumerate(hit):
        doc[step][sec][op]["Communication Time Info"]["Transit Time(ms)"] = f"@@{k}@@"
    text = json.dumps(doc)
    for k in range(len(hit)):
        text = text.replace(f'"@@{k}@@"', ("NaN", "Infinity", "-Infinity")[k % 3])
    path.write_text(text)
    rep = json.loads(_report(tmp_path, rank, "json"))
    said = [w for w in rep["warnings"] if "communication.json" in w and f"skipped {len(hit)} of {len(ops)}" in w]
    assert said, rep["warnings"]
    md = _report(tmp_path, rank, "md")
    assert not [line for line in md.splitlines() if NAN_WORD.search(line) and "skipped" not in line]


def _same_reports(a: dict, b: dict, roots: tuple[Path, Path]) -> None:
    """Two JSON reports equal but for their timings, roots and file sizes (a BOM is 3 bytes more)."""
    texts = []
    for doc, root in zip((a, b), roots, strict=True):
        doc["meta"].pop("timings_s", None)
        for key in ("root", "root_abs", "root_seal", "file_bytes"):
            doc["source"].pop(key, None)
        texts.append(json.dumps(doc, sort_keys=True).replace(str(root), "ROOT"))
    assert texts[0] == texts[1]


@pytest.mark.parametrize(
    "capture", ["msinsight-qwen3-4rank-2025q4/rank_0_ascend_pt", "msinsight-alexnet-2rank-2025/level0"]
)
def test_a_bom_on_every_csv_gives_the_same_report(tmp_path, capture):
    """Every CSV of a real capture (kernel, step, op statistic, memory files) with a UTF-8 BOM prepended: the
    JSON report equals the one without, rows-read and skipped counts included."""
    src = ASCEND / capture
    plain = Path(shutil.copytree(src, tmp_path / "a" / src.name))
    marked = Path(shutil.copytree(src, tmp_path / "b" / src.name))
    csvs = sorted(marked.rglob("*.csv"))
    assert len(csvs) >= 3
    for p in csvs:
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    docs = [json.loads(_report(tmp_path, d, "json", name)) for d, name in ((plain, "a"), (marked, "b"))]
    assert docs[0]["source"]["ranks"][0].get("rows_read")
    _same_reports(*docs, roots=(plain, marked))


def _non_utf8_rank(tmp_path: Path) -> tuple[Path, bytes]:
    """A folder with Qwen3 rank 2 as is and rank 0 under a name of bytes that are no UTF-8."""
    root = tmp_path / "data"
    root.mkdir()
    shutil.copytree(QWEN3 / "rank_2_ascend_pt", root / "rank_2_ascend_pt")
    bad = b"rank_0_\xff\xfe_ascend_pt"
    shutil.copytree(QWEN3 / "rank_0_ascend_pt", os.fsdecode(os.fsencode(root) + b"/" + bad))
    return root, bad


@pytest.mark.parametrize("fmt", ["json", "md", "html", "xlsx"])
def test_a_rank_folder_name_that_is_no_utf8_is_skipped_and_said(tmp_path, fmt):
    root, _ = _non_utf8_rank(tmp_path)
    out = tmp_path / f"r.{fmt}"
    res = run_cli("analyze", str(root), "-q", "-f", fmt, "-o", str(out))
    assert res.returncode == 0, res.stderr
    if fmt != "json":
        res = run_cli("analyze", str(root), "-q", "-f", "json", "-o", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert [r["rank"] for r in doc["source"]["ranks"]] == [2]
    said = [w for w in doc["warnings"] if "not valid UTF-8" in w]
    assert len(said) == 1 and "skipped 1 " in said[0] and "rank_0_\\xff\\xfe_ascend_pt" in said[0], doc["warnings"]


def test_a_path_that_is_no_utf8_is_one_line(tmp_path):
    _, bad = _non_utf8_rank(tmp_path)
    named = os.fsdecode(os.fsencode(tmp_path / "data") + b"/" + bad)
    res = run_cli("analyze", named, "-q", "-f", "json", "-o", str(tmp_path / "r.json"))
    assert_one_line_error(res, "rank_0_\\xff\\xfe_ascend_pt", "not valid UTF-8")


@pytest.mark.parametrize("option", ["--rules", "--hardware"])
@pytest.mark.parametrize(
    "body", ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "{b = " * 100_000 + "1" + "}" * 100_000]
)
def test_a_toml_nested_100000_deep_is_one_line(tmp_path, option, body):
    path = tmp_path / "deep.toml"
    path.write_text(body + "\n")
    res = run_cli("analyze", str(QWEN3), "-q", option, str(path), "-o", str(tmp_path / "r.md"))
    assert_one_line_error(res, "deep.toml", "nested deeper than the TOML reader takes")


def _run_piped(fmt: str, env: dict[str, str]) -> bytes:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_ALL")}
    cmd = [sys.executable, "-m", "profan", "analyze", str(QWEN3), "-f", fmt]
    res = subprocess.run(cmd, cwd=ROOT, env={**full, **env}, capture_output=True, timeout=300)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return res.stdout


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_a_stdout_that_is_not_utf8_gets_escapes(fmt):
    """profan writing to a pipe whose encoding is ASCII (``PYTHONIOENCODING=ascii``), or under ``LANG=C``: the
    report arrives, what ASCII cannot hold escaped as ``\\u00b7`` (JSON stays JSON, with the same content as on
    a UTF-8 pipe), never an internal error on profan's own ``·``."""
    plain = _run_piped(fmt, {"PYTHONIOENCODING": "utf-8"}).decode("utf-8")
    ascii_text = _run_piped(fmt, {"PYTHONIOENCODING": "ascii"}).decode("ascii")
    c_locale = _run_piped(fmt, {"LANG": "C", "LC_ALL": "C"}).decode("ascii", "backslashreplace")
    if fmt == "json":
        docs = [json.loads(t) for t in (plain, ascii_text)]
        for d in docs:
            d["meta"].pop("timings_s", None)
        assert docs[0] == docs[1] and "×" in json.dumps(docs[0], ensure_ascii=False)
    else:
        assert "C1 \\u00b7 Pipeline stage 1" in ascii_text and "C1 · Pipeline stage 1" in plain
        assert "C1 " in c_locale and "Pipeline stage 1" in c_locale
