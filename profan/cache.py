"""Parquet cache of parsed chrome traces and reduced kernel files, so a second analysis of the same files is
near-instant.

Why: parsing is the only step whose cost grows with the input (seconds per GB); everything after it works on the
parsed table (a trace's events) or the reduced one (a kernel file's groups, whose cited lines are plain columns
and so survive the round trip). The key is the file's absolute path, size and mtime plus the table schema version
and the reader variant, so an edited, replaced or re-exported file is never served stale, and a new profan version
with another table shape never reads an old entry.

Location: ``$PROFAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/profan``, else ``~/.cache/profan``. Set ``PROFAN_NO_CACHE=1``
(or ``PROFAN_CACHE_DIR=off``) to disable it. A cache that cannot be written (read-only home, full disk) is skipped
silently: caching is an optimisation, never a reason to fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:  # kernel-file callers need no trace reader (nor pyarrow, which it imports)
    from profan.sources.chrome_trace import Trace

SCHEMA_VERSION = 2  # bump when the event/detail table shape or meaning changes
TABLE_VERSION = 2  # bump when a `cached_table` producer changes the shape or meaning of its table


def cache_dir() -> Path | None:
    if os.environ.get("PROFAN_NO_CACHE", "").strip() not in ("", "0"):
        return None
    env = os.environ.get("PROFAN_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "none", "0") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "profan"


def key(path: Path, variant: str) -> str:
    st = path.stat()
    raw = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, SCHEMA_VERSION, variant])
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _load(entry: Path, path: Path) -> Trace | None:
    from profan.sources.chrome_trace import Trace

    try:
        meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        events = pl.read_parquet(entry / "events.parquet")
        details = pl.read_parquet(entry / "details.parquet")
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    return Trace(path=path, events=events, details=details, layout=meta["layout"], meta=meta["meta"],
                 no_phase=int(meta.get("no_phase", 0)))


def _write_entry(entry: Path, write: Callable[[Path], None]) -> None:
    """Fill a temporary folder beside ``entry`` with ``write``, then rename it into place: a concurrent reader sees
    a whole entry or none. An unwritable cache is skipped."""
    tmp: Path | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        write(tmp)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _store(entry: Path, tr: Trace) -> None:
    def write(tmp: Path) -> None:
        tr.events.write_parquet(tmp / "events.parquet", compression="zstd")
        tr.details.write_parquet(tmp / "details.parquet", compression="zstd")
        (tmp / "meta.json").write_text(json.dumps({"layout": tr.layout, "meta": tr.meta, "source": str(tr.path),
                                                   "no_phase": tr.no_phase}), encoding="utf-8")

    _write_entry(entry, write)


def cached_parse(path: Path, variant: str, parse: Callable[[Path], Trace]) -> tuple[Trace, bool]:
    """(trace, served from cache). ``variant`` names the reader options (row filter) that shaped the table."""
    base = cache_dir()
    if base is None:
        return parse(path), False
    entry = base / "traces" / key(path, variant)
    if entry.is_dir():
        hit = _load(entry, path)
        if hit is not None:
            return hit, True
    tr = parse(path)
    _store(entry, tr)
    return tr, False


def cached_table(path: Path, kind: str, build: Callable[[], tuple[pl.DataFrame, dict[str, Any]]]
                 ) -> tuple[pl.DataFrame, dict[str, Any], bool]:
    """(table, its small JSON-able facts, served from cache) for one input file. ``kind`` names the producer and
    its version; ``build`` computes both when there is no entry. Same keying, atomic writes and silent skip on
    an unwritable cache as `cached_parse`."""
    base = cache_dir()
    if base is None:
        df, facts = build()
        return df, facts, False
    entry = base / "tables" / key(path, f"{kind}/{TABLE_VERSION}")
    if entry.is_dir():
        try:
            facts = json.loads((entry / "facts.json").read_text(encoding="utf-8"))
            return pl.read_parquet(entry / "table.parquet"), facts, True
        except (OSError, ValueError, pl.exceptions.PolarsError):
            pass
    df, facts = build()

    def write(tmp: Path) -> None:
        df.write_parquet(tmp / "table.parquet", compression="zstd")
        (tmp / "facts.json").write_text(json.dumps({**facts, "source": str(path)}), encoding="utf-8")

    _write_entry(entry, write)
    return df, facts, False
