"""Reading cited rows back from the analysed files: the lines, JSON pointers, trace events and DB rows that an
evidence item names, checked against the sizes the report recorded.

Why here: reading files is the sources floor's work; `model.evidence` only describes what is cited, so the model
depends on no reader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from profan import trust
from profan.model.causes import Cause
from profan.model.errors import ProfanInputError
from profan.model.evidence import Evidence, db_table
from profan.model.files import open_regular
from profan.model.findings import Finding
from profan.sources.discovery.discover import base_dir
from profan.sources.discovery.names import profiler_file_name


def read_lines(path: Path, wanted: Iterable[int]) -> dict[int, str]:
    """Return the physical lines `wanted` (1-based) of a text file verbatim, without the line terminator.

    Streams the file, so it works on GB files; stops after the last wanted line.
    """
    want = sorted(set(int(w) for w in wanted))
    if not want:
        return {}
    out: dict[int, str] = {}
    last = want[-1]
    targets = set(want)
    with open_regular(path) as handle:
        for index, raw in enumerate(handle, start=1):
            if index in targets:
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                out[index] = (raw[:-1] if raw.endswith(b"\r") else raw).decode("utf-8", errors="replace")
            if index >= last:
                break
    return out


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """Resolve an RFC 6901 JSON pointer."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise ValueError(f"{pointer[:40]!r} is no JSON pointer (it must start with '/')")
    node = doc
    for part in pointer[1:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def load_json_document(path: Path) -> Any:
    """A cited JSON file, whole. A ``.gz`` inflates under the same bounds as the trace reader's (a report may
    cite a file that turned into a decompression bomb of the recorded size)."""
    from profan.sources.trace.chunks import read_bytes

    return json.loads(read_bytes(path))


def trace_events(doc: Any) -> list:
    if isinstance(doc, dict):
        return doc.get("traceEvents", [])
    return doc


def inside_root(file: str) -> bool:
    """Whether a cited path stays inside the analysed folder by its text. A report is data too (shared, or written
    by someone else): it may make profan read only files of its own folder, never ``../../etc/passwd``."""
    rel = os.path.normpath(file)
    return not (os.path.isabs(rel) or rel == ".." or rel.startswith(".." + os.sep))


def source_path(base: Path, file: str) -> Path:
    """The file a report cites, once it is sure to be a regular file inside ``base``: by its text, and again with
    every symlink resolved (a ``kernel_details.csv`` linked to ``/etc/passwd`` is refused, not printed)."""
    if not isinstance(file, str) or not inside_root(file):
        raise ProfanInputError(file, "cited file lies outside the analysed folder; refused")
    path = base / os.path.normpath(file)
    if not path.exists():
        raise ProfanInputError(path, "cited file no longer exists")
    if not trust.inside(path, base):
        raise ProfanInputError(path, "is a link to a file outside the analysed folder; refused")
    if not path.is_file():
        raise ProfanInputError(path, "cited file is not a regular file; refused")
    return path


def read_back(root: Path, evidence: Evidence) -> list[tuple[str, str]]:
    """The raw text behind one evidence item, as (locator, text) pairs in the cited order."""
    path = source_path(root, evidence.file)
    if evidence.lines:
        if any(line < 1 for line in evidence.lines):
            raise ProfanInputError(path, f"cited as line {min(evidence.lines)}, which is no line number")
        got = read_lines(path, evidence.lines)
        past = [line for line in evidence.lines if line not in got]
        if past:
            raise ProfanInputError(
                path,
                f"has no line {past[0]} any more (it has fewer lines than when the report "
                "was made): the file changed since; analyse it again",
            )
        return [(f"line {line}", got[line]) for line in evidence.lines]
    if evidence.pointers:
        from profan.sources.ascend_db import rows as ascend_db_rows

        if ascend_db_rows.is_db(path):
            return [
                (pointer, json.dumps(row, ensure_ascii=False))
                for pointer, row in ascend_db_rows.read_rows(path, evidence.pointers)
            ]
    try:
        doc = load_json_document(path)
    except (ValueError, RecursionError, OSError, EOFError) as exc:
        raise ProfanInputError(
            path,
            f"is cited by {evidence.kind} but cannot be read as JSON "
            f"({type(exc).__name__}); the report does not fit its data",
        ) from None
    if evidence.events:
        events = trace_events(doc)
        past = [event for event in evidence.events if not 0 <= event < len(events)]
        if past:
            raise ProfanInputError(
                path,
                f"has no event {past[0]} any more ({len(events)} events): the file "
                "changed since the report; analyse it again",
            )
        return [(f"event {event}", json.dumps(events[event], ensure_ascii=False)) for event in evidence.events]
    return [(pointer, json.dumps(resolve_pointer(doc, pointer), ensure_ascii=False)) for pointer in evidence.pointers]


def file_sizes(base: Path, files: set[str]) -> dict[str, int]:
    """Bytes of each source file (paths relative to ``base``), recorded in the report: `check_sizes` compares
    them when evidence is read back, so rows are never quoted from a file that changed since the analysis."""
    out = {}
    for file in sorted({db_table(file)[0] for file in files}):  # a DB table's rows are the DB file's
        try:
            out[file] = (base / file).stat().st_size
        except OSError:
            continue
    return out


def check_sizes(base: Path, recorded: dict[str, int] | None, files: set[str], vouched: bool = True) -> None:
    """Raise when a cited file's size differs from the one the report recorded (an edited, truncated or replaced
    file: its line N may hold another row now), and a cited file the analysis did not read at all. A copy keeps
    the size but not always the modification time, so time is not compared.

    ``vouched``: whether the list of files read is this user's profan's own (a sealed report, or one analysed in
    this process). Otherwise the list is only the report's word, so a cited file must also be listed and be named
    as a profiler file: a report handed over cannot make `profan evidence` print ``.ssh/id_rsa`` beside it."""
    if not vouched:
        for file in sorted(files):
            if not profiler_file_name(PurePosixPath(file).name):
                raise ProfanInputError(file, "is cited, but is no profiler file and the report is not sealed; refused")
            if not isinstance(recorded, dict) or file not in recorded:
                raise ProfanInputError(file, "is cited, but the report does not list it as read; refused")
    if not isinstance(recorded, dict):
        return
    unread = sorted(file for file in files if file not in recorded)
    if unread:
        if not inside_root(unread[0]):
            raise ProfanInputError(unread[0], "cited file lies outside the analysed folder; refused")
        raise ProfanInputError(unread[0], "is cited, but the analysis the report records did not read it; refused")
    for file in sorted(files):
        try:
            now = (base / file).stat().st_size
        except OSError:
            continue  # read_back says the file is gone
        if not isinstance(recorded[file], int) or isinstance(recorded[file], bool):
            raise ProfanInputError(
                file, f"the report records its size as {str(recorded[file])[:40]!r}, not a byte count"
            )
        if now != recorded[file]:
            raise ProfanInputError(
                base / file,
                f"changed since the report ({recorded[file]:,} bytes then, {now:,} now): "
                "its cited rows may be other rows; analyse it again",
            )


def evidence_rows(root: Path, finding: Finding | Cause, limit: int | None = None) -> list[dict[str, Any]]:
    """The cited rows of each evidence item of a finding or a cause (a cause's are those of its source findings),
    read back verbatim: the first ``limit`` of each item (None: all; 0: none, and the file is not read — a caller
    that wants only the locators should not pay for a scan of a large CSV)."""
    base = base_dir(root)
    out = []
    for evidence in finding.evidence:
        rows = []
        if limit != 0:
            cited = (
                evidence
                if limit is None or limit >= len(evidence.locators)
                else replace(evidence, **{evidence.kind: evidence.locators[:limit]})
            )
            rows = [{"locator": loc, "text": text} for loc, text in read_back(base, cited)]
        out.append(
            {
                "file": evidence.file,
                "row_count": evidence.row_count,
                "select": evidence.select,
                "rows": rows,
                evidence.kind: list(evidence.locators),
            }
        )
    return out
