"""What discovery reads of a file without parsing it: whether a ``*.json`` / ``*.json.gz`` is a Kineto trace (its
first 64 KiB) and the rank its ``distributedInfo`` or its name gives, the rank id of a small side file
(``profiler_info``, msprof's ``info.json``), and the rank-in-a-name patterns of the built-in rule pack.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import zlib
from pathlib import Path

from profan.model.files import open_regular
from profan.rulepack import roles

_SNIFF_BYTES = 1 << 16


_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')


_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(\d+)"?\s*[,}]')  # 1.5: no rank


@functools.cache
def rank_in_name(kind: str) -> re.Pattern[str]:
    """The rule pack's built-in pattern of a rank id in a folder name (``folder``) or trace file name (``trace``):
    roles ``rank_in_folder_name`` / ``rank_in_trace_name``. Discovery runs before any pack is applied."""
    builtin = roles.defaults()
    return re.compile(builtin.rank_in_folder_name if kind == "folder" else builtin.rank_in_trace_name)


def _trace_head(path: Path) -> bytes:
    """The first 64 KiB of a (possibly gzipped) trace; raises OSError/EOFError/zlib errors on unreadable files."""
    if path.name.endswith(".gz"):
        with open_regular(path) as raw, gzip.GzipFile(fileobj=raw) as handle:
            return handle.read(_SNIFF_BYTES)
    with open_regular(path) as handle:
        return handle.read(_SNIFF_BYTES)


def trace_body(path: Path, max_bytes: int) -> bytes | None:
    """A (possibly gzipped) trace's whole text where the file is at most ``max_bytes`` on disk; None for a larger
    or unreadable one (its reader names the problem later)."""
    try:
        if path.stat().st_size > max_bytes:
            return None
        if path.name.endswith(".gz"):
            with open_regular(path) as raw, gzip.GzipFile(fileobj=raw) as handle:
                return handle.read(max_bytes * 64)  # a bomb stops here: text 64 times its file is no trace
        with open_regular(path) as handle:
            return handle.read()
    except (OSError, EOFError, zlib.error):
        return None


def _kineto_array(head: bytes) -> bool:
    """A bare event array (the 2020-21 PyTorch profiler wrote no top-level object) is Kineto's when its head holds
    an event of a Kineto category (roles ``kineto_keep_cats``, other writers' names included)."""
    cats = b"|".join(re.escape(kineto_keep_cat.encode()) for kineto_keep_cat in roles.defaults().kineto_keep_cats)
    return re.search(rb'"cat"\s*:\s*"(?:' + cats + rb')"', head) is not None


def sniff_kineto(path: Path) -> tuple[bool, int | None, str]:
    """(is a Kineto chrome trace, distributedInfo.rank if it is in the head, why not a trace).

    Kineto writes schemaVersion, deviceProperties and distributedInfo before traceEvents, so the head suffices.
    A .gz that does not decompress is reported as a trace (the reader then names the exact problem).
    """
    try:
        head = _trace_head(path)
    except (OSError, EOFError, zlib.error):
        if path.name.endswith(".gz"):
            return True, None, ""
        return False, None, f"{path.name}: unreadable"
    body = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if body.startswith(b"[") and _kineto_array(head):
        return True, None, ""
    if not body.startswith(b"{") or not any(k in head for k in _KINETO_KEYS):
        return False, None, f"{path.name} is not a PyTorch/Kineto trace (no traceEvents)"
    match = _DIST_RANK.search(head)
    return True, (rank_id(match.group(1)) if match else None), ""


def trace_rank(path: Path) -> tuple[int | None, str]:
    """A Kineto trace's rank and where it was read: ``distributedInfo.rank`` in its head, else its file name."""
    _, rank, _ = sniff_kineto(path)
    if rank_id(rank) is not None:
        return rank, f"distributedInfo.rank in {path.name}"
    match = rank_in_name("trace").search(path.name)
    if match and rank_id(match.group(1)) is not None:
        return int(match.group(1)), f"file name {path.name}"
    return None, ""


def read_json_quiet(path: Path) -> dict | None:
    """A small side file's object, for its rank id; None when it is not one (its reader says why later)."""
    try:
        if path.stat().st_size > SIDE_FILE_BYTES:
            return None
        with open_regular(path) as handle:
            data = json.loads(handle.read())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError, RecursionError):
        return None


SIDE_FILE_BYTES = 64 << 20  # profiler_info / info.json are a few KB: a bigger one holds no rank id worth reading


MAX_RANK = 2**31 - 1  # rank ids are 32-bit in every profiler; a larger number is no rank id


def rank_id(value: object) -> int | None:
    """A usable rank id from a file's value (a number, or text of digits); None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        rank = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return rank if 0 <= rank <= MAX_RANK and (not isinstance(value, float) or value == rank) else None
