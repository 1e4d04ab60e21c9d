"""Discovery: a path in, the ranks and their files out. No file bodies are parsed here beyond rank ids.

Ascend layouts recognised (see shared reference `ascend-formats.md` §1):

* a rank directory holds ``ASCEND_PROFILER_OUTPUT/`` and/or ``profiler_info_{rank}.json`` — whatever its name
  (``*_ascend_pt``, ``*_ascend_ms``, or renamed like ``test_rank_0``);
* a bare ``ASCEND_PROFILER_OUTPUT/`` folder, or any folder holding ``kernel_details.csv`` directly;
* msprof's ``PROF_*`` directory with ``mindstudio_profiler_output/op_summary_*.csv``.

Derived outputs (msprof-analyze's ``cluster_analysis_output/``) are skipped and that is said.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from profan.errors import ProfanInputError

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
DERIVED_DIRS = {"cluster_analysis_output"}
_PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9A-Za-z]+$")
_INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_OP_SUMMARY = re.compile(r"^op_summary_.*\.csv$")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz")

# logical name -> file name inside ASCEND_PROFILER_OUTPUT
ASCEND_FILES = {
    "kernel_details": "kernel_details.csv",
    "step_trace_time": "step_trace_time.csv",
    "op_statistic": "op_statistic.csv",
    "communication": "communication.json",
    "communication_matrix": "communication_matrix.json",
    "trace_view": "trace_view.json",
}


@dataclass
class RankSource:
    """One rank's files. ``rank`` is None until resolved; ``rank_origin`` says how it was decided."""

    path: Path
    kind: str  # "ascend" | "msprof" | "kineto"
    files: dict[str, Path] = field(default_factory=dict)
    rank: int | None = None
    rank_origin: str = ""
    device_id: int | None = None
    ignored: list[Path] = field(default_factory=list)  # a profiler file's name, but a folder: said, then ignored

    def rel(self, root: Path, logical: str) -> str:
        return relpath(self.files[logical], root)


@dataclass
class Discovery:
    root: Path
    ranks: list[RankSource]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def format(self) -> str:
        kinds = sorted({r.kind for r in self.ranks})
        return kinds[0] if len(kinds) == 1 else "+".join(kinds)


def base_dir(root: Path) -> Path:
    """The folder report paths are relative to: the analysed folder, or the folder of an analysed file."""
    return root if root.is_dir() else root.parent


def relpath(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(base_dir(root).resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def discover(path: str | Path) -> Discovery:
    root = Path(path)
    if not root.exists():
        raise ProfanInputError(root, "no such file or directory")
    if root.is_file():
        return _discover_file(root)
    found: list[RankSource] = []
    notes: list[str] = []
    rejected: list[str] = []  # *.json files that are not traces, for the error message
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames.sort()
        skipped = [n for n in dirnames if n in DERIVED_DIRS or n.startswith(".")]
        for n in skipped:
            if n in DERIVED_DIRS:
                notes.append(f"skipped {relpath(d / n, root)}/: derived output of another tool, not profiler data")
        dirnames[:] = [n for n in dirnames if n not in skipped]
        rank = _rank_dir(d, dirnames, filenames)
        if rank is not None:
            found.append(rank)
            dirnames[:] = []  # a rank directory's subfolders (PROF_*, FRAMEWORK, logs) are its raw data
        else:
            found.extend(_kineto_ranks(d, filenames, rejected))
    if not found:
        why = f"; {rejected[0]}" if rejected else ""
        raise ProfanInputError(root, "no profiler output found (looked for ASCEND_PROFILER_OUTPUT/, "
                                     "profiler_info_*.json, kernel_details.csv, PROF_*/mindstudio_profiler_output/, "
                                     f"PyTorch/Kineto *.json / *.json.gz traces){why}")
    disc = Discovery(root=root, ranks=found, notes=notes)
    _resolve_ranks(disc)
    _note_missing_files(disc)
    kinds = sorted({r.kind for r in disc.ranks})
    if len(kinds) > 1:  # e.g. NPU and GPU ranks side by side: one job only if the user says so
        disc.warnings.append(f"the folder holds ranks of {len(kinds)} kinds ({', '.join(kinds)}); they are analysed "
                             "as one job — analyse each collection on its own if they are separate runs")
    return disc


def _discover_file(path: Path) -> Discovery:
    name = path.name
    if name in ("kernel_details.csv",) or _OP_SUMMARY.match(name):
        rs = RankSource(path=path.parent, kind="ascend" if name == "kernel_details.csv" else "msprof",
                        files={"kernel_details": path})
        disc = Discovery(root=path, ranks=[rs])
        _resolve_ranks(disc)
        return disc
    if name.endswith(_TRACE_SUFFIXES):
        # named explicitly: treat it as a trace and let the reader say precisely what is wrong with it
        disc = Discovery(root=path, ranks=[RankSource(path=path, kind="kineto", files={"kineto_trace": path})])
        _resolve_ranks(disc)
        return disc
    raise ProfanInputError(path, "not a profiler output file profan can read (expected a directory, "
                                 "kernel_details.csv, op_summary_*.csv or a Kineto *.json / *.json.gz trace)")


def _rank_dir(d: Path, dirnames: list[str], filenames: list[str]) -> RankSource | None:
    infos = [f for f in filenames if _INFO_FILE.match(f)]
    if d.name == OUTPUT_DIR:
        # A bare ASCEND_PROFILER_OUTPUT passed directly: its parent may still hold profiler_info_*.json.
        parent_infos = [p.name for p in d.parent.glob("profiler_info*.json") if _INFO_FILE.match(p.name)]
        return _ascend_rank(d.parent, d, parent_infos)
    if OUTPUT_DIR in dirnames or infos:
        out = d / OUTPUT_DIR
        rs = _ascend_rank(d, out if out.is_dir() else None, infos)
        rs.ignored += [d / f for f in sorted(dirnames) if _INFO_FILE.match(f)]  # a folder named like the file
        return rs
    if _PROF_DIR.match(d.name) and "mindstudio_profiler_output" in dirnames:
        return _msprof_rank(d)
    if d.name == "mindstudio_profiler_output" and any(_OP_SUMMARY.match(f) for f in filenames):
        # the msprof output folder itself (passed directly, or its PROF_* parent was renamed)
        return _msprof_rank(d.parent)
    if {"kernel_details.csv", "trace_view.json", "step_trace_time.csv"} & set(filenames):
        # the integrated files copied out of ASCEND_PROFILER_OUTPUT into a folder of their own
        return _ascend_rank(d, d, [])
    return None


def _ascend_rank(d: Path, out: Path | None, infos: list[str]) -> RankSource:
    rs = RankSource(path=d, kind="ascend")
    if out is not None:
        for logical, fname in ASCEND_FILES.items():
            if _is_file(out / fname, rs):
                rs.files[logical] = out / fname
    for f in sorted(infos):
        if _is_file(d / f, rs):
            rs.files["profiler_info"] = d / f
    if _is_file(d / "profiler_metadata.json", rs):
        rs.files["profiler_metadata"] = d / "profiler_metadata.json"
    return rs


def _is_file(p: Path, rs: RankSource) -> bool:
    """A readable regular file. A folder of that name is noted on the rank (and said as a warning); a folder
    whose entries cannot be listed is one clear input error, not a traceback."""
    try:
        if p.is_dir():
            rs.ignored.append(p)
            return False
        return p.is_file()
    except OSError as exc:
        raise ProfanInputError(p.parent, f"cannot read: {exc.strerror or exc}") from None


def _msprof_rank(d: Path) -> RankSource:
    out = d / "mindstudio_profiler_output"
    rs = RankSource(path=d, kind="msprof")
    summaries = sorted(p for p in out.glob("op_summary_*.csv") if _is_file(p, rs))
    if summaries:
        rs.files["kernel_details"] = summaries[-1]
    stats = sorted(p for p in out.glob("op_statistic_*.csv") if _is_file(p, rs))
    if stats:
        rs.files["op_statistic"] = stats[-1]
    for info in sorted(d.glob("device_*/info.json.*")):
        rs.files["device_info"] = info
        break
    return rs


_SNIFF_BYTES = 1 << 16
_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(\d+)"?\s*[,}]')  # 1.5: no rank
_TRACE_NAME_RANK = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)


def _trace_head(path: Path) -> bytes:
    """The first 64 KiB of a (possibly gzipped) trace; raises OSError/EOFError/zlib errors on unreadable files."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return fh.read(_SNIFF_BYTES)
    with open(path, "rb") as fh:
        return fh.read(_SNIFF_BYTES)


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
    if not body.startswith(b"{") or not any(k in head for k in _KINETO_KEYS):
        return False, None, f"{path.name} is not a PyTorch/Kineto trace (no traceEvents)"
    m = _DIST_RANK.search(head)
    return True, (int(m.group(1)) if m else None), ""


def _kineto_ranks(d: Path, filenames: list[str], rejected: list[str]) -> list[RankSource]:
    """One rank per Kineto trace file in this directory (``*.json`` / ``*.json.gz``, sniffed, not parsed)."""
    out = []
    for f in sorted(filenames):
        if not f.endswith(_TRACE_SUFFIXES):
            continue
        ok, _, why = sniff_kineto(d / f)
        if ok:
            out.append(RankSource(path=d / f, kind="kineto", files={"kineto_trace": d / f}))
        elif why:
            rejected.append(why)
    return out


def _kineto_rank_of(rs: RankSource) -> tuple[int | None, str]:
    path = rs.files["kineto_trace"]
    _, rank, _ = sniff_kineto(path)
    if rank is not None:
        return rank, f"distributedInfo.rank in {path.name}"
    m = _TRACE_NAME_RANK.search(path.name)
    if m:
        return int(m.group(1)), f"file name {path.name}"
    return None, ""


def _read_json_quiet(path: Path) -> dict | None:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _rank_of(rs: RankSource) -> tuple[int | None, str]:
    if rs.kind == "kineto":
        return _kineto_rank_of(rs)
    info = rs.files.get("profiler_info")
    if info is not None:
        m = _INFO_FILE.match(info.name)
        if m and m.group(1) is not None:
            return int(m.group(1)), f"file name {info.name}"
        data = _read_json_quiet(info) or {}
        rid = data.get("rank_id")
        try:
            if rid is not None and int(rid) >= 0:
                return int(rid), f"rank_id in {info.name}"
        except (TypeError, ValueError):
            pass
    dev = rs.files.get("device_info")
    if dev is not None:
        data = _read_json_quiet(dev) or {}
        rid = data.get("rank_id")
        try:
            if rid is not None and int(rid) >= 0:
                return int(rid), f"rank_id in {dev.name}"
        except (TypeError, ValueError):
            pass
    m = _RANK_IN_NAME.search(rs.path.name)
    if m:
        return int(m.group(1)), f"folder name {rs.path.name}"
    return None, ""


def _resolve_ranks(disc: Discovery) -> None:
    for rs in disc.ranks:
        rs.rank, rs.rank_origin = _rank_of(rs)
    _refuse_mixed_collections(disc)
    unknown = [rs for rs in disc.ranks if rs.rank is None]
    if unknown:
        used = {rs.rank for rs in disc.ranks if rs.rank is not None}
        nxt = 0
        for rs in unknown:
            while nxt in used:
                nxt += 1
            rs.rank, rs.rank_origin = nxt, "assumed (no profiler_info_{rank}.json, no rank in folder name)"
            used.add(nxt)
        if len(disc.ranks) == 1:
            disc.notes.append("no rank id in the data: treated as rank 0")
        else:
            disc.warnings.append(f"{len(unknown)} folder(s) carry no rank id; numbered by path order: "
                                 + ", ".join(f"{relpath(r.path, disc.root) or '.'} -> rank {r.rank}"
                                             for r in unknown))
    by_rank: dict[int, list[RankSource]] = {}
    for rs in disc.ranks:
        by_rank.setdefault(rs.rank, []).append(rs)  # type: ignore[arg-type]
    keep: list[RankSource] = []
    for rank, group in sorted(by_rank.items()):
        if len(group) > 1:
            # Re-runs written side by side (same parent): keep the newest, as msprof-analyze does — the
            # profiler's folder names end in a timestamp, so the last by name is the newest.
            group.sort(key=lambda r: r.path.name)
            chosen = group[-1]
            disc.warnings.append(f"rank {rank} appears in {len(group)} folders; using the last by name "
                                 f"({relpath(chosen.path, disc.root)}), skipped {len(group) - 1}: "
                                 + ", ".join(relpath(r.path, disc.root) for r in group[:-1]))
            keep.append(chosen)
        else:
            keep.append(group[0])
    disc.ranks = keep


def _refuse_mixed_collections(disc: Discovery) -> None:
    """Several separate collections under one root (e.g. level0/, level1/, level2/ of one job, or unrelated
    single-rank fragments) cannot be merged into one job: say which ones, instead of guessing."""
    if len(disc.ranks) < 2:
        return
    parents: dict[Path, list[RankSource]] = {}
    for rs in disc.ranks:
        parents.setdefault(rs.path.parent, []).append(rs)
    if len(parents) < 2:
        return
    clash = False
    seen: dict[int, Path] = {}
    for parent, members in parents.items():
        for rs in members:
            if rs.rank is None or (rs.rank in seen and seen[rs.rank] != parent):
                clash = True
            else:
                seen.setdefault(rs.rank, parent)
    if clash:
        names = sorted(relpath(m[0].path if len(m) == 1 else p, disc.root) or "." for p, m in parents.items())
        raise ProfanInputError(disc.root, f"holds {len(parents)} separate profiler collections whose ranks "
                                          f"overlap or carry no rank id ({', '.join(names[:6])}"
                                          f"{', …' if len(names) > 6 else ''}); analyse one of them at a time")


def _note_missing_files(disc: Discovery) -> None:
    wanted = ("kernel_details", "step_trace_time")
    for rs in disc.ranks:
        for p in rs.ignored:
            disc.warnings.append(f"rank {rs.rank}: {relpath(p, disc.root)} is a folder, not a file; ignored")
        if rs.kind != "ascend":
            continue
        missing = [ASCEND_FILES[w] for w in wanted if w not in rs.files]
        if missing and rs.files:
            have = sorted(Path(p).name for k, p in rs.files.items() if k in ASCEND_FILES)
            disc.warnings.append(f"rank {rs.rank} ({relpath(rs.path, disc.root)}) has no {', '.join(missing)}; "
                                 f"using what it has: {', '.join(have) or 'nothing'}")
