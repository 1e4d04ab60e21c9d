"""The cited source rows of a report, read back from the original files as tables for the HTML and Excel reports.

Reading the cited rows back is rendering the evidence, not computing it: the values shown are the raw text of the
files at the locators the findings cite, exactly what ``sources.common.readback.read_back`` returns. The only difference
is
batching — each file is opened once for all the rows cited from it (a report can cite the same 800 MB trace from
dozens of findings) — and splitting: a CSV line is split with the csv module and shown under the file's header
names; a JSON event or object is flattened into ``a › b`` columns.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.evidence import Evidence
from profan.model.findings import Finding
from profan.sources.ascend_db import rows as ascend_db_rows
from profan.sources.common.readback import load_json_document, read_lines, resolve_pointer, source_path, trace_events
from profan.sources.discovery.discover import base_dir

KEY_SEP = " › "
MAX_FLAT_DEPTH = 3  # deeper JSON values are shown as compact JSON text

# Columns that name the row, tried in this order (CSV header names and chrome-trace keys).
NAME_COLUMNS = (
    "Name",
    "name",
    "Op Name",
    "OP Name",
    "Kernel Name",
    # rows of torch_npu's DB export (profan.sources.ascend_db.rows)
    "COMPUTE_TASK_INFO.name",
    "COMMUNICATION_OP.opName",
    "opName",
    "hccl_op_name",
)
TYPE_COLUMNS = (
    "Type",
    "OP Type",
    "Op Type",
    "cat",
    "Accelerator Core",
    "Task Type",
    "COMPUTE_TASK_INFO.opType",
    "COMMUNICATION_OP.opType",
    "opType",
    "type",
)
KEY_COLUMNS = (
    "Step Id",
    "Step",
    "Duration(us)",
    "dur",
    "Start Time(us)",
    "ts",
    "Accelerator Core",
    "Input Shapes",
    "Computing",
    "Communication(Not Overlapped)",
    "Free",
    "Stage",
    "Communication Time Info" + KEY_SEP + "Elapse Time(ms)",
    "Communication Time Info" + KEY_SEP + "Wait Time(ms)",
    "Communication Time Info" + KEY_SEP + "Transit Time(ms)",
    "ph",
    "pid",
    "tid",
    "step",
    "startNs",
    "endNs",
    "COMPUTE_TASK_INFO.taskType",
    "COMPUTE_TASK_INFO.inputShapes",
    "elapse_time",
    "wait_time",
    "transit_time",
)


@dataclass
class SourceRow:
    locator: str  # "line 57" / "event 1234" / the JSON pointer
    columns: list[str]
    cells: list[str]
    raw: str  # the text read_back() returns for this locator

    def as_dict(self) -> dict[str, str]:
        return dict(zip(self.columns, self.cells, strict=False))


@dataclass
class EvidenceTable:
    """One evidence item of one finding, with (some of) its cited rows read back."""

    finding: str
    index: int  # 1-based position in the finding's evidence
    evidence: Evidence
    columns: list[str] = field(default_factory=list)
    rows: list[SourceRow] = field(default_factory=list)
    error: str = ""

    @property
    def cited(self) -> int:
        return len(self.evidence.locators)

    @property
    def shown(self) -> int:
        return len(self.rows)


def locator_label(kind: str, loc: Any) -> str:
    return f"line {loc}" if kind == "lines" else f"event {loc}" if kind == "events" else str(loc)


def flatten(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Scalars of a JSON value as (path, text) pairs; deep or list values stay compact JSON."""
    if isinstance(obj, dict) and obj and len(prefix) < MAX_FLAT_DEPTH:
        out: list[tuple[str, str]] = []
        for k, value in obj.items():
            out += flatten(value, (*prefix, str(k)))
        return out
    key = KEY_SEP.join(prefix) or "value"
    if isinstance(obj, str):
        return [(key, obj)]
    return [(key, json.dumps(obj, ensure_ascii=False))]


def split_csv_line(text: str) -> list[str]:
    rows = list(csv.reader([text]))
    return rows[0] if rows else []


class RowReader:
    """Reads cited rows back, one pass per file. Missing or unreadable files become an error text, not a crash:
    a report may be rendered where only some of the data is still present."""

    def __init__(self, root: Path | None) -> None:
        self.root = None if root is None else base_dir(root)  # None: a report whose data it may not read
        self._rows: dict[tuple[str, str], SourceRow] = {}
        self._headers: dict[str, list[str]] = {}
        self._errors: dict[str, str] = {}

    def load(self, wanted: dict[str, tuple[str, set]]) -> None:
        """`wanted`: file -> (locator kind, locators)."""
        for file, (kind, locs) in sorted(wanted.items()):
            if self.root is None:
                self._errors[file] = (
                    f"could not read {file} back: the report's data folder is not known "
                    "(profan evidence REPORT ID --root DIR reads it)"
                )
                continue
            try:
                path = source_path(self.root, file)
                if kind == "lines":
                    self._load_csv(file, path, locs)
                elif kind == "pointers" and ascend_db_rows.is_db(path):
                    self._load_db(file, path, locs)
                else:
                    self._load_json(file, path, kind, locs)
            except ProfanInputError as exc:
                self._errors[file] = f"could not read {file} back: {exc.problem}"
            except (OSError, ValueError, KeyError, IndexError, TypeError, csv.Error) as exc:
                self._errors[file] = f"could not read {file} back: {exc.__class__.__name__}: {exc}"

    def _load_csv(self, file: str, path: Path, locs: set) -> None:
        got = read_lines(path, {1, *locs})
        header = split_csv_line(got.get(1, "").lstrip("\ufeff"))  # a BOM is not part of the first name
        self._headers[file] = header
        for loc in locs:
            text = got.get(loc)
            if text is None:
                self._rows[(file, f"line {loc}")] = SourceRow(f"line {loc}", ["(row)"], ["<beyond end of file>"], "")
                continue
            cells = split_csv_line(text)
            cols = header[: len(cells)] + [f"column {index + 1}" for index in range(len(header), len(cells))]
            self._rows[(file, f"line {loc}")] = SourceRow(f"line {loc}", cols, cells, text)

    def _load_db(self, file: str, path: Path, locs: set) -> None:
        """Rows of a DB (``/TABLE/ROWID``), one query per table, shown like a JSON object's columns."""
        for label, row in ascend_db_rows.read_rows(path, sorted(locs)):
            pairs = flatten(row)
            self._rows[(file, label)] = SourceRow(
                label, [k for k, _ in pairs], [v for _, v in pairs], json.dumps(row, ensure_ascii=False)
            )

    def _load_json(self, file: str, path: Path, kind: str, locs: set) -> None:
        doc = load_json_document(path)
        events = trace_events(doc) if kind == "events" else None
        for loc in locs:
            label = locator_label(kind, loc)
            try:
                value = events[int(loc)] if events is not None else resolve_pointer(doc, loc)
            except (IndexError, KeyError, ValueError, TypeError):
                self._rows[(file, label)] = SourceRow(label, ["(row)"], ["<not found in file>"], "")
                continue
            pairs = flatten(value)
            self._rows[(file, label)] = SourceRow(
                label, [k for k, _ in pairs], [v for _, v in pairs], json.dumps(value, ensure_ascii=False)
            )
        del doc

    def table(self, finding: str, index: int, evidence: Evidence, locators: Iterable) -> EvidenceTable:
        out = EvidenceTable(finding=finding, index=index, evidence=evidence, error=self._errors.get(evidence.file, ""))
        if out.error:
            return out
        rows = [self._rows[(evidence.file, locator_label(evidence.kind, loc))] for loc in locators]
        out.rows = rows
        if evidence.kind == "lines":
            header = self._headers.get(evidence.file, [])
            longest = max((len(row.columns) for row in rows), default=0)
            out.columns = header if len(header) >= longest else max((row.columns for row in rows), key=len)
        else:
            seen: dict[str, None] = {}
            for row in rows:
                seen.update(dict.fromkeys(row.columns))
            out.columns = list(seen)
        return out


def read_evidence(
    root: Path | None, findings: Sequence[Finding | Cause], limit: dict[tuple[str, int], int] | None = None
) -> dict[str, list[EvidenceTable]]:
    """Evidence tables per finding (or cause) id. `limit[(id, item index)]` caps the rows read for an item
    (default: every cited row)."""
    plan: list[tuple[Finding | Cause, int, Evidence, tuple]] = []
    wanted: dict[str, tuple[str, set]] = {}
    for finding in findings:
        for index, evidence in enumerate(finding.evidence, start=1):
            n = len(evidence.locators) if limit is None else limit.get((finding.id, index), len(evidence.locators))
            locs = evidence.locators[:n]
            plan.append((finding, index, evidence, locs))
            kind, acc = wanted.setdefault(evidence.file, (evidence.kind, set()))
            if kind == evidence.kind:
                acc.update(locs)
    reader = RowReader(root)
    reader.load(wanted)
    out: dict[str, list[EvidenceTable]] = {finding.id: [] for finding in findings}
    for finding, index, evidence, locs in plan:
        out[finding.id].append(reader.table(finding.id, index, evidence, locs))
    return out


def pick(row: SourceRow, names: Iterable[str]) -> str:
    d = row.as_dict()
    return next((d[name] for name in names if d.get(name, "") not in ("", None)), "")


def key_values(row: SourceRow, evidence: Evidence, limit: int = 8) -> list[tuple[str, str]]:
    """The values that identify and size a row: the ones the finding sums or filters on, then common keys."""
    d = row.as_dict()
    wanted = [*evidence.values.keys(), *KEY_COLUMNS]
    out: dict[str, str] = {}
    for column in wanted:
        if column in d and column not in NAME_COLUMNS and column not in out:
            out[column] = d[column]
    for column in row.columns:  # unknown file layout: fall back to the first columns
        if len(out) >= limit:
            break
        if column not in out and column not in NAME_COLUMNS:
            out[column] = d[column]
    return list(out.items())[:limit]
