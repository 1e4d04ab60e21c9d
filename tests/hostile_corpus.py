"""A hostile corpus of our own: the real fixtures mutated into inputs that try to make profan crash (exit 3 or a
traceback), hang, eat memory, read outside the analysed folder, write outside its output, or sum what is no
measurement.

Each class is one function ``make_<class>(dst) -> Case``. ``dst`` is a fresh, empty folder owned by the case
(``hostile/test_hostile_corpus.py`` passes ``<tmp>/<class>/case``); the builder writes the data under ``dst/data``,
outputs go to ``dst/out``, and a *canary* folder beside the case (``<tmp>/<class>/case.canary``, outside ``dst``)
holds a random secret: plain (``secret.txt``) and dressed as profiler data (a kernel file, a rank folder, a trace
whose kernel names are the secret), so that following a link out of the data would put the secret in the report.

A ``Case`` lists the commands to run (``Step``: the arguments after ``profan``, the files the run may write, the
exit codes allowed and checks on the result) and what an attacker changes between two runs (``Step.before``). The
runner (the test) adds the checks every class shares: exit 0 or 2, one ``profan: error:`` line on 2, no traceback,
no hang, bounded memory, no secret in any output, nothing written but the named outputs.

The builders never run profan: what a check expects (a skipped-row count, a total) is computed here from the raw
mutated file, with a reference parser that does not share code with profan.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import secrets
import shutil
import stat
import statistics
import threading
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
QWEN3 = FIXTURES / "ascend" / "msinsight-qwen3-4rank-2025q4"
QWEN_R0 = QWEN3 / "rank_0_ascend_pt"
QWEN_R2 = QWEN3 / "rank_2_ascend_pt"  # ranks 1 and 3 of the sample have no kernel_details.csv
GPT3_R1 = FIXTURES / "ascend" / "msinsight-gpt3-2rank-2023" / "test_rank_1"
NCCL_GZ = FIXTURES / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz"
DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"
DLRM4 = DLRM / "worker4_step_12.1694128201547.pt.trace.json"
DLRM5 = DLRM / "worker5_step_12.1694128201549.pt.trace.json"
OUT = "ASCEND_PROFILER_OUTPUT"
KD = f"{OUT}/kernel_details.csv"
MAX_DURATION_US = 86400e6  # rules/limits.toml max_duration_us: one day


# ------------------------------------------------------------------------------------------------ the model


@dataclass
class Result:
    """What one run of ``profan`` gave (filled in by the runner)."""

    case: Case
    step: Step
    args: list[str]
    rc: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float
    maxrss_kb: int

    @property
    def error_line(self) -> str:
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        return lines[0] if len(lines) == 1 else ""

    def report(self) -> dict[str, Any] | None:
        """The JSON report this run wrote (``Step.report``), if it did."""
        if self.step.report is None or not self.step.report.is_file():
            return None
        try:
            doc = json.loads(self.step.report.read_text(encoding="utf-8"))
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def warnings(self) -> list[str]:
        doc = self.report() or {}
        w = doc.get("warnings")
        return [str(x) for x in w] if isinstance(w, list) else []


Check = Callable[[Result], None]


@dataclass
class Step:
    """One ``profan`` command. ``args`` may be a function, evaluated just before the run (it may read what an
    earlier step wrote, e.g. the id of a finding). ``outputs``: files the run may create or change (the ``-o``
    file; their missing parent folders may appear too). ``before``: what the attacker changes before this run."""

    args: list[str] | Callable[[], list[str]]
    outputs: tuple[Path, ...] = ()
    report: Path | None = None  # a JSON report the run writes, for the checks
    rc: tuple[int, ...] = (0, 2)
    checks: list[Check] = field(default_factory=list)
    before: Callable[[], None] | None = None


@dataclass
class Case:
    name: str
    builds: str  # what the builder made
    expect: str  # what profan must do with it (beyond the shared checks)
    root: Path  # the case folder (dst): nothing in it may change but the steps' outputs
    canary: Path  # outside root: must never be read into an output, never change
    secret: str
    steps: list[Step]
    cache_dir: Path | None = None  # PROFAN_CACHE_DIR inside root (excluded from the write check); else private
    forbidden: tuple[str, ...] = ()  # more text that must never appear in an output (e.g. /etc/passwd's first line)
    wrapper: tuple[str, ...] = ()  # a command prefix (e.g. setpriv dropping root's permission override)
    skip: str | None = None
    cleanup: Callable[[], None] | None = None


# ------------------------------------------------------------------------------------------------ checks


def _fail(res: Result, what: str) -> None:
    raise AssertionError(f"{res.case.name}: {what} (rc={res.rc}, stderr={res.stderr.strip()[-300:]!r})")


def rc_is(*codes: int) -> Check:
    def check(res: Result) -> None:
        if res.rc not in codes:
            _fail(res, f"exit code should be one of {codes}")

    return check


def error_names(*needles: str) -> Check:
    """On exit 2, the one line names every needle."""

    def check(res: Result) -> None:
        if res.rc == 2:
            missing = [n for n in needles if n not in res.error_line]
            if missing:
                _fail(res, f"the error line does not name {missing}: {res.error_line!r}")

    return check


def said(*needles: str) -> Check:
    """The problem is said: on exit 2 the one line names every needle; on exit 0 one warning of the JSON report
    names every needle (something was skipped or ignored, and the report must say so)."""

    def check(res: Result) -> None:
        if res.rc == 2:
            error_names(*needles)(res)
        elif res.rc == 0:
            if res.report() is None:
                _fail(res, "exit 0 but no JSON report was written")
            if not any(all(n in w for n in needles) for w in res.warnings()):
                _fail(res, f"exit 0 but no warning names {list(needles)}; warnings: {res.warnings()[:8]}")

    return check


def said_any(words: Sequence[str]) -> Check:
    """Like `said`, but one of ``words`` is enough."""

    def check(res: Result) -> None:
        texts = [res.error_line] if res.rc == 2 else res.warnings() if res.rc == 0 else []
        if res.rc in (0, 2) and not any(w in t for t in texts for w in words):
            _fail(
                res,
                f"neither the error line nor a warning says any of {list(words)}: "
                f"{res.error_line or res.warnings()[:8]}",
            )

    return check


def breakdown_total(expected: float, tol: float = 1e-3) -> Check:
    """On exit 0, the report's breakdown sums to ``expected`` µs (the reference parser's sum of the raw file)."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        doc = res.report()
        rows = (doc or {}).get("breakdown") or []
        got = sum(float(r.get("time_us") or 0) for r in rows if isinstance(r, dict))
        if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=tol):
            _fail(res, f"breakdown total {got!r} µs, the raw file's usable rows sum to {expected!r} µs")

    return check


def skipped_rows(logical: str, fname: str, n: int, total: int) -> Check:
    """On exit 0: rows_skipped[logical] == n and a warning says 'skipped n of total' naming the file."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        doc = res.report() or {}
        ranks = (doc.get("source") or {}).get("ranks") or [{}]
        got = (ranks[0].get("rows_skipped") or {}).get(logical, 0)
        if got != n:
            _fail(res, f"rows_skipped[{logical}] is {got}, the raw file has {n} rows that are no duration")
        if not any(f"skipped {n} of {total}" in w and fname in w for w in res.warnings()):
            _fail(res, f"no warning says 'skipped {n} of {total}' for {fname}: {res.warnings()[:8]}")

    return check


def skipped_events(n: int) -> Check:
    def check(res: Result) -> None:
        if res.rc != 0:
            return
        doc = res.report() or {}
        ranks = (doc.get("source") or {}).get("ranks") or [{}]
        got = (ranks[0].get("rows_skipped") or {}).get("kineto_trace", 0)
        if got != n:
            _fail(res, f"rows_skipped[kineto_trace] is {got}; {n} kernel events carry no usable duration")

    return check


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


# ------------------------------------------------------------------------------------------------ building


class _Build:
    """A fresh case folder: data/, out/, and the canary beside it."""

    def __init__(self, dst: Path) -> None:
        self.dst = dst
        dst.mkdir(parents=True, exist_ok=True)
        self.data = dst / "data"
        self.data.mkdir()
        self.out = dst / "out"
        self.out.mkdir()
        self.canary = dst.parent / f"{dst.name}.canary"
        self.canary.mkdir()
        self.secret = "CANARY" + secrets.token_hex(12)
        (self.canary / "secret.txt").write_text(f"{self.secret}\n" * 4)

    # -- inputs
    def qwen(self, name: str = "rank_0_ascend_pt", src: Path = QWEN_R0, parent: Path | None = None) -> Path:
        return Path(shutil.copytree(src, (parent or self.data) / name))

    def dlrm(self, name: str = DLRM4.name, src: Path = DLRM4) -> Path:
        dst = self.data / name
        shutil.copyfile(src, dst)
        return dst

    def canary_kernels(self, name: str = "kernel_details.csv") -> Path:
        """The real Qwen3 kernel file with every kernel name the secret: read through a link, it shows."""
        header, rows = kernel_rows(QWEN_R0 / KD)
        out = self.canary / name
        out.write_text(header + "".join(set_cells(r, {5: self.secret}) for r in rows))
        return out

    def canary_rank(self, name: str) -> Path:
        rank = Path(shutil.copytree(QWEN_R2, self.canary / name))
        header, rows = kernel_rows(rank / KD)
        (rank / KD).write_text(header + "".join(set_cells(r, {5: self.secret}) for r in rows))
        return rank

    def canary_trace(self, name: str) -> Path:
        doc = json.loads(DLRM5.read_text())
        for e in doc["traceEvents"]:
            if isinstance(e, dict) and e.get("cat") == "kernel":
                e["name"] = self.secret
        out = self.canary / name
        out.write_text(json.dumps(doc))
        return out

    # -- commands
    def analyze(
        self,
        target: Path | None = None,
        *extra: str,
        fmt: str = "json",
        out: Path | None = None,
        checks: Sequence[Check] = (),
        rc: tuple[int, ...] = (0, 2),
        before: Callable[[], None] | None = None,
    ) -> Step:
        out = out or self.out / f"report.{fmt}"
        return Step(
            ["analyze", str(target or self.data), "-q", "-f", fmt, "-o", str(out), *extra],
            outputs=(out,),
            report=out if fmt == "json" else None,
            rc=rc,
            checks=list(checks),
            before=before,
        )

    def case(self, name: str, builds: str, expect: str, steps: list[Step], **kw: Any) -> Case:
        return Case(
            name=name,
            builds=builds,
            expect=expect,
            root=self.dst,
            canary=self.canary,
            secret=self.secret,
            steps=steps,
            **kw,
        )


def kernel_rows(path: Path) -> tuple[str, list[str]]:
    """(header line, data lines) of a kernel file, line ends kept."""
    header, *rows = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return header, rows


def set_cells(line: str, cells: dict[int, str]) -> str:
    """A Qwen3 kernel row with cells replaced by index. The first 11 cells of those rows hold no quoted commas
    (Name is 5, Type 6, Start 9, Duration 10), so splitting there is exact; a value is CSV-quoted when needed."""
    parts = line.split(",", 11)
    for i, v in cells.items():
        parts[i] = csv_quote(v)
    return ",".join(parts)


def csv_quote(value: str) -> str:
    if any(c in value for c in ',"\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


_PLAIN_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)


def ref_duration(cell: str) -> float | None:
    """The reference reading of a duration cell: a plain ASCII number (after the blanks, TAB and quotes the
    profiler writes around it) that is finite, 0 or more and at most one day. Independent of profan's code."""
    s = cell.strip(' \t\r\n"')
    # float() also takes "1_0", non-ASCII digits and inner blanks such as VT or FS; no CSV number does
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    v = float(s)
    return v if math.isfinite(v) and 0 <= v <= MAX_DURATION_US else None


def raw_durations(path: Path) -> list[str]:
    """The Duration(us) cell of every data row, read with the csv module."""
    csv.field_size_limit(1 << 30)  # a kernel name of 1 MiB is one of the classes
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader)]
        idx = header.index("Duration(us)")
        return [row[idx] if idx < len(row) else "" for row in reader if any(c.strip() for c in row)]


def raw_total(path: Path) -> float:
    return sum(v for v in map(ref_duration, raw_durations(path)) if v is not None)


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def _mkfifo(path: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)


_BOMB: bytes | None = None


def gzip_bomb() -> bytes:
    """A gzip stream of a Kineto head, 300 MiB of blanks and the tail: valid JSON, ~300 KB on disk (1000x).
    Built once per process by streaming zlib (well under a second)."""
    global _BOMB
    if _BOMB is None:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [c.compress(b'{"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": [')]
        blank = b" " * (1 << 20)
        parts += [c.compress(blank) for _ in range(300)]
        parts += [c.compress(b"]}"), c.flush()]
        _BOMB = b"".join(parts)
    return _BOMB


def first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().strip()
    except OSError:
        return ""


def kernel_finding_args(report: Path, file_suffix: str, *extra: str) -> Callable[[], list[str]]:
    """``evidence REPORT F<n>`` for the first finding citing a file ending in ``file_suffix`` (decided at run
    time, from the report an earlier step wrote)."""

    def args() -> list[str]:
        doc = json.loads(report.read_text(encoding="utf-8"))
        fid = next(
            f["id"]
            for f in doc["findings"]
            if any(str(e.get("file", "")).endswith(file_suffix) and e.get("lines") for e in f["evidence"])
        )
        return ["evidence", str(report), fid, *extra]

    return args


def _valid_report(
    data: Path,
    rel: str,
    *,
    root: str | None = None,
    lines: Sequence[int] = (2,),
    file_bytes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A small, valid profan.report/2 document with one finding citing ``rel`` (relative to ``root``)."""
    root = root if root is not None else str(data)
    return {
        "schema": "profan.report/2",
        "source": {
            "root": root,
            "root_abs": root,
            "format": "ascend",
            "ranks": [],
            **({"file_bytes": file_bytes} if file_bytes is not None else {}),
        },
        "breakdown": [],
        "findings": [
            {
                "id": "F1",
                "check": "step-breakdown",
                "severity": "info",
                "title": "t",
                "message": "m",
                "rank": 0,
                "step": 13,
                "metrics": {},
                "evidence": [
                    {"file": rel, "lines": list(lines), "row_count": len(lines), "truncated": False, "select": {}}
                ],
            }
        ],
        "warnings": [],
        "notes": [],
        "meta": {},
        "tables": {},
    }


# ================================================================================================ the classes
# -- truncated and compressed input


def make_truncated_json_trace(dst: Path) -> Case:
    b = _Build(dst)
    f = b.dlrm()
    f.write_bytes(DLRM4.read_bytes()[: DLRM4.stat().st_size // 2])
    return b.case(
        "truncated_json_trace",
        "a real Kineto trace (dlrm worker4) cut at half its bytes",
        "exit 2 naming the trace, or the rank skipped with a warning naming it",
        [b.analyze(checks=[said("worker4_step_12")])],
    )


def make_truncated_gzip_trailer(dst: Path) -> Case:
    b = _Build(dst)
    (b.data / NCCL_GZ.name).write_bytes(NCCL_GZ.read_bytes()[:-8])
    return b.case(
        "truncated_gzip_trailer",
        "the real nccl_data.json.gz without its 8-byte gzip trailer",
        "exit 2 naming the file, or read (the deflate stream is whole) — never exit 3",
        [b.analyze(checks=[error_names(NCCL_GZ.name)])],
    )


def make_half_json_gz(dst: Path) -> Case:
    b = _Build(dst)
    raw = NCCL_GZ.read_bytes()
    (b.data / NCCL_GZ.name).write_bytes(raw[: len(raw) // 2])
    return b.case(
        "half_json_gz",
        "the first half of the real nccl_data.json.gz",
        "exit 2 naming nccl_data.json.gz, or the rank skipped with a warning naming it",
        [b.analyze(checks=[said(NCCL_GZ.name)])],
    )


def make_gzip_bomb(dst: Path) -> Case:
    b = _Build(dst)
    (b.data / "bomb.pt.trace.json.gz").write_bytes(gzip_bomb())
    return b.case(
        "gzip_bomb",
        "a .json.gz of ~300 KB inflating to 300 MiB (a Kineto head, blanks, the tail)",
        "refused as a decompression bomb (ratio > max_inflate_ratio past 64 MiB): exit 2 naming the "
        "file, or skipped with a warning; peak RSS < 1 GB",
        [b.analyze(checks=[said("bomb.pt.trace.json.gz")])],
    )


def make_gzip_isize_4gb(dst: Path) -> Case:
    b = _Build(dst)
    raw = bytearray(NCCL_GZ.read_bytes())
    raw[-4:] = (0xFFFFFFFF).to_bytes(4, "little")
    (b.data / NCCL_GZ.name).write_bytes(bytes(raw))
    return b.case(
        "gzip_isize_4gb",
        "the real nccl_data.json.gz whose trailer claims 4 GiB inflated",
        "no allocation from the claim (RSS < 1 GB); read, or exit 2 naming the file",
        [b.analyze(checks=[error_names(NCCL_GZ.name)])],
    )


def make_gz_not_gzip(dst: Path) -> Case:
    b = _Build(dst)
    shutil.copyfile(DLRM4, b.data / "worker4.pt.trace.json.gz")
    return b.case(
        "gz_not_gzip",
        "a plain-text Kineto trace named worker4.pt.trace.json.gz",
        "exit 2 naming the file, or read as plain JSON / skipped with a warning",
        [b.analyze(checks=[error_names("worker4.pt.trace.json.gz")])],
    )


# -- sizes that cost


def make_csv_line_80mb(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    with open(rank / KD, "w", encoding="utf-8") as fh:
        fh.write(header + rows[0])
        fh.write(set_cells(rows[1], {5: "A" * (80 << 20)}))
        fh.writelines(rows[2:])
    rules = b.dst / "limits.toml"
    rules.write_text("[limits]\nmax_line_bytes = 1048576\n")
    return b.case(
        "csv_line_80mb",
        "kernel_details.csv whose 3rd line is 80 MiB (a kernel name); --rules sets [limits] max_line_bytes = 1 MiB",
        "the bound is said: exit 2 naming kernel_details.csv, or the line skipped with a warning; RSS < 1 GB",
        [b.analyze(None, "--rules", str(rules), checks=[said("kernel_details.csv")])],
    )


def make_whitespace_100mb_json(dst: Path) -> Case:
    b = _Build(dst)
    text = DLRM4.read_text()
    at = re.compile(r'\{\s*"ph"').search(text, text.index('"traceEvents"')).start()
    with open(b.data / DLRM4.name, "w", encoding="utf-8") as fh:
        fh.write(text[:at])
        blank = " " * (1 << 20)
        for _ in range(100):
            fh.write(blank)
        fh.write(text[at:])
    return b.case(
        "whitespace_100mb_json",
        "the dlrm worker4 trace with 100 MiB of blanks inside its event array (still valid JSON)",
        "read (exit 0) or exit 2 naming the file; RSS < 1 GB",
        [b.analyze(checks=[error_names("worker4_step_12")])],
    )


def make_kernel_name_1mb(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    rows[3] = set_cells(rows[3], {5: "K" * (1 << 20)})
    (rank / KD).write_text(header + "".join(rows))
    total = raw_total(rank / KD)
    return b.case(
        "kernel_name_1mb",
        "one kernel name of 1 MiB in kernel_details.csv",
        "exit 0 (below max_line_bytes) with every row summed",
        [b.analyze(rc=(0,), checks=[breakdown_total(total)])],
    )


# -- things that are no regular file


def make_fifo_trace_json(dst: Path) -> Case:
    b = _Build(dst)
    b.dlrm()
    _mkfifo(b.data / "trace.json")
    return b.case(
        "fifo_trace_json",
        "a FIFO named trace.json beside a real Kineto trace",
        "no hang (nobody writes the FIFO): the FIFO is never opened for reading; exit 0 or 2 naming it",
        [b.analyze(checks=[error_names("trace.json")])],
    )


def make_fifo_kernel_details(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    _mkfifo(rank / KD)
    return b.case(
        "fifo_kernel_details",
        "a FIFO named kernel_details.csv in a real rank",
        "no hang; said: exit 2 naming kernel_details.csv, or a warning naming it",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def make_symlink_to_dev_zero(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).unlink()
    (rank / KD).symlink_to("/dev/zero")
    return b.case(
        "symlink_to_dev_zero",
        "kernel_details.csv -> /dev/zero (endless, outside the data)",
        "no hang, no unbounded read (RSS < 1 GB); said: exit 2 or a warning naming kernel_details.csv",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def make_symlink_loop(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).unlink()
    (rank / KD).symlink_to("kernel_details.csv")
    return b.case(
        "symlink_loop",
        "kernel_details.csv is a symlink to itself (ELOOP)",
        "said: exit 2 or a warning naming kernel_details.csv",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def make_dangling_symlink(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).unlink()
    (rank / KD).symlink_to(b.data / "gone.csv")
    return b.case(
        "dangling_symlink",
        "kernel_details.csv is a symlink to a file that does not exist",
        "said: exit 2 or a warning naming kernel_details.csv",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def make_dir_as_file_ascend(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    for name in ("kernel_details.csv", "communication.json"):
        (rank / OUT / name).unlink()
        (rank / OUT / name).mkdir()
    return b.case(
        "dir_as_file_ascend",
        "kernel_details.csv and communication.json are folders",
        "each said (exit 2 naming one, or a warning per folder)",
        [b.analyze(checks=[said("kernel_details.csv"), said("communication.json")])],
    )


def make_dir_as_trace(dst: Path) -> Case:
    b = _Build(dst)
    b.dlrm()
    (b.data / DLRM5.name).mkdir()
    (b.data / DLRM5.name / "notes.txt").write_text("a folder named like a trace\n")
    return b.case(
        "dir_as_trace",
        "a folder named worker5_…pt.trace.json beside a real trace",
        "exit 0 (the folder holds no trace) or exit 2 naming it",
        [b.analyze(checks=[error_names("worker5_step_12")])],
    )


def make_permission_denied(dst: Path) -> Case:
    """chmod 000 does not stop root: as root the command runs under ``setpriv`` (`_as_user`), so the kernel refuses
    the read as it would for a user; without setpriv the class is skipped with that reason."""
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).chmod(0)
    wrapper, skip = _as_user()
    return b.case(
        "permission_denied",
        "kernel_details.csv with mode 000 (read refused by the kernel)",
        "said: exit 2 or a warning naming kernel_details.csv",
        [b.analyze(checks=[said("kernel_details.csv")])],
        wrapper=wrapper,
        skip=skip,
        cleanup=lambda: (rank / KD).chmod(0o644),
    )


# -- reads outside the folder


def make_symlink_kernel_details_outside(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).unlink()
    (rank / KD).symlink_to(b.canary_kernels())
    return b.case(
        "symlink_kernel_details_outside",
        "kernel_details.csv -> a kernel file outside the data whose kernel names are the secret",
        "the link is not followed out of the data (no secret in any "
        "output) and that is said (exit 2 or a warning naming kernel_details.csv)",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def make_symlink_rank_dir_outside(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    (b.data / "rank_2_ascend_pt").symlink_to(b.canary_rank("rank_2_ascend_pt"), target_is_directory=True)
    return b.case(
        "symlink_rank_dir_outside",
        "rank_2_ascend_pt -> a rank folder outside the data (kernel names = the secret) beside a real rank 0",
        "not followed (no secret); the skipped rank folder is said (exit 2 or a warning naming rank_2_ascend_pt)",
        [b.analyze(checks=[said("rank_2_ascend_pt")])],
    )


def make_symlink_trace_outside(dst: Path) -> Case:
    b = _Build(dst)
    b.dlrm()
    (b.data / DLRM5.name).symlink_to(b.canary_trace(DLRM5.name))
    return b.case(
        "symlink_trace_outside",
        "worker5_….pt.trace.json -> a trace outside the data (kernel names = the secret) beside the real worker4 trace",
        "not followed (no secret); said (exit 2 or a warning naming worker5_step_12)",
        [b.analyze(checks=[said("worker5_step_12")])],
    )


def make_hardlink_inside(dst: Path) -> Case:
    """A hard link is the same file under two names: nothing tells a link to a file outside the data from a file
    of the data (and Linux's protected_hardlinks only lets one link files one may read anyway), so the class
    checks that a hard-linked profiler file is read like any other, not refused."""
    b = _Build(dst)
    r0 = b.qwen()
    r1 = b.qwen("rank_2_ascend_pt", QWEN_R2)
    spare = b.data / "spare_kernel_details.csv"
    shutil.copyfile(QWEN_R2 / KD, spare)
    (r1 / KD).unlink()
    os.link(spare, r1 / KD)
    total = raw_total(r0 / KD) + raw_total(r1 / KD)
    return b.case(
        "hardlink_inside",
        "rank 2's kernel_details.csv is a hard link to another file of the data",
        "exit 0, both ranks summed",
        [b.analyze(rc=(0,), checks=[breakdown_total(total)])],
    )


def make_report_root_slash_passwd(dst: Path) -> Case:
    b = _Build(dst)
    rep = b.dst / "report.json"
    rep.write_text(json.dumps(_valid_report(b.data, "etc/passwd", root="/", lines=(1, 2))))
    return b.case(
        "report_root_slash_passwd",
        "a report.json whose source.root/root_abs is '/' citing 'etc/passwd' lines 1-2",
        "no line of /etc/passwd printed (exit 2: not profiler data / not a file the report analysed)",
        [Step(["evidence", str(rep), "F1"]), Step(["evidence", str(rep), "F1", "-f", "json"])],
        forbidden=tuple(x for x in [first_line("/etc/passwd")] if x),
    )


def make_report_root_canary(dst: Path) -> Case:
    b = _Build(dst)
    rep = b.dst / "report.json"
    rep.write_text(json.dumps(_valid_report(b.data, "secret.txt", root=str(b.canary), lines=(1,))))
    return b.case(
        "report_root_canary",
        "a report.json whose root_abs is the canary folder, citing secret.txt",
        "the secret is never printed",
        [Step(["evidence", str(rep), "F1"]), Step(["evidence", str(rep), "F1", "-f", "json"])],
    )


def make_report_evidence_dotdot(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    steps = []
    for i, rel in enumerate(
        [
            f"../../{b.canary.name}/secret.txt",
            "../" * 12 + "etc/passwd",
            "/etc/passwd",
            f"rank_0_ascend_pt/../../../{b.canary.name}/secret.txt",
        ]
    ):
        rep = b.dst / f"report{i}.json"
        rep.write_text(json.dumps(_valid_report(b.data, rel, lines=(1,))))
        steps.append(Step(["evidence", str(rep), "F1"], rc=(2,), checks=[error_names(rel)]))
    return b.case(
        "report_evidence_dotdot",
        "reports citing ../../canary, ../…/etc/passwd, /etc/passwd, rank/../../../canary",
        "each refused: exit 2 naming the cited path",
        steps,
        forbidden=tuple(x for x in [first_line("/etc/passwd")] if x),
    )


def make_report_wrong_types(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    rel = f"rank_0_ascend_pt/{KD}"
    size = (rank / KD).stat().st_size
    variants: dict[str, Callable[[dict], None]] = {
        "findings_dict": lambda d: d.update(findings={"F1": d["findings"][0]}),
        "evidence_str": lambda d: d["findings"][0].update(evidence="rank_0/kernel_details.csv"),
        "evidence_item_list": lambda d: d["findings"][0].update(evidence=[[1, 2]]),
        "lines_str": lambda d: d["findings"][0]["evidence"][0].update(lines="2,3"),
        "lines_of_str": lambda d: d["findings"][0]["evidence"][0].update(lines=["2", "x"]),
        "lines_float": lambda d: d["findings"][0]["evidence"][0].update(lines=[1e300]),
        "lines_bool": lambda d: d["findings"][0]["evidence"][0].update(lines=[True]),
        "lines_zero": lambda d: d["findings"][0]["evidence"][0].update(lines=[0]),
        "events_negative": lambda d: d["findings"][0]["evidence"][0].update(lines=[], events=[-1]),
        "pointers_int": lambda d: d["findings"][0]["evidence"][0].update(lines=[], pointers=[5]),
        "row_count_negative": lambda d: d["findings"][0]["evidence"][0].update(row_count=-5),
        "row_count_text": lambda d: d["findings"][0]["evidence"][0].update(row_count="many"),
        "file_number": lambda d: d["findings"][0]["evidence"][0].update(file=7),
        "select_list": lambda d: d["findings"][0]["evidence"][0].update(select=[1]),
        "severity_unknown": lambda d: d["findings"][0].update(severity="doom"),
        "id_number": lambda d: d["findings"][0].update(id=1),
        "source_list": lambda d: d.update(source=["/"]),
        "root_number": lambda d: d["source"].update(root=5, root_abs=5),
        "file_bytes_list": lambda d: d["source"].update(file_bytes=[1, 2]),
        "file_bytes_text": lambda d: d["source"].update(file_bytes={rel: "big"}),
        "tables_str": lambda d: d.update(tables="x", breakdown="y"),
    }
    steps = []
    for name, mutate in variants.items():
        doc = _valid_report(b.data, rel, file_bytes={rel: size})
        mutate(doc)
        rep = b.dst / f"report_{name}.json"
        rep.write_text(json.dumps(doc))
        steps.append(Step(["evidence", str(rep), "F1", "-f", "json"]))
    return b.case(
        "report_wrong_types",
        f"{len(variants)} reports, each with one value of the wrong type "
        "(findings a dict, evidence a string, lines as text, row_count negative, …)",
        "each: exit 0 or exit 2 'not a profan JSON report' — never exit 3",
        steps,
    )


# -- -o


def _o_input(dst: Path, name: str, fmt: str, pick: Callable[[_Build], tuple[list[str], Path]]) -> Case:
    b = _Build(dst)
    args, target = pick(b)
    return b.case(
        name,
        f"-o names an input file ({target.name}), format {fmt}",
        "refused before anything is written: exit 2 naming the file; the input unchanged",
        [Step(args, rc=(2,), checks=[error_names(target.name)])],
    )


def make_o_is_input_md(dst: Path) -> Case:
    def pick(b: _Build):
        t = b.qwen() / KD
        return ["analyze", str(b.data), "-q", "-f", "md", "-o", str(t)], t

    return _o_input(dst, "o_is_input_md", "md", pick)


def make_o_is_input_json(dst: Path) -> Case:
    def pick(b: _Build):
        t = b.qwen() / OUT / "communication.json"
        return ["analyze", str(b.data), "-q", "-f", "json", "-o", str(t)], t

    return _o_input(dst, "o_is_input_json", "json", pick)


def make_o_is_input_html(dst: Path) -> Case:
    def pick(b: _Build):
        t = b.dlrm()
        return ["analyze", str(t), "-q", "-f", "html", "-o", str(t)], t

    return _o_input(dst, "o_is_input_html", "html", pick)


def make_o_is_input_xlsx(dst: Path) -> Case:
    def pick(b: _Build):
        t = b.qwen() / OUT / "step_trace_time.csv"
        return ["analyze", str(b.data), "-q", "-f", "xlsx", "-o", str(t)], t

    return _o_input(dst, "o_is_input_xlsx", "xlsx", pick)


def make_o_is_input_brief(dst: Path) -> Case:
    def pick(b: _Build):
        t = b.qwen() / KD
        return ["analyze", str(b.data), "-q", "--brief", "-o", str(t)], t

    return _o_input(dst, "o_is_input_brief", "json --brief", pick)


def make_o_is_input_alias(dst: Path) -> Case:
    def pick(b: _Build):
        rank = b.qwen()
        alias = rank / OUT / ".." / OUT / "kernel_details.csv"
        return ["analyze", str(b.data), "-q", "-f", "json", "-o", str(alias)], rank / KD

    return _o_input(dst, "o_is_input_alias", "json via OUT/../OUT/kernel_details.csv", pick)


def make_o_is_input_compare(dst: Path) -> Case:
    def pick(b: _Build):
        a, c = b.dlrm(), b.dlrm(DLRM5.name, DLRM5)
        return ["compare", str(a), str(c), "-q", "-f", "md", "-o", str(c)], c

    return _o_input(dst, "o_is_input_compare", "md (compare)", pick)


def make_o_missing_folder(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    target = b.out / "missing" / "sub" / "report.md"

    def written_or_named(res: Result) -> None:
        if res.rc == 0 and not target.is_file():
            _fail(res, "exit 0 but the report file is not there")

    return b.case(
        "o_missing_folder",
        "-o into a folder that does not exist (out/missing/sub/report.md)",
        "exit 2 naming the path, or the folders made and the report written",
        [
            Step(
                ["analyze", str(b.data), "-q", "-f", "md", "-o", str(target)],
                outputs=(target,),
                checks=[error_names("missing"), written_or_named],
            )
        ],
    )


def make_o_under_regular_file(dst: Path) -> Case:
    """An output that cannot be created whoever runs it (root too): a path under a regular file. The read-only
    folder itself is `make_o_read_only_folder`."""
    b = _Build(dst)
    b.qwen()
    (b.out / "somefile.txt").write_text("a regular file\n")
    target = b.out / "somefile.txt" / "out.md"
    steps = [
        Step(
            ["analyze", str(b.data), "-q", "-f", fmt, "-o", str(target.with_suffix("." + fmt))],
            rc=(2,),
            checks=[error_names("somefile.txt")],
        )
        for fmt in ("md", "xlsx")
    ]
    return b.case(
        "o_under_regular_file",
        "-o somefile.txt/out.md and somefile.txt/out.xlsx (a path under a file)",
        "exit 2 naming the path; nothing written",
        steps,
    )


def _as_user() -> tuple[tuple[str, ...], str | None]:
    """(command prefix, skip reason): as root, run under ``setpriv`` with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
    dropped from the bounding set, so file modes bind as they do for a user (root ignores chmod otherwise)."""
    if os.geteuid() != 0:
        return (), None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return (), "running as root without setpriv: file modes cannot bind root"
    return (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"), None


def make_o_read_only_folder(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    ro = b.out / "readonly"
    ro.mkdir()
    ro.chmod(0o555)
    wrapper, skip = _as_user()
    steps = [
        Step(
            ["analyze", str(b.data), "-q", "-f", fmt, "-o", str(ro / f"r.{fmt}")],
            rc=(2,),
            checks=[error_names("readonly")],
        )
        for fmt in ("md", "json", "html", "xlsx")
    ]
    return b.case(
        "o_read_only_folder",
        "-o into a folder of mode 555 (as root: under setpriv without the permission override), every format",
        "exit 2 naming the path; nothing written",
        steps,
        wrapper=wrapper,
        skip=skip,
        cleanup=lambda: ro.chmod(0o755),
    )


def make_o_is_data_dir(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    return b.case(
        "o_is_data_dir",
        "-o names a folder (the data folder itself)",
        "exit 2 naming the folder; nothing written",
        [Step(["analyze", str(b.data), "-q", "-f", "md", "-o", str(b.data)], rc=(2,), checks=[error_names("data")])],
    )


def make_o_name_too_long(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    target = b.out / ("y" * 300 + ".md")
    return b.case(
        "o_name_too_long",
        "-o whose file name is 300 bytes (> NAME_MAX)",
        "exit 2",
        [Step(["analyze", str(b.data), "-q", "-f", "md", "-o", str(target)], rc=(2,))],
    )


# -- numbers that are no numbers


def make_comm_nan_infinity(dst: Path) -> Case:
    b = _Build(dst)
    f = b.qwen() / OUT / "communication.json"
    text = f.read_text()
    n = 0

    def sub(m: re.Match) -> str:
        nonlocal n
        n += 1
        return m.group(1) + ("NaN", "Infinity", "-Infinity")[n % 3]

    text = re.sub(r'("Elapse Time\(ms\)": )[0-9.eE+-]+', sub, text)
    f.write_text(text)
    return b.case(
        "comm_nan_infinity",
        f"communication.json with NaN / Infinity / -Infinity literals as 'Elapse Time(ms)' of {n} ops",
        "exit 2 naming communication.json, or the ops skipped and counted in a warning naming it",
        [b.analyze(checks=[said("communication.json")])],
    )


# step_trace_time.csv and communication.json: a row or op that is no measurement of one step is skipped and
# counted, and what is kept equals the raw file's usable rows (the reference parsers below share no code with
# profan's readers).

STT = f"{OUT}/step_trace_time.csv"
# lane times that are durations; "…and Exclude Receive" is Not Overlapped − Bubble, which may fall below zero
STT_DURATIONS = (
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Preparing",
)


def ref_step_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(usable rows, skipped count) of a step_trace_time.csv, by the rule `profan.sources.ascend_text.steps` states: a
    row is skipped for a negative lane time (below -1 ns), a step of no length (Stage + Bubble, else Computing +
    Not Overlapped + Free, not above 0), an empty Step cell where another row has one, and a (device, step)
    already read."""
    with path.open(newline="", encoding="utf-8") as fh:
        header, *rows = list(csv.reader(fh))
    recs = [dict(zip(header, r, strict=True)) for r in rows]
    named = any(r.get("Step", "").strip() for r in recs)
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for line, r in enumerate(recs, start=2):
        t = {k: float(r[k]) for k in STT_DURATIONS if r.get(k, "").strip()}
        stage = t.get("Stage")
        size = (
            stage + t.get("Bubble", 0.0)
            if stage is not None
            else (t["Computing"] + t["Communication(Not Overlapped)"] + t["Free"])
        )
        key = (r.get("Device_id", "").strip(), r["Step"].strip())
        if min(t.values()) < -1e-3 or not size > 0 or (named and not key[1]) or key in seen:
            continue
        seen.add(key)
        kept.append({"src_line": line, "step": int(key[1]) if key[1] else None, "step_us": size, **t})
    return kept, len(recs) - len(kept)


def steps_are(expected: list[dict[str, Any]]) -> Check:
    """On exit 0, rank 0's rows of tables.steps are the raw file's usable rows: same lines, steps and times."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        got = [r for r in ((res.report() or {}).get("tables") or {}).get("steps") or [] if r.get("rank") == 0]
        want = [(e["src_line"], e["step"], e["Computing"], e["Free"], e["step_us"]) for e in expected]
        have = [(r["src_line"], r["step"], r["computing_us"], r["free_us"], r["step_us"]) for r in got]
        same = len(want) == len(have) and all(
            w[:2] == h[:2] and all(map(_close, w[2:], h[2:])) for w, h in zip(want, have, strict=True)
        )
        if not same:
            _fail(res, f"tables.steps holds {have}, the raw file's usable rows are {want}")

    return check


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _stt_case(dst: Path, name: str, builds: str, mutate: Callable[[list[str]], list[str]]) -> Case:
    """The Qwen3 rank 0's step_trace_time.csv with its data lines changed by ``mutate`` (header first)."""
    b = _Build(dst)
    f = b.qwen() / STT
    f.write_text("".join(f"{x}\n" for x in mutate(f.read_text().splitlines())))
    kept, skipped = ref_step_rows(f)
    total = len(f.read_text().splitlines()) - 1
    return b.case(
        name,
        builds,
        f"exit 0, {skipped} of {total} rows skipped and counted in a warning naming step_trace_time.csv, the rest "
        "read as written",
        [b.analyze(checks=[skipped_rows("step_trace_time", "step_trace_time.csv", skipped, total), steps_are(kept)])],
    )


def _cells(line: str, **cells: str) -> str:
    """A step_trace_time.csv line (Qwen3's header: Device_id, Step, Computing, …) with cells replaced by name."""
    names = ["Device_id", "Step", "Computing", "CNO", "Overlapped", "Communication", "Free", "Stage", "Bubble"]
    parts = line.split(",")
    for k, v in cells.items():
        parts[names.index(k)] = v
    return ",".join(parts)


def make_step_trace_negative_times(dst: Path) -> Case:
    def mutate(lines: list[str]) -> list[str]:
        row = lines[1]
        neg = _cells(row, Step="14", Computing="-" + row.split(",")[2], Free="-" + row.split(",")[6])
        return [lines[0], row, neg]

    return _stt_case(
        dst,
        "step_trace_negative_times",
        "step_trace_time.csv with a second step (14) whose Computing and Free are the real row's, negated",
        mutate,
    )


def make_step_trace_repeated_step(dst: Path) -> Case:
    def mutate(lines: list[str]) -> list[str]:
        return [lines[0], lines[1], _cells(lines[1], Computing="1", Free="1", Stage="3")]

    return _stt_case(
        dst, "step_trace_repeated_step", "step_trace_time.csv with a second row for step 13 (other times)", mutate
    )


def make_step_trace_blank_step(dst: Path) -> Case:
    def mutate(lines: list[str]) -> list[str]:
        return [lines[0], lines[1], _cells(lines[1], Step="")]

    return _stt_case(
        dst, "step_trace_blank_step", "step_trace_time.csv with a copy of its row whose Step cell is empty", mutate
    )


def make_step_trace_zero_step(dst: Path) -> Case:
    def mutate(lines: list[str]) -> list[str]:
        zero = {k: "0" for k in ("Computing", "CNO", "Overlapped", "Communication", "Free", "Stage", "Bubble")}
        return [lines[0], lines[1], _cells(lines[1], Step="14", **zero)]

    return _stt_case(
        dst, "step_trace_zero_step", "step_trace_time.csv with a second step (14) whose every time is 0", mutate
    )


COMM_TIMES = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Idle Time(ms)")


def make_comm_negative_times(dst: Path) -> Case:
    b = _Build(dst)
    f = b.qwen() / OUT / "communication.json"
    doc = json.loads(f.read_text())
    ops = [(k, sec, op, body) for k, st in doc.items() for sec, items in st.items() for op, body in items.items()]
    ops = [o for o in ops if o[2] != "Total Op Info"]
    for _, _, _, body in ops[::3]:
        t = body["Communication Time Info"]
        t.update({k: -abs(t[k]) for k in COMM_TIMES})
    f.write_text(json.dumps(doc))
    # the reference: an op is no measurement when one of its times is below zero by more than a nanosecond
    negative = [min(body["Communication Time Info"][k] for k in COMM_TIMES) < -1e-6 for *_, body in ops]
    kept = sorted((sec, op) for (_, sec, op, _), neg in zip(ops, negative, strict=True) if not neg)
    bad = sum(negative)

    def kept_ops(res: Result) -> None:
        if res.rc != 0:
            return
        rows = ((res.report() or {}).get("tables") or {}).get("communication") or []
        got = sorted((r["kind"], r["op"]) for r in rows if r.get("rank") == 0)
        if got != kept:
            _fail(
                res, f"tables.communication holds {len(got)} ops of rank 0, the raw file's usable ops are {len(kept)}"
            )

    return b.case(
        "comm_negative_times",
        f"communication.json with Elapse / Transit / Wait / Idle Time negated in every third op ({bad} of "
        f"{len(ops)} then hold a time below zero)",
        "exit 0 with those ops skipped and counted in a warning naming communication.json, the others kept",
        [b.analyze(checks=[skipped_rows("communication", "communication.json", bad, len(ops)), kept_ops])],
    )


def make_kernel_durations_hostile(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    values = [
        "1e300",
        "nan",
        "inf",
        "-5",
        "abc",
        "",
        "NaN",
        "-inf",
        "1e309",
        "Infinity",
        " 12.5\t",
        "-0",
        "86400000001",
        "1_0",
    ]
    for k, i in enumerate(range(0, len(rows), 10)):
        rows[i] = set_cells(rows[i], {10: values[k % len(values)]})
    (rank / KD).write_text(header + "".join(rows))
    cells = raw_durations(rank / KD)
    good = [v for v in map(ref_duration, cells) if v is not None]
    bad = len(cells) - len(good)
    return b.case(
        "kernel_durations_hostile",
        f"every 10th Duration(us) of kernel_details.csv replaced by one of {values}",
        f"exit 0; exactly {bad} of {len(cells)} rows skipped and counted; the breakdown sums exactly the usable rows",
        [
            b.analyze(
                rc=(0,),
                checks=[
                    skipped_rows("kernel_details", "kernel_details.csv", bad, len(cells)),
                    breakdown_total(sum(good)),
                ],
            )
        ],
    )


def make_kineto_durations_hostile(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    values: list[Any] = [1e300, "nan", -5, "text", None, "NaN", "inf", "-inf"]
    bad = kernels[::15]
    for k, e in enumerate(bad):
        v = values[k % len(values)]
        if v is None:
            del e["dur"]
        else:
            e["dur"] = v
    (b.data / DLRM4.name).write_text(json.dumps(doc))
    return b.case(
        "kineto_durations_hostile",
        f"{len(bad)} kernel events of the dlrm worker4 trace with dur "
        "1e300, 'nan', -5, 'text', missing, 'NaN', 'inf', '-inf'",
        f"exit 0 with exactly {len(bad)} events skipped and counted",
        [b.analyze(rc=(0,), checks=[skipped_events(len(bad))])],
    )


def make_kineto_dur_1e400(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    bad = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"][::25]
    for e in bad:
        e["dur"] = "__INF__"
    (b.data / DLRM4.name).write_text(json.dumps(doc).replace('"__INF__"', "1e400"))
    return b.case(
        "kineto_dur_1e400",
        f"{len(bad)} kernel events whose dur is 1e400 (valid JSON grammar; overflows a double to inf)",
        f"exit 0 with exactly {len(bad)} events skipped and counted, or exit 2 naming the trace",
        [b.analyze(checks=[error_names("worker4_step_12"), skipped_events(len(bad))])],
    )


def make_kineto_nan_literal(dst: Path) -> Case:
    b = _Build(dst)
    text = DLRM4.read_text()
    n = text.count('"dur": 8,')
    (b.data / DLRM4.name).write_text(text.replace('"dur": 8,', '"dur": NaN,').replace('"dur": 3,', '"dur": -Infinity,'))
    return b.case(
        "kineto_nan_literal",
        f"NaN / -Infinity literals (not JSON) as dur of {n}+ events of a Kineto trace",
        "exit 2 naming the trace, or the events skipped and counted in a warning",
        [b.analyze(checks=[said("worker4_step_12")])],
    )


# Kineto events that are no measurement of the capture, or look like device work no reader takes: skipped (or read)
# and counted, never silently dropped, never stretching a step window. The reference parser below follows the
# contract (a start past int64 ns or more than max_duration_us from the median start of the X events is no start;
# an event with no category that carries a stream and a correlation id is device work) without profan's code.

KINETO_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
MAX_TS_US = (2**63 - 1) / 1000  # int64 nanoseconds, in µs
ALEXNET_R0 = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025" / "level1" / "rank0_ascend_pt"


def _ref_number(v: Any) -> float | None:
    """A JSON number or numeric string as a finite float; None for anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def ref_kineto_device(events: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """(device events profan must analyse, device-looking events it must skip and count) of a Kineto event list.
    Device work: a complete (X) event of a device category, or with no category but args holding a stream and a
    correlation id. Skipped: such an event without a usable duration or start, an event with a correlation id but
    no category (nor stream), and a device-category (or uncategorised, correlated) event of phase B or E."""
    ev = [e for e in events if isinstance(e, dict)]
    starts = [t for e in ev if e.get("ph") == "X" and (t := _ref_number(e.get("ts"))) is not None]
    centre = statistics.median([t for t in starts if abs(t) <= MAX_TS_US])
    kept: list[dict[str, Any]] = []
    skipped = 0
    for e in ev:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        cat, ph, corr = e.get("cat"), e.get("ph"), args.get("correlation") is not None
        uncategorised = cat is None and corr
        if ph in ("B", "E") and (cat in KINETO_DEVICE or uncategorised):
            skipped += 1
        elif ph == "X" and (cat in KINETO_DEVICE or (uncategorised and args.get("stream") is not None)):
            ts, dur = _ref_number(e.get("ts")), _ref_number(e.get("dur"))
            placed = ts is not None and abs(ts) <= MAX_TS_US and abs(ts - centre) <= MAX_DURATION_US
            if placed and dur is not None and 0 <= dur <= MAX_DURATION_US:
                kept.append(e)
            else:
                skipped += 1
        elif ph == "X" and uncategorised:
            skipped += 1
    return kept, skipped


def step_windows_within(lo: float, hi: float) -> Check:
    """On exit 0, every step window of the report's trace_steps lies in [lo, hi] µs: the first start and last end
    of the raw file's usable device events. One absurd start must never stretch a window."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        rows = ((res.report() or {}).get("tables") or {}).get("trace_steps") or []
        bad = [r for r in rows if not (lo - 1e-3 <= float(r["start_us"]) and float(r["end_us"]) <= hi + 1e-3)]
        if bad or not rows:
            _fail(res, f"step windows outside the capture [{lo}, {hi}] µs (or none): {bad[:2]}")

    return check


def _kineto_case(b: _Build, doc: dict[str, Any], name: str, builds: str, extra: Sequence[Check] = ()) -> Case:
    """The mutated dlrm worker4 trace written, and the checks every Kineto class of this group shares: the exact
    skipped count in rows_skipped and in the warning, the breakdown equal to the usable device events' sum, and
    step windows inside the usable events' span."""
    (b.data / DLRM4.name).write_text(json.dumps(doc))
    kept, skipped = ref_kineto_device(doc["traceEvents"])
    lo = min(float(e["ts"]) for e in kept)
    hi = max(float(e["ts"]) + float(e["dur"]) for e in kept)
    checks = [skipped_events(skipped), breakdown_total(sum(float(e["dur"]) for e in kept))]
    if skipped:
        checks.append(said(f"skipped {skipped} of"))
    return b.case(
        name,
        builds,
        f"exit 0, {skipped} events skipped and counted, the {len(kept)} usable device events summed",
        [b.analyze(rc=(0,), checks=[*checks, step_windows_within(lo, hi), *extra])],
    )


def make_kineto_ts_absurd(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    bad = kernels[3::20]
    for k, e in enumerate(bad):
        ts = float(e["ts"])
        e["ts"] = [1e30, -ts, ts + 2 * MAX_DURATION_US, 1e300, 9.3e15, str(ts - 3 * MAX_DURATION_US)][k % 6]
    return _kineto_case(
        b,
        doc,
        "kineto_ts_absurd",
        f"{len(bad)} kernel events of the dlrm worker4 trace with ts 1e30, negated, two days late, 1e300, past "
        "int64 ns, three days early (as text)",
    )


def make_kineto_device_uncategorised(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    for e in kernels[::10]:  # no cat, stream and correlation kept: device work, read as such
        del e["cat"]
    for e in kernels[5::10]:  # cat null and no stream: cannot be told from other work, counted
        e["cat"] = None
        del e["args"]["stream"]
    for e in kernels[7::20]:  # a begin event, not a complete one
        e["ph"] = "B"
    return _kineto_case(
        b,
        doc,
        "kineto_device_uncategorised",
        "dlrm worker4 kernels: every 10th without cat, every 10th (from the 5th) with cat null and no stream, "
        "every 20th (from the 7th) of phase B",
        [said("no category"), said("phase B/E")],
    )


def make_kineto_args_not_object(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "cpu_op")]
    bad = events[2::30]
    for k, e in enumerate(bad):
        e["args"] = ["x", ["list"], 5, "{not json"][k % 4]
    return _kineto_case(
        b,
        doc,
        "kineto_args_not_object",
        f"{len(bad)} kernel and cpu_op events of the dlrm worker4 trace whose args is a string, a list, a number",
        [said(f"read {len(bad)} event(s) whose args is not a JSON object")],
    )


def make_trace_view_args_not_object(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen("rank0_ascend_pt", src=ALEXNET_R0)
    path = rank / OUT / "trace_view.json"
    events = json.loads(path.read_text())
    # the device-lane events (no category): the ones whose args profan reads (host events' args are never parsed)
    bad = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") is None][1::40]
    for k, e in enumerate(bad):
        e["args"] = [["list"], "x", 7][k % 3]
    path.write_text(json.dumps(events))
    return b.case(
        "trace_view_args_not_object",
        f"{len(bad)} device-lane X events of the alexnet rank 0 trace_view.json whose args is a list, a string or "
        "a number",
        "exit 0: the trace read, those events' args read as none and counted in a warning",
        [b.analyze(rc=(0,), checks=[said(f"read {len(bad)} event(s) whose args is not a JSON object")])],
    )


def make_kernel_step_id_hostile(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    for k, i in enumerate(range(5, len(rows), 97)):
        rows[i] = set_cells(rows[i], {0: ["1e300", "-1", "abc", "99999999999999999999", "inf", "13.5"][k % 6]})
    (rank / KD).write_text(header + "".join(rows))
    return b.case(
        "kernel_step_id_hostile",
        "Step Id cells 1e300, -1, abc, 99999999999999999999, inf, 13.5",
        "exit 0 (or 2 naming the file) — never exit 3",
        [b.analyze(checks=[error_names("kernel_details.csv")])],
    )


def make_rank_int64_overflow_ascend(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen("node_x_ascend_pt")
    (rank / "profiler_info_0.json").unlink()
    doc = json.loads((QWEN_R0 / "profiler_info_0.json").read_text())
    doc["rank_id"] = 99999999999999999999
    (rank / "profiler_info_99999999999999999999.json").write_text(json.dumps(doc))
    b.qwen("rank_2_ascend_pt", QWEN_R2)
    return b.case(
        "rank_int64_overflow_ascend",
        "a rank folder whose profiler_info_{rank}.json says rank "
        "99999999999999999999 (beyond int64) in its name and its rank_id",
        "said: exit 2, or a warning naming the value or the folder",
        [b.analyze(checks=[said_any(("99999999999999999999", "node_x_ascend_pt"))])],
    )


def make_rank_ids_hostile_info(dst: Path) -> Case:
    b = _Build(dst)
    names = {"node_a": 2**70, "node_b": -1, "node_c": "inf", "node_d": [1]}
    for name, rid in names.items():
        rank = b.qwen(name)
        (rank / "profiler_info_0.json").unlink()
        doc = json.loads((QWEN_R0 / "profiler_info_0.json").read_text())
        doc["rank_id"] = rid
        (rank / "profiler_info.json").write_text(json.dumps(doc))
    return b.case(
        "rank_ids_hostile_info",
        "4 rank folders whose profiler_info.json rank_id is 2**70, -1, 'inf', [1]",
        "no exit 3; each unusable rank id said (a warning naming the folder, or exit 2)",
        [b.analyze(checks=[said(n) for n in names])],
    )


def make_rank_ids_hostile_kineto(dst: Path) -> Case:
    b = _Build(dst)
    doc = json.loads(DLRM4.read_text())
    files = {"a.json": 2**70, "b.json": -1, "c.json": "inf", "d.json": [1]}
    for name, rid in files.items():
        doc["distributedInfo"]["rank"] = rid
        (b.data / name).write_text(json.dumps(doc))
    return b.case(
        "rank_ids_hostile_kineto",
        "4 Kineto traces whose distributedInfo.rank is 2**70, -1, 'inf', [1]",
        "no exit 3; each unusable rank said (a warning naming the file, or exit 2)",
        [b.analyze(checks=[said(n) for n in files])],
    )


def make_compare_ranks_overflow(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    b.qwen("rank_2_ascend_pt", QWEN_R2)
    return b.case(
        "compare_ranks_overflow",
        "compare DIR --ranks 99999999999999999999,0 and --ranks -1,0",
        "exit 2 (no such rank)",
        [
            Step(["compare", str(b.data), "--ranks", "99999999999999999999,0", "-q"], rc=(2,)),
            Step(["compare", str(b.data), "--ranks", "-1,0", "-q"], rc=(2,)),
        ],
    )


# -- text: line ends, encodings, names


def make_kernel_lone_cr(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    full = raw_total(QWEN_R0 / KD)
    parts = rows[10].split(",", 11)
    parts[5] = parts[5][:4] + "\r" + parts[5][4:]  # a CR inside an unquoted kernel name
    rows[10] = ",".join(parts)
    (rank / KD).write_bytes((header + "".join(rows)).encode())

    def counted(res: Result) -> None:
        if res.rc != 0:
            return
        try:
            breakdown_total(full)(res)
        except AssertionError:
            said("kernel_details.csv")(res)  # a row lost must be said

    return b.case(
        "kernel_lone_cr",
        "a lone CR inside a kernel name (line 12 of kernel_details.csv)",
        "exit 0 with every row summed, or the lost row said; or exit 2 naming the file",
        [b.analyze(checks=[error_names("kernel_details.csv"), counted])],
    )


def make_kernel_crlf(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    text = (rank / KD).read_text()
    (rank / KD).write_bytes(text.replace("\n", "\r\n").encode())
    return b.case(
        "kernel_crlf",
        "kernel_details.csv with CRLF line ends",
        "exit 0, the same total as LF",
        [b.analyze(rc=(0,), checks=[breakdown_total(raw_total(QWEN_R0 / KD))])],
    )


def make_kernel_cr_only(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    text = (rank / KD).read_text()
    (rank / KD).write_bytes(text.replace("\n", "\r").encode())
    return b.case(
        "kernel_cr_only",
        "kernel_details.csv with CR-only line ends (old Mac)",
        "exit 2 naming kernel_details.csv (or read whole)",
        [b.analyze(checks=[error_names("kernel_details.csv")])],
    )


def make_kernel_utf16(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / KD).write_bytes((rank / KD).read_text().encode("utf-16"))
    return b.case(
        "kernel_utf16",
        "kernel_details.csv re-saved as UTF-16",
        "exit 2 naming the file and UTF-16",
        [b.analyze(rc=(2,), checks=[error_names("kernel_details.csv", "UTF-16")])],
    )


def make_kineto_invalid_utf8(dst: Path) -> Case:
    b = _Build(dst)
    raw = DLRM4.read_bytes()
    raw = raw.replace(b'"name": "void gemmSN', b'"name": "\xff\xfe\xc3\x28void gemmSN')
    (b.data / DLRM4.name).write_bytes(raw)
    return b.case(
        "kineto_invalid_utf8",
        "invalid UTF-8 bytes (ff fe c3 28) in Kineto kernel names",
        "exit 0 (names read lossily) or exit 2 naming the trace",
        [b.analyze(checks=[error_names("worker4_step_12")])],
    )


def make_nul_bytes_csv(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    for i in range(1, len(rows), 200):
        rows[i] = set_cells(rows[i], {5: "Nul\x00Name"})
    (rank / KD).write_text(header + "".join(rows))
    return b.case(
        "nul_bytes_csv",
        "NUL bytes inside kernel names of kernel_details.csv",
        "exit 0 or exit 2 naming the file",
        [b.analyze(checks=[error_names("kernel_details.csv")])],
    )


def make_unterminated_quote(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    rows[100] = set_cells(rows[100], {5: "x"}).replace(",x,", ',"open quote never closed,', 1)
    (rank / KD).write_text(header + "".join(rows))
    return b.case(
        "unterminated_quote",
        "a quote opened in line 102 of kernel_details.csv and never closed",
        "exit 2 naming the file, or the swallowed rows said in a warning",
        [b.analyze(checks=[said("kernel_details.csv")])],
    )


def _bom(path: Path) -> None:
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def make_bom_kernel_details(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    _bom(rank / KD)
    return b.case(
        "bom_kernel_details",
        "kernel_details.csv starting with a UTF-8 BOM",
        "exit 0, the same total",
        [b.analyze(rc=(0,), checks=[breakdown_total(raw_total(QWEN_R0 / KD))])],
    )


def make_bom_json_side_files(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    for f in (
        rank / OUT / "communication.json",
        rank / OUT / "communication_matrix.json",
        rank / "profiler_info_0.json",
        rank / "profiler_metadata.json",
    ):
        _bom(f)

    def comm_read_or_said(res: Result) -> None:
        if res.rc == 0 and not ((res.report() or {}).get("tables") or {}).get("communication"):
            said("communication.json")(res)

    return b.case(
        "bom_json_side_files",
        "communication.json, communication_matrix.json, profiler_info_0.json "
        "and profiler_metadata.json starting with a UTF-8 BOM",
        "exit 0 with the communication ops read (or a warning naming the file); exit 2 names a file",
        [b.analyze(checks=[comm_read_or_said])],
    )


def make_bom_kineto_trace(dst: Path) -> Case:
    b = _Build(dst)
    _bom(b.dlrm())
    return b.case(
        "bom_kineto_trace",
        "a Kineto trace starting with a UTF-8 BOM",
        "exit 0 or exit 2 naming it",
        [b.analyze(checks=[error_names("worker4_step_12")])],
    )


EVIL_NAMES = [  # a CR in a name is its own class (kernel_name_quoted_cr): the reader may refuse the file for it
    "\x1b]0;pwn\x07TitleSet",
    "\x1b[2JScreenClear",
    "![img](http://evil.example/x.png)",
    "[click](javascript:alert(1))",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '=HYPERLINK("http://evil.example","click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
]
_TYPES = [
    "MatMulV3",
    "FlashAttentionScore",
    "ZerosLike",
    "GatherV2",
    "Add",
    "Mul",
    "Cast",
    "Transpose",
    "SoftmaxV2",
    "RmsNorm",
    "Slice",
]


def _evil_rank(b: _Build) -> Path:
    """Qwen3 rank 0 with one extra row per evil name, each long enough (60-40 ms) to top its bucket."""
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    extra = [
        set_cells(rows[1], {5: name, 6: _TYPES[i], 10: f"{60000 - 2000 * i}.0"}) for i, name in enumerate(EVIL_NAMES)
    ]
    (rank / KD).write_text(header + "".join(rows) + "".join(extra), newline="")
    return rank


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _outside_code(md: str) -> str:
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", md, flags=re.S)


def make_names_hostile_md(dst: Path) -> Case:
    b = _Build(dst)
    _evil_rank(b)

    def safe(res: Result) -> None:
        if res.rc != 0:
            return
        if _CONTROL.search(res.stdout) or re.search(r"\r(?!\n)", res.stdout):
            _fail(
                res,
                "a control character (ESC, BEL, lone CR) from a kernel name reached the terminal: "
                + repr(_CONTROL.search(res.stdout) or "CR"),
            )
        if "TitleSet" not in res.stdout:
            _fail(res, "the evil kernel names are not in the report (the case did not exercise the renderer)")
        outside = _outside_code(res.stdout)
        # live unless escaped: a backslash before the bracket, or the angle bracket as an entity
        for bad in (r"(?<!\\)!(?<!\\)\[img(?<!\\)\]\(", r"(?<!\\)\]\(javascript:", r"<script", r"<img"):
            if re.search(bad, outside):
                _fail(res, f"{bad!r} outside a code span: Markdown/HTML from a kernel name is live")

    return b.case(
        "names_hostile_md",
        "kernel names with ESC ]0;…BEL, ESC [2J, Markdown image/link, HTML, formulas; Markdown to stdout",
        "exit 0; no control character on stdout, no live Markdown/HTML",
        [Step(["analyze", str(b.data), "-q"], checks=[rc_is(0), safe])],
    )


def make_kernel_name_quoted_cr(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    header, rows = kernel_rows(rank / KD)
    rows.append(set_cells(rows[1], {5: "Evil\rCarriage\rReturn", 10: "60000.0"}))  # quoted: valid CSV
    (rank / KD).write_text(header + "".join(rows), newline="")

    def no_lone_cr(res: Result) -> None:
        if res.rc == 0 and re.search(r"\r(?!\n)", res.stdout):
            _fail(res, "a lone CR from a kernel name reached the terminal")

    return b.case(
        "kernel_name_quoted_cr",
        "a kernel name holding CRs inside a quoted CSV field (valid CSV), Markdown to stdout",
        "exit 0 with no lone CR on stdout, or exit 2 naming the file",
        [Step(["analyze", str(b.data), "-q"], checks=[error_names("kernel_details.csv"), no_lone_cr])],
    )


def make_names_hostile_html(dst: Path) -> Case:
    b = _Build(dst)
    _evil_rank(b)
    out = b.out / "r.html"

    def safe(res: Result) -> None:
        if res.rc != 0:
            return
        html = out.read_text(encoding="utf-8", errors="replace")
        for bad in ("<script>alert(1)</script>", "<img src=x onerror", 'href="javascript:', "\x1b"):
            if bad in html:
                _fail(res, f"{bad!r} from a kernel name is live in the HTML")

    return b.case(
        "names_hostile_html",
        "the evil kernel names, HTML report",
        "exit 0; every name escaped",
        [b.analyze(fmt="html", out=out, checks=[rc_is(0), safe])],
    )


def make_names_hostile_xlsx(dst: Path) -> Case:
    b = _Build(dst)
    _evil_rank(b)
    out = b.out / "r.xlsx"

    def safe(res: Result) -> None:
        if res.rc != 0:
            return
        with zipfile.ZipFile(out) as z:
            for member in z.namelist():
                if not member.startswith("xl/worksheets/"):
                    continue
                xml = z.read(member).decode("utf-8", errors="replace")
                for formula in re.findall(r"<f>(.*?)</f>", xml, flags=re.S):
                    if any(s in formula for s in ("evil.example", "cmd|", "SUM(1+1)", "2+3")):
                        _fail(res, f"a kernel name became a formula in {member}: {formula[:80]!r}")
        strings = "".join(z_read_all(out))
        if "HYPERLINK(&quot;http://evil.example" not in strings and 'HYPERLINK("http://evil.example' not in strings:
            _fail(res, "the formula-like kernel name is not in the workbook as text")

    return b.case(
        "names_hostile_xlsx",
        "the evil kernel names, Excel workbook",
        "exit 0; formula-like names stored as text, never as formulas",
        [b.analyze(fmt="xlsx", out=out, checks=[rc_is(0), safe])],
    )


def z_read_all(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        return [z.read(m).decode("utf-8", errors="replace") for m in z.namelist() if m.endswith(".xml")]


def make_names_hostile_json(dst: Path) -> Case:
    b = _Build(dst)
    _evil_rank(b)

    def verbatim(res: Result) -> None:
        if res.rc != 0:
            return
        strings = _strings(res.report() or {})
        for name in (
            "<script>alert(1)</script>",
            '=HYPERLINK("http://evil.example","click")',
            "\x1b]0;pwn\x07TitleSet",
        ):
            if not any(name in s for s in strings):
                _fail(res, f"kernel name {name!r} is not in the JSON report verbatim")

    return b.case(
        "names_hostile_json",
        "the evil kernel names, JSON report",
        "exit 0; names kept verbatim (JSON escapes them)",
        [b.analyze(checks=[rc_is(0), verbatim])],
    )


# -- JSON depth


def make_profiler_info_deep(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    (rank / "profiler_info_0.json").unlink()
    (rank / "profiler_info.json").write_text('{"rank_id": 0, "config": ' + _nest(100_000) + "}")
    return b.case(
        "profiler_info_deep",
        "profiler_info.json (no rank in its name) nested 100,000 arrays deep",
        "said: a warning or exit 2 naming profiler_info.json",
        [b.analyze(checks=[said("profiler_info.json")])],
    )


def make_comm_json_deep(dst: Path) -> Case:
    b = _Build(dst)
    f = b.qwen() / OUT / "communication.json"
    f.write_text('{"deep": ' + _nest(100_000) + ", " + f.read_text()[1:])
    return b.case(
        "comm_json_deep",
        "communication.json with a value nested 100,000 arrays deep",
        "said: exit 2 or a warning naming communication.json",
        [b.analyze(checks=[said("communication.json")])],
    )


def make_trace_deep(dst: Path) -> Case:
    b = _Build(dst)
    f = b.dlrm()
    text = f.read_text()
    at = text.index('"args"')
    f.write_text(text[:at] + '"deep": ' + _nest(100_000) + ", " + text[at:])
    return b.case(
        "trace_deep",
        "a Kineto trace event holding a value nested 100,000 arrays deep",
        "said: exit 2 or a warning naming the trace",
        [b.analyze(checks=[said("worker4_step_12")])],
    )


# -- layouts


def make_empty_rank_folders_2000(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen("rank_0")
    for i in range(1, 2001):
        (b.data / f"rank_{i}" / OUT).mkdir(parents=True)
    return b.case(
        "empty_rank_folders_2000",
        "rank_0 (real) and rank_1 … rank_2000 each with an empty ASCEND_PROFILER_OUTPUT/",
        "not 2,000 ranks silently: exit 2, or a warning counting the 2,000 empty folders",
        [b.analyze(checks=[said_any(("2000 ", "2,000"))])],
    )


def make_entries_limit(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen("rank_0")
    for i in range(1, 601):
        (b.data / f"rank_{i}" / OUT).mkdir(parents=True)
    rules = b.dst / "limits.toml"
    rules.write_text("[limits]\nmax_entries = 300\n")
    return b.case(
        "entries_limit",
        "601 rank folders walked with [limits] max_entries = 300",
        "the bound is said (exit 2, or a warning naming the limit)",
        [b.analyze(None, "--rules", str(rules), checks=[said_any(("max_entries", "entries"))])],
    )


def make_nested_50_deep(dst: Path) -> Case:
    b = _Build(dst)
    deep = b.data.joinpath(*["d"] * 50)
    deep.mkdir(parents=True)
    b.qwen(parent=deep)
    return b.case(
        "nested_50_deep",
        "a real rank 50 folders below the analysed folder (max_depth is 8)",
        "the walk bound is said (exit 2 or a warning mentioning the depth)",
        [b.analyze(checks=[said_any(("deep", "depth", "level"))])],
    )


def make_duplicate_ranks(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen("rank_0_ascend_pt_a")
    b.qwen("rank_0_ascend_pt_b")
    return b.case(
        "duplicate_ranks",
        "two copies of rank 0 side by side",
        "exit 0 with a warning naming both folders",
        [b.analyze(rc=(0,), checks=[said("rank_0_ascend_pt_a", "rank_0_ascend_pt_b")])],
    )


def make_two_jobs_mixed(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    b.qwen("test_rank_1", GPT3_R1)
    return b.case(
        "two_jobs_mixed",
        "Qwen3 rank 0 (2025, 4-rank job) and GPT-3 rank 1 (2023, 2-rank job) in one folder",
        "not merged silently: exit 2, or a warning naming both folders",
        [b.analyze(checks=[said("rank_0_ascend_pt", "test_rank_1")])],
    )


def make_missing_columns(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    with open(QWEN_R0 / KD, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    idx = rows[0].index("Duration(us)")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:idx] + r[idx + 1 :] for r in rows])
    (rank / KD).write_text(buf.getvalue())
    return b.case(
        "missing_columns",
        "kernel_details.csv without its Duration(us) column",
        "said: exit 2 (or a warning) naming the file and Duration(us)",
        [b.analyze(checks=[said("kernel_details.csv", "Duration(us)")])],
    )


# -- empty and header-only files


def _empty_ascend(dst: Path, name: str, rel: str) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    f = rank / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"")
    return b.case(
        name,
        f"{Path(rel).name} of 0 bytes in a real rank",
        f"said: exit 2 or a warning naming {Path(rel).name}",
        [b.analyze(checks=[said(Path(rel).name)])],
    )


def make_empty_kernel_details(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_kernel_details", KD)


def make_empty_step_trace_time(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_step_trace_time", f"{OUT}/step_trace_time.csv")


def make_empty_op_statistic(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_op_statistic", f"{OUT}/op_statistic.csv")


def make_empty_communication_json(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_communication_json", f"{OUT}/communication.json")


def make_empty_communication_matrix(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_communication_matrix", f"{OUT}/communication_matrix.json")


def make_empty_trace_view(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_trace_view", f"{OUT}/trace_view.json")


def make_empty_profiler_info(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_profiler_info", "profiler_info_0.json")


def make_empty_profiler_metadata(dst: Path) -> Case:
    return _empty_ascend(dst, "empty_profiler_metadata", "profiler_metadata.json")


def make_empty_kineto_json(dst: Path) -> Case:
    b = _Build(dst)
    b.dlrm()
    (b.data / "worker5.pt.trace.json").write_bytes(b"")
    return b.case(
        "empty_kineto_json",
        "a 0-byte worker5.pt.trace.json beside a real trace",
        "exit 0 or 2; on 2 the line names it",
        [b.analyze(checks=[error_names("worker5.pt.trace.json")])],
    )


def make_empty_kineto_json_gz(dst: Path) -> Case:
    b = _Build(dst)
    (b.data / "worker0.pt.trace.json.gz").write_bytes(b"")
    return b.case(
        "empty_kineto_json_gz",
        "a folder holding only a 0-byte worker0.pt.trace.json.gz",
        "exit 2 naming the file (or the folder)",
        [b.analyze(rc=(2,), checks=[said_any(("worker0", "data"))])],
    )


def make_empty_report_json(dst: Path) -> Case:
    b = _Build(dst)
    rep = b.dst / "report.json"
    rep.write_bytes(b"")
    return b.case(
        "empty_report_json",
        "profan evidence on a 0-byte report.json",
        "exit 2 naming report.json",
        [Step(["evidence", str(rep), "F1"], rc=(2,), checks=[error_names("report.json")])],
    )


def make_empty_rules_and_hardware(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    (b.dst / "rules.toml").write_bytes(b"")
    (b.dst / "hw.toml").write_bytes(b"")
    return b.case(
        "empty_rules_and_hardware",
        "--rules and --hardware naming 0-byte TOML files",
        "exit 0 (an empty table adds nothing) or exit 2 naming the file",
        [
            b.analyze(
                None,
                "--rules",
                str(b.dst / "rules.toml"),
                "--hardware",
                str(b.dst / "hw.toml"),
                checks=[error_names(".toml")],
            )
        ],
    )


def _header_only(dst: Path, name: str, rel: str) -> Case:
    b = _Build(dst)
    f = b.qwen() / rel
    f.write_text(f.read_text().splitlines(keepends=True)[0])
    return b.case(
        name,
        f"{Path(rel).name} holding only its header row",
        f"said: exit 2 or a warning naming {Path(rel).name}",
        [b.analyze(checks=[said(Path(rel).name)])],
    )


def make_header_only_kernel_details(dst: Path) -> Case:
    return _header_only(dst, "header_only_kernel_details", KD)


def make_header_only_step_trace_time(dst: Path) -> Case:
    return _header_only(dst, "header_only_step_trace_time", f"{OUT}/step_trace_time.csv")


def make_header_only_op_statistic(dst: Path) -> Case:
    return _header_only(dst, "header_only_op_statistic", f"{OUT}/op_statistic.csv")


# -- JSON of the wrong shape


def make_trace_wrong_shape(dst: Path) -> Case:
    b = _Build(dst)
    (b.data / "worker0.pt.trace.json").write_text('{"schemaVersion": 1, "traceEvents": {"ph": "X"}}')
    (b.data / "worker1.pt.trace.json").write_text('{"schemaVersion": 1, "traceEvents": 5}')
    return b.case(
        "trace_wrong_shape",
        "Kineto traces whose traceEvents is an object / a number",
        "said: exit 2 or a warning naming the trace",
        [b.analyze(checks=[said_any(("worker0.pt.trace.json", "worker1.pt.trace.json"))])],
    )


def make_comm_json_wrong_types(dst: Path) -> Case:
    b = _Build(dst)
    f = b.qwen() / OUT / "communication.json"
    doc = json.loads(f.read_text())
    step = next(iter(doc.values()))
    ops = [(sec, k) for sec, body in step.items() if isinstance(body, dict) for k in body]
    for i, (sec, k) in enumerate(ops):
        body = step[sec][k]
        if i % 4 == 0:
            step[sec][k] = ["not", "an", "object"]
        elif i % 4 == 1:
            body["Communication Time Info"] = "fast"
        elif i % 4 == 2:
            body["Communication Time Info"]["Elapse Time(ms)"] = "slow"
        else:
            body["Communication Bandwidth Info"] = [1, 2]
    doc["step99"] = ["a", "list"]
    f.write_text(json.dumps(doc))
    return b.case(
        "comm_json_wrong_types",
        "communication.json whose ops are lists, time info text, elapse text, bandwidth info a list, a step a list",
        "exit 0 with the entries skipped and counted in a warning naming communication.json (or exit 2 naming it)",
        [b.analyze(checks=[said("communication.json")])],
    )


def make_rules_wrong_types(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    steps = []
    for i, body in enumerate(
        [
            "rule = [1, 2]\n",
            "[[rule]]\nid = 5\nbucket = []\nmatch = {name = 7}\n",
            '[[rule]]\nid = "X"\nbucket = "ffn"\nmatch = {name = "("}\n',
            "limits = [1]\n",
            '[limits]\nmax_line_bytes = "big"\n',
            'check = "x"\n',
        ]
    ):
        rules = b.dst / f"rules{i}.toml"
        rules.write_text(body)
        steps.append(
            b.analyze(None, "--rules", str(rules), out=b.out / f"r{i}.json", rc=(2,), checks=[error_names(rules.name)])
        )
    return b.case(
        "rules_wrong_types",
        "--rules files of the wrong types: rule = [1,2], id = 5, an invalid "
        "regex, limits = [1], max_line_bytes = 'big', check = 'x'",
        "each exit 2 naming the rules file",
        steps,
    )


def make_rules_check_threshold_text(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    rules = b.dst / "rules.toml"
    rules.write_text('[[check]]\nid = "exposed-communication"\nwarning_share = "high"\ncritical_share = []\n')
    return b.case(
        "rules_check_threshold_text",
        "a --rules file setting a check's thresholds to text and a list",
        "exit 2 naming the rules file (not an internal error when the threshold is compared)",
        [b.analyze(None, "--rules", str(rules), rc=(2,), checks=[error_names("rules.toml")])],
    )


def make_hardware_wrong_types(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    hw = b.dst / "hw.toml"
    hw.write_text('[assume]\ndevice = 5\n\n[[link]]\ndevice = "ascend_910b"\nlink = "HCCS"\nusable_gbps = "fast"\n')
    return b.case(
        "hardware_wrong_types",
        "a --hardware file with device = 5 and usable_gbps = 'fast'",
        "exit 2 naming hw.toml",
        [b.analyze(None, "--hardware", str(hw), rc=(2,), checks=[error_names("hw.toml")])],
    )


# -- command line


def make_name_too_long(dst: Path) -> Case:
    b = _Build(dst)
    return b.case(
        "name_too_long",
        "analyze DIR/<300 x's> (a name longer than NAME_MAX) and evidence on it",
        "exit 2",
        [
            Step(["analyze", str(b.data / ("x" * 300)), "-q"], rc=(2,)),
            Step(["evidence", str(b.data / ("x" * 300 + ".json")), "F1"], rc=(2,)),
        ],
    )


def make_path_too_long(dst: Path) -> Case:
    b = _Build(dst)
    return b.case(
        "path_too_long",
        "analyze a path of 5,000 bytes (> PATH_MAX)",
        "exit 2",
        [Step(["analyze", str(b.data) + "/a" * 2500, "-q"], rc=(2,))],
    )


def make_evidence_limit_zero(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    return b.case(
        "evidence_limit_zero",
        "profan evidence DIR F1 --limit 0",
        "exit 0: the claim and its locators, no rows read back",
        [Step(["evidence", str(b.data), "F1", "--limit", "0"], rc=(0,), checks=[rc_is(0)])],
    )


def make_evidence_limit_negative(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    return b.case(
        "evidence_limit_negative",
        "profan evidence DIR F1 --limit -1 and --limit -99999999999999999999",
        "exit 2 naming --limit",
        [
            Step(["evidence", str(b.data), "F1", "--limit", v], rc=(2,), checks=[error_names("--limit")])
            for v in ("-1", "-99999999999999999999")
        ],
    )


# -- between two runs


def _cache_case(dst: Path, name: str, builds: str, corrupt: Callable[[Path], None], kernels: bool = False) -> Case:
    b = _Build(dst)
    if kernels:  # a kernel file of 16 MiB or more keeps its reduced groups in the cache (kernel_pass.CACHE_BYTES)
        rank = b.qwen()
        header, rows = kernel_rows(rank / KD)
        with open(rank / KD, "w", encoding="utf-8") as fh:
            fh.write(header)
            for _ in range(22):
                fh.writelines(rows)
    else:
        shutil.copyfile(NCCL_GZ, b.data / NCCL_GZ.name)
    cache = b.dst / "cache"
    r1, r2 = b.out / "r1.json", b.out / "r2.json"

    def same(res: Result) -> None:
        if res.rc != 0:
            return
        a, c = (json.loads(p.read_text()) for p in (r1, r2))
        for d in (a, c):
            d.get("meta", {}).pop("timings_s", None)
        if a != c:
            _fail(res, "the report after the cache was corrupted differs from the first one")

    def do() -> None:
        entries = [p for p in cache.rglob("*") if p.is_file()]
        if not entries:
            raise AssertionError("the first run left no cache entry to corrupt")
        for p in entries:
            corrupt(p)

    return b.case(
        name,
        builds,
        "the second run reads the file again: exit 0 and the same report",
        [b.analyze(out=r1, rc=(0,)), b.analyze(out=r2, rc=(0,), checks=[same], before=do)],
        cache_dir=cache,
    )


def make_cache_corrupt_bytes(dst: Path) -> Case:
    def corrupt(p: Path) -> None:
        raw = p.read_bytes()
        p.write_bytes(raw[: len(raw) // 2] + b"\x00garbage\xff" * 7)

    return _cache_case(
        dst,
        "cache_corrupt_bytes",
        "nccl_data.json.gz analysed twice (PROFAN_CACHE_DIR inside the "
        "case); between the runs every cache file is cut in half and garbage appended",
        corrupt,
    )


def make_cache_corrupt_shape(dst: Path) -> Case:
    def corrupt(p: Path) -> None:
        if p.suffix == ".json":
            p.write_text('{"layout": 5, "meta": [], "no_phase": "x"}')
        elif p.suffix == ".parquet":
            import polars as pl

            pl.DataFrame({"x": [1, 2, 3]}).write_parquet(p)

    return _cache_case(
        dst,
        "cache_corrupt_shape",
        "as cache_corrupt_bytes, but each entry replaced by valid "
        "files of the wrong shape (meta.json {'layout': 5, …}, a parquet of one column x)",
        corrupt,
    )


def make_cache_corrupt_kernel_table(dst: Path) -> Case:
    def corrupt(p: Path) -> None:
        if p.suffix == ".json":
            p.write_text('{"rows": "many", "skipped": -1}')
        else:
            raw = p.read_bytes()
            p.write_bytes(raw[: len(raw) // 3])

    return _cache_case(
        dst,
        "cache_corrupt_kernel_table",
        "an 18 MB kernel_details.csv (Qwen3 rank 0 rows x 22) "
        "analysed twice; between the runs its cached table is cut to a third and facts.json given "
        "values of the wrong type",
        corrupt,
        kernels=True,
    )


def make_evidence_file_grew(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    rep = b.out / "report.json"

    def grow() -> None:
        with open(rank / KD, "a", encoding="utf-8") as fh:
            fh.write(kernel_rows(QWEN_R0 / KD)[1][-1])

    return b.case(
        "evidence_file_grew",
        "analyze, then a row appended to kernel_details.csv, then evidence",
        "evidence refused: exit 2 naming kernel_details.csv and that it changed",
        [
            b.analyze(rc=(0,)),
            Step(
                kernel_finding_args(rep, "kernel_details.csv"),
                before=grow,
                rc=(2,),
                checks=[error_names("kernel_details.csv", "changed")],
            ),
        ],
    )


def make_evidence_file_swapped_symlink(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    rep = b.out / "report.json"
    size = (rank / KD).stat().st_size
    line = f"{b.secret},{'S' * 40}\n"
    fake = b.canary / "same_size.csv"
    body = (line * (size // len(line) + 1))[:size]
    fake.write_text(body)

    def swap() -> None:
        (rank / KD).unlink()
        (rank / KD).symlink_to(fake)

    return b.case(
        "evidence_file_swapped_symlink",
        "analyze, then kernel_details.csv replaced by a symlink to a "
        "file outside the data of the very same size, full of the secret; then evidence",
        "the secret is never printed (exit 2)",
        [b.analyze(rc=(0,)), Step(kernel_finding_args(rep, "kernel_details.csv"), before=swap)],
    )


def make_evidence_file_replaced_fifo(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    rep = b.out / "report.json"
    return b.case(
        "evidence_file_replaced_fifo",
        "analyze, then kernel_details.csv replaced by a FIFO; evidence",
        "no hang: exit 2 naming kernel_details.csv",
        [
            b.analyze(rc=(0,)),
            Step(
                kernel_finding_args(rep, "kernel_details.csv"),
                before=lambda: _mkfifo(rank / KD),
                rc=(2,),
                checks=[error_names("kernel_details.csv")],
            ),
        ],
    )


# -- round 2: outputs that are no regular file, inputs that would block or grow without bound


def _node(path: Path | str) -> tuple[int, int]:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_rdev


def still_node(path: Path | str, node: tuple[int, int]) -> Check:
    """The target is still the node it was (a device is not replaced by a regular file)."""

    def check(res: Result) -> None:
        if _node(path) != node:
            _fail(res, f"{path} was {node}, is now {_node(path)}")

    return check


def make_o_dev_null(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    node = _node("/dev/null")
    steps = [
        Step(
            ["analyze", str(b.data), "-q", "-f", fmt, "-o", "/dev/null"],
            rc=(0,),
            checks=[still_node("/dev/null", node)],
        )
        for fmt in ("md", "xlsx")
    ]
    return b.case("o_dev_null", "-o /dev/null, md and xlsx", "exit 0; /dev/null still the same device", steps)


def make_o_own_char_devices(dst: Path) -> Case:
    """Copies of /dev/null and /dev/full in the output folder (mknod needs root)."""
    b = _Build(dst)
    b.qwen()
    null, full = b.out / "null.md", b.out / "full.md"
    skip = None
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        skip = "making a device node needs root (o_fifo_reader covers streams)"
    steps = [
        Step(["analyze", str(b.data), "-q", "-o", str(null)], rc=(0,)),
        Step(["analyze", str(b.data), "-q", "-o", str(full)], rc=(2,), checks=[error_names("No space left on device")]),
    ]
    return b.case(
        "o_own_char_devices",
        "-o onto copies of /dev/null (1, 3) and /dev/full (1, 7)",
        "null: exit 0; full: exit 2 'No space left'; both still the same devices (the snapshot)",
        steps,
        skip=skip,
    )


def make_o_fifo_reader(dst: Path) -> Case:
    """A FIFO at -o with a reader: the reader gets the very report a regular file gets."""
    b = _Build(dst)
    b.qwen()
    ref, fifo = b.out / "ref.md", b.out / "pipe.md"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader: list[threading.Thread] = []

    def read_all() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    def start() -> None:
        reader.append(threading.Thread(target=read_all, daemon=True))
        reader[0].start()

    def received(res: Result) -> None:
        reader[0].join(30)
        if reader[0].is_alive() or not got or got[0] != ref.read_bytes():
            _fail(res, f"the FIFO's reader got {len(got[0]) if got else None} bytes, not the report")

    return b.case(
        "o_fifo_reader",
        "-o names a FIFO a reader holds open",
        "exit 0; the reader receives the report a regular file holds; the FIFO still a FIFO (the snapshot)",
        [
            Step(["analyze", str(b.data), "-q", "-o", str(ref)], outputs=(ref,), rc=(0,)),
            Step(["analyze", str(b.data), "-q", "-o", str(fifo)], rc=(0,), checks=[received], before=start),
        ],
    )


def make_o_fifo_no_reader(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    fifo = b.out / "pipe.md"
    os.mkfifo(fifo)
    return b.case(
        "o_fifo_no_reader",
        "-o names a FIFO nobody reads",
        "exit 2 at once 'no process is reading'; the FIFO still a FIFO",
        [Step(["analyze", str(b.data), "-q", "-o", str(fifo)], rc=(2,), checks=[error_names("no process is reading")])],
    )


def make_o_link_out(dst: Path) -> Case:
    """-o a link to a file outside (the canary's secret), to nothing outside, and to /proc/self/fd/1."""
    b = _Build(dst)
    b.qwen()
    links = {
        "to_file.md": b.canary / "secret.txt",
        "to_nothing.md": b.canary / "new.md",
        "to_stdout.md": "/proc/self/fd/1",
    }
    for name, to in links.items():
        (b.out / name).symlink_to(to)

    def stdout_or_refused(res: Result) -> None:
        if res.rc == 0 and not res.stdout.startswith("# profan report"):
            _fail(res, "exit 0 but the report is not on stdout")
        if not (b.out / "to_stdout.md").is_symlink():
            _fail(res, "the link to stdout was replaced")

    steps = [
        Step(["analyze", str(b.data), "-q", "-o", str(b.out / n)], rc=(2,), checks=[error_names("symbolic link")])
        for n in ("to_file.md", "to_nothing.md")
    ]
    steps.append(Step(["analyze", str(b.data), "-q", "-o", str(b.out / "to_stdout.md")], checks=[stdout_or_refused]))
    return b.case(
        "o_link_out",
        "-o a link to the canary's file, to a missing file beside it, and to /proc/self/fd/1 (stdout is a file here)",
        "the first two refused in one line, the links and the canary as they were; the third writes the report on "
        "stdout or is refused (stdout is a regular file: a link to a file), the link kept",
        steps,
    )


def make_rules_and_hardware_not_files(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    fifo = b.dst / "rules.toml"
    os.mkfifo(fifo)
    steps = [
        b.analyze(None, option, named, rc=(2,), checks=[error_names(str(named), "not a regular file")])
        for option in ("--rules", "--hardware")
        for named in (str(fifo), "/dev/zero")
    ]
    steps.append(Step(["evidence", str(fifo), "F1"], rc=(2,), checks=[error_names(str(fifo), "regular file")]))
    return b.case(
        "rules_and_hardware_not_files",
        "a FIFO and /dev/zero as --rules and --hardware; the FIFO as the report given to evidence",
        "each: exit 2 at once naming it 'not a regular file' — never a wait",
        steps,
    )


def _sparse(path: Path, head: bytes, size: int) -> Path:
    path.write_bytes(head)
    os.truncate(path, size)
    return path


def max_rss_mb(most: int) -> Check:
    def check(res: Result) -> None:
        if res.maxrss_kb > most << 10:
            _fail(res, f"peak RSS {res.maxrss_kb >> 10} MB > {most} MB")

    return check


def make_sparse_inputs(dst: Path) -> Case:
    """A 20 GB trace, a 70 GB kernel_details.csv and a 20 MB rules file, sparse (no disk behind them)."""
    b = _Build(dst)
    head = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},'
    (b.data / "t").mkdir()
    _sparse(b.data / "t" / "big.pt.trace.json", head, 20 << 30)
    rank = b.qwen()
    _sparse(rank / KD, (QWEN_R0 / KD).read_bytes()[:4096], 70 << 30)
    rules = _sparse(b.dst / "big.toml", b"# rules\n", 20 << 20)
    bound = [error_names("[limits] in a rules file"), max_rss_mb(300)]
    return b.case(
        "sparse_inputs",
        "sparse files: a 20 GB .pt.trace.json, a 70 GB kernel_details.csv, a 20 MB --rules file",
        "each refused from its size in one line naming its bound (max_trace_bytes, max_csv_bytes, max_rules_bytes); "
        "peak RSS < 300 MB",
        [
            b.analyze(b.data / "t", rc=(2,), checks=[error_names("max_trace_bytes"), *bound]),
            b.analyze(rank, rc=(2,), checks=[error_names("max_csv_bytes"), *bound]),
            b.analyze(rank, "--rules", str(rules), rc=(2,), checks=[error_names("max_rules_bytes"), max_rss_mb(300)]),
        ],
    )


def make_gzip_bomb_15mb(dst: Path) -> Case:
    """15 MB of gzip members of blanks, inflating to 15 GB: the ratio to the whole file on disk let 1.5 GB through."""
    b = _Build(dst)
    blank = zlib.compress(b" " * (1 << 20), 9, wbits=31)
    bomb = b.data / "bomb.pt.trace.json.gz"
    head = zlib.compress(b'{"schemaVersion": 1, "traceEvents": [', 9, wbits=31)
    bomb.write_bytes(head + blank * ((15 << 20) // len(blank)) + zlib.compress(b"]}", 9, wbits=31))
    return b.case(
        "gzip_bomb_15mb",
        "a 15 MB .pt.trace.json.gz inflating to 15 GB",
        "exit 2 naming max_inflate_ratio once past 64 MiB of output; peak RSS < 400 MB",
        [b.analyze(rc=(2,), checks=[error_names("bomb.pt.trace.json.gz", "max_inflate_ratio"), max_rss_mb(400)])],
    )


# -- round 2: DB exports, numbers, byte-order marks, content of files that are no profiler files, names


ALEXNET_DB = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025-db" / "level1" / "rank0_ascend_pt"
ALEXNET_TEXT = FIXTURES / "ascend" / "msinsight-alexnet-2rank-2025" / "level0"
DB0 = f"{OUT}/ascend_pytorch_profiler_0.db"
DB_STEP_KERNELS = """
SELECT count(*) FROM (
  SELECT t.startNs s FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId
  UNION ALL SELECT startNs FROM COMMUNICATION_OP)
WHERE s BETWEEN (SELECT startNs FROM STEP_TIME) AND (SELECT endNs FROM STEP_TIME)"""


def kernels_are(n: int) -> Check:
    """On exit 0, the report's breakdown counts ``n`` kernels (what SQLite says the database holds)."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        got = sum(int(r.get("kernels") or 0) for r in (res.report() or {}).get("breakdown") or [])
        if got != n:
            _fail(res, f"the report counts {got} kernels; the database holds {n}")

    return check


def no_nan_in(path: Path) -> Check:
    """On exit 0, no nan / inf word in the written text report but in the lines that say what was skipped."""

    def check(res: Result) -> None:
        if res.rc != 0:
            return
        text = path.read_text(encoding="utf-8")
        bad = [x for x in text.splitlines() if re.search(r"\b(nan|inf)\b", x, re.I) and "skipped" not in x]
        if bad:
            _fail(res, f"{path.name} shows {bad[0][:160]!r}")

    return check


def make_db_string_300mb(dst: Path) -> Case:
    import sqlite3

    b = _Build(dst)
    rank = Path(shutil.copytree(ALEXNET_DB, b.data / ALEXNET_DB.name))
    conn = sqlite3.connect(rank / DB0)
    try:
        (nid,) = conn.execute("SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY count(*) DESC").fetchone()
        conn.execute("UPDATE STRING_IDS SET value = ? WHERE id = ?", ("A" * 300_000_000, nid))
        conn.commit()
    finally:
        conn.close()
    return b.case(
        "db_string_300mb",
        "a DB export whose most frequent kernel name in STRING_IDS is 300 MB of text",
        "exit 0 in bounded memory, the value cut at max_string_bytes and counted in a warning naming STRING_IDS",
        [b.analyze(rc=(0,), checks=[said("STRING_IDS", "max_string_bytes")])],
    )


def make_db_wal_deletes(dst: Path) -> Case:
    import sqlite3

    b = _Build(dst)
    src = b.dst / "writer"
    shutil.copytree(ALEXNET_DB, src)
    rank = b.data / ALEXNET_DB.name
    conn = sqlite3.connect(src / DB0)
    try:  # the deletes stay in the WAL: no checkpoint, and the files are copied while the writer is open
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(
            "DELETE FROM TASK WHERE rowid IN (SELECT t.rowid FROM TASK t "
            "JOIN COMPUTE_TASK_INFO c USING (globalTaskId) ORDER BY t.rowid LIMIT 100)"
        )
        conn.commit()
        (held,) = conn.execute(DB_STEP_KERNELS).fetchone()
        shutil.copytree(src, rank, ignore=shutil.ignore_patterns("*-shm"))
    finally:
        conn.close()
    shutil.rmtree(src)
    return b.case(
        "db_wal_deletes",
        f"a DB export with a -wal beside it holding the commit of 100 deleted TASK rows ({held} kernels left)",
        "the WAL applied (or exit 2 naming it): the report counts the rows the database holds, and says so",
        [b.analyze(checks=[kernels_are(held), said("-wal")])],
    )


def _nan_columns(path: Path) -> int:
    """NaN in every column of numbers, one data row each (column k: row 3k); how many columns were hit."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    header, data = rows[0], rows[1:]
    numeric = [j for j in range(len(header)) if all(j < len(r) and ref_duration(r[j]) is not None for r in data[:5])]
    for k, j in enumerate(numeric):
        data[(3 * k) % len(data)][j] = "NaN"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *data])
    path.write_text(buf.getvalue())
    return len(numeric)


def make_nan_every_numeric_column(dst: Path) -> Case:
    b = _Build(dst)
    rank = b.qwen()
    hit = {n: _nan_columns(rank / OUT / n) for n in ("kernel_details.csv", "op_statistic.csv", "step_trace_time.csv")}
    md = b.out / "report.md"
    return b.case(
        "nan_every_numeric_column",
        f"NaN in every numeric column (a row each) of kernel_details.csv, op_statistic.csv, step_trace_time.csv {hit}",
        "the rows profan sums skipped and counted (kernel_details: Step Id and Duration rows), no nan in the Markdown",
        [
            b.analyze(checks=[skipped_rows("kernel_details", "kernel_details.csv", 2, 2463), said("op_statistic.csv")]),
            b.analyze(fmt="md", out=md, rc=(0,), checks=[no_nan_in(md)]),
        ],
    )


def make_comm_nan_transit(dst: Path) -> Case:
    b = _Build(dst)
    f = b.qwen() / OUT / "communication.json"
    text, n = re.subn(r'("Transit Time\(ms\)": )[0-9.eE+-]+', lambda m: m.group(1) + "NaN", f.read_text(), count=6)
    f.write_text(text)
    md = b.out / "report.md"
    return b.case(
        "comm_nan_transit",
        f"communication.json with NaN as the first {n} 'Transit Time(ms)' values (time and bandwidth info)",
        "the ops skipped and counted in a warning naming communication.json; no nan in the Markdown",
        [
            b.analyze(checks=[said("communication.json", "skipped")]),
            b.analyze(fmt="md", out=md, checks=[no_nan_in(md)]),
        ],
    )


def make_bom_every_csv(dst: Path) -> Case:
    b = _Build(dst)
    plain = Path(shutil.copytree(ALEXNET_TEXT, b.dst / "plain"))
    marked = Path(shutil.copytree(ALEXNET_TEXT, b.data / "level0"))
    csvs = sorted(marked.rglob("*.csv"))
    for p in csvs:
        _bom(p)
    r1, r2 = b.out / "plain.json", b.out / "bom.json"

    def same(res: Result) -> None:
        docs = []
        for path, root in ((r1, plain), (r2, marked)):
            doc = json.loads(path.read_text(encoding="utf-8"))
            doc.get("meta", {}).pop("timings_s", None)
            for key in ("root", "root_abs", "root_seal", "file_bytes"):
                doc.get("source", {}).pop(key, None)
            docs.append(json.dumps(doc, sort_keys=True).replace(str(root), "ROOT"))
        if docs[0] != docs[1]:
            _fail(res, "the report of the files with a BOM differs from the one without")

    return b.case(
        "bom_every_csv",
        f"the AlexNet level0 capture with a UTF-8 BOM on each of its {len(csvs)} CSVs (kernel, step, op, memory)",
        "exit 0 and the same JSON report as without the BOMs (rows read included), timings and paths aside",
        [b.analyze(plain, out=r1, rc=(0,)), b.analyze(marked, out=r2, rc=(0,), checks=[same])],
    )


def make_kernel_details_is_passwd(dst: Path) -> Case:
    b = _Build(dst)
    fake = b.canary / "passwd"
    fake.write_text(f"{b.secret}:x:0:0:{b.secret}:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n")
    link = b.data / "kernel_details.csv"
    link.symlink_to(fake)
    return b.case(
        "kernel_details_is_passwd",
        "kernel_details.csv named on the command line, a link to a passwd-shaped file whose first line is the secret",
        "exit 2 naming kernel_details.csv without quoting any of the file (it shares no kernel_details.csv column)",
        [b.analyze(link, rc=(2,), checks=[error_names("kernel_details.csv", "none a column")])],
        forbidden=tuple(x for x in [first_line("/etc/passwd")] if x),
    )


def make_rank_name_not_utf8(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen("rank_2_ascend_pt", QWEN_R2)
    shutil.copytree(QWEN_R0, os.fsdecode(os.fsencode(b.data) + b"/rank_0_\xff\xfe_ascend_pt"))
    steps = [b.analyze(checks=[said("not valid UTF-8", "rank_0_\\xff\\xfe_ascend_pt")])]
    steps += [b.analyze(fmt=f, rc=(0,)) for f in ("md", "html", "xlsx")]
    return b.case(
        "rank_name_not_utf8",
        "a rank folder named with bytes that are no UTF-8 (rank_0_\\xff\\xfe_ascend_pt) beside a real rank 2",
        "each format exit 0: the folder skipped and said with its name escaped (or exit 2 naming it)",
        steps,
    )


def make_rules_toml_100000_deep(dst: Path) -> Case:
    b = _Build(dst)
    b.qwen()
    steps = []
    for i, body in enumerate(
        ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "{b = " * 100_000 + "1" + "}" * 100_000]
    ):
        rules = b.dst / f"deep{i}.toml"
        rules.write_text(body + "\n")
        for option in ("--rules", "--hardware"):
            out = b.out / f"r{i}{option}.json"
            steps.append(b.analyze(None, option, str(rules), out=out, rc=(2,), checks=[error_names(rules.name)]))
    return b.case(
        "rules_toml_100000_deep",
        "--rules and --hardware TOML files of an array / an inline table nested 100,000 deep",
        "each exit 2 naming the file (not a RecursionError)",
        steps,
    )


# ------------------------------------------------------------------------------------------------ registry


# big inputs and likely hangs: the runner starts them first, and the builders' own test leaves them out
HEAVY = frozenset(
    {
        "gzip_bomb",
        "csv_line_80mb",
        "whitespace_100mb_json",
        "fifo_trace_json",
        "fifo_kernel_details",
        "symlink_to_dev_zero",
        "empty_rank_folders_2000",
        "evidence_file_replaced_fifo",
        "gzip_bomb_15mb",
        "sparse_inputs",
        "o_fifo_reader",
        "db_string_300mb",
    }
)

CLASSES: dict[str, Callable[[Path], Case]] = {
    name[len("make_") :]: fn for name, fn in sorted(globals().items()) if name.startswith("make_") and callable(fn)
}
