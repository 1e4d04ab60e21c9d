"""Parquet cache of parsed chrome traces and reduced kernel files, so a second analysis of the same files is
near-instant.

Why: parsing is the only step whose cost grows with the input (seconds per GB); everything after it works on the
parsed table (a trace's events) or the reduced one (a kernel file's groups, whose cited lines are plain columns
and so survive the round trip). The key is the file's absolute path, size and mtime, a hash of its first and last
64 KiB, plus the table schema version and the reader variant, so an edited, replaced or re-exported file is never
served stale — not even one rewritten with the same size and mtime — and a new profan version with another table
shape never reads an old entry.

An entry can still be damaged (a crash of another tool, a disk error, a hand edit, an entry of another shape), so
none is trusted: its JSON carries a digest of itself (any changed, added or removed key is a miss) and, per table,
the column names, dtypes and row count written, which the Parquet file read back must match. A mismatch or a read
error is a miss: the input is parsed again and the entry rewritten. A damaged entry therefore costs one parse,
never a failed run or a different report.

Location: ``$PROFAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/profan``, else ``~/.cache/profan``. Set ``PROFAN_NO_CACHE=1``
(or ``PROFAN_CACHE_DIR=off``) to disable it. A cache that cannot be written (read-only home, full disk) is skipped
silently: caching is an optimisation, never a reason to fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from profan.model.files import open_regular

if TYPE_CHECKING:  # kernel-file callers need no trace reader (nor pyarrow, which it imports)
    from profan.sources.trace.chrome import Trace

SCHEMA_VERSION = 3  # bump when the event/detail table shape or meaning changes
TABLE_VERSION = 2  # bump when a `cached_table` producer changes the shape or meaning of its table
EDGE_BYTES = 64 << 10  # bytes hashed at each end of an input file for its key

# anything that goes wrong reading an entry is a miss (polars reports some damaged Parquet files as a panic,
# which is no Exception)
_UNREADABLE = (Exception, pl.exceptions.PanicException)


def cache_dir() -> Path | None:
    if os.environ.get("PROFAN_NO_CACHE", "").strip() not in ("", "0"):
        return None
    env = os.environ.get("PROFAN_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "none", "0") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "profan"


def key(path: Path, variant: str) -> str | None:
    """Path, size, mtime and the bytes at both ends: an appended, truncated or re-exported file changes an end
    even where a copy tool kept its size and mtime; hashing the ends only keeps the key cheap on a 1 GB file.
    None (no caching) for what is no regular file or cannot be read: the reader then says what is wrong with it."""
    try:
        return _key(path, variant)
    except OSError:
        return None


def _key(path: Path, variant: str) -> str | None:
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read below
        return None
    h = hashlib.sha256(json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, SCHEMA_VERSION, variant]).encode())
    with open_regular(path) as handle:
        h.update(handle.read(EDGE_BYTES))
        handle.seek(max(0, st.st_size - EDGE_BYTES))
        h.update(handle.read(EDGE_BYTES))
    return h.hexdigest()[:32]


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _frames_spec(frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    return {
        name: {"columns": [[c, str(t)] for c, t in value.schema.items()], "rows": value.height}
        for name, value in frames.items()
    }


def _write_doc(file: Path, doc: dict[str, Any], frames: dict[str, pl.DataFrame]) -> None:
    """Write ``frames`` as Parquet beside ``file`` and ``doc`` as its JSON, with the frames' shape and a digest
    taken of the JSON as it will read back (a round trip turns tuples into lists and keys into text)."""
    for name, value in frames.items():
        value.write_parquet(file.parent / f"{name}.parquet", compression="zstd")
    doc = json.loads(json.dumps({**doc, "frames": _frames_spec(frames)}))
    file.write_text(json.dumps({**doc, "check": _digest(doc)}), encoding="utf-8")


def _read_doc(file: Path, needs: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, pl.DataFrame]] | None:
    """The JSON (holding the keys ``needs``) and tables `_write_doc` wrote, or None when anything differs from
    what was written."""
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
        check = doc.pop("check")
        if _digest(doc) != check or not set(needs) <= doc.keys():
            return None
        frames = {name: pl.read_parquet(file.parent / f"{name}.parquet", glob=False) for name in doc["frames"]}
        if _frames_spec(frames) != doc["frames"]:
            return None
    except _UNREADABLE:
        return None
    return doc, frames


def _write_entry(entry: Path, write: Callable[[Path], None]) -> None:
    """Fill a temporary folder beside ``entry`` with ``write``, then rename it into place: a concurrent reader sees
    a whole entry or none. A damaged entry in the way is moved aside first (a folder cannot replace a non-empty
    one). An unwritable cache is skipped."""
    tmp: Path | None = None
    old: Path | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        write(tmp)
        if entry.exists():
            old = Path(tempfile.mkdtemp(prefix=".old-", dir=entry.parent))
            os.replace(entry, old)
        os.replace(tmp, entry)
        tmp = None
    except OSError:
        pass
    for leftover in (tmp, old):
        if leftover is not None:
            shutil.rmtree(leftover, ignore_errors=True)


def cached_parse(path: Path, variant: str, parse: Callable[[Path], Trace]) -> tuple[Trace, bool]:
    """(trace, served from cache). ``variant`` names the reader options (row filter) that shaped the table."""
    from profan.sources.trace.chrome import Trace

    base = cache_dir()
    name = None if base is None else key(path, variant)
    if base is None or name is None:
        return parse(path), False
    entry = base / "traces" / name
    hit = _read_doc(entry / "meta.json", ("layout", "meta", "no_phase")) if entry.is_dir() else None
    if hit is not None:
        doc, frames = hit
        return Trace(
            path=path,
            events=frames["events"],
            details=frames["details"],
            layout=doc["layout"],
            meta=doc["meta"],
            no_phase=doc["no_phase"],
        ), True
    trace = parse(path)
    _write_entry(
        entry,
        lambda tmp: _write_doc(
            tmp / "meta.json",
            {"layout": trace.layout, "meta": trace.meta, "source": str(trace.path), "no_phase": trace.no_phase},
            {"events": trace.events, "details": trace.details},
        ),
    )
    return trace, False


def cached_table(
    path: Path, kind: str, build: Callable[[], tuple[pl.DataFrame, dict[str, Any]]]
) -> tuple[pl.DataFrame, dict[str, Any], bool]:
    """(table, its small JSON-able facts, served from cache) for one input file. ``kind`` names the producer and
    its version; ``build`` computes both when there is no entry. Same keying, checks, atomic writes and silent
    skip on an unwritable cache as `cached_parse`."""
    base = cache_dir()
    name = None if base is None else key(path, f"{kind}/{TABLE_VERSION}")
    if base is None or name is None:
        frame, facts = build()
        return frame, facts, False
    entry = base / "tables" / name
    hit = _read_doc(entry / "facts.json", ("facts",)) if entry.is_dir() else None
    if hit is not None:
        doc, frames = hit
        return frames["table"], doc["facts"], True
    frame, facts = build()
    _write_entry(
        entry, lambda tmp: _write_doc(tmp / "facts.json", {"facts": facts, "source": str(path)}, {"table": frame})
    )
    return frame, facts, False
