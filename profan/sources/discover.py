"""Discovery: a path in, the ranks and their files out. No file bodies are parsed here beyond rank ids.

Ascend layouts recognised (see shared reference `ascend-formats.md` §1):

* a rank directory holds ``ASCEND_PROFILER_OUTPUT/`` and/or ``profiler_info_{rank}.json`` — whatever its name
  (``*_ascend_pt``, ``*_ascend_ms``, or renamed like ``test_rank_0``);
* a bare ``ASCEND_PROFILER_OUTPUT/`` folder, or any folder holding ``kernel_details.csv`` directly;
* msprof's ``PROF_*`` directory with ``mindstudio_profiler_output/op_summary_*.csv``;
* torch_npu's DB export: ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db`` (with ``analysis.db``), read by
  `profan.sources.ascend_db`. A rank that holds both exports is read from one of them only, never a mix: the text
  export when it has ``kernel_details.csv``, else the DB; the report says which.

What profan cannot read is refused in one line naming the files (msprof's ``msprof_*.db``, a sample-based msprof
collection without ``op_summary``, an export with neither text nor DB), never analysed into an empty report.

Derived outputs (msprof-analyze's ``cluster_analysis_output/``) are skipped and that is said.

Kineto traces: ``*.json`` / ``*.json.gz`` with a ``traceEvents`` object, or a bare event array of Kineto categories
(the 2020-21 profiler). A ``capture_traces/`` folder (roles ``graph_capture_folder``) beside traces holds the
traces recorded while their CUDA / HIP graphs were captured: each goes to the rank of its trace, not a rank of its
own (`_split_captures`, `_graph_captures`).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from profan import trust
from profan.model.errors import ProfanInputError
from profan.rulepack import limits, roles
from profan.rulepack.limits import Limits

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
DERIVED_DIRS = {"cluster_analysis_output"}
_PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9A-Za-z]+$")
_INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_OP_SUMMARY = re.compile(r"^op_summary_.*\.csv$")
ASCEND_DB = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
ANALYSIS_DB = "analysis.db"
_MSPROF_DB = re.compile(r"^msprof_.*\.db$")
# msprof's sample-based collection writes these instead of op_summary: device-wide samples, no per-kernel rows
_MSPROF_SAMPLED = re.compile(r"^(task_time|ai_core_utilization|ai_vector_core_utilization)_.*\.csv$")
_TRACE_SUFFIXES = (".json", ".json.gz")

# logical name -> file name inside ASCEND_PROFILER_OUTPUT
ASCEND_FILES = {
    "kernel_details": "kernel_details.csv",
    "step_trace_time": "step_trace_time.csv",
    "op_statistic": "op_statistic.csv",
    "communication": "communication.json",
    "communication_matrix": "communication_matrix.json",
    "trace_view": "trace_view.json",
    "memory_record": "memory_record.csv",
    "operator_memory": "operator_memory.csv",
    "npu_module_mem": "npu_module_mem.csv",
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
    ignored: list[tuple[Path, str]] = field(default_factory=list)  # a profiler file's name, but (why) not read
    unread: str = ""  # what the folder holds that profan cannot read, and what to do (msprof DB / sampled data)

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
    """The ranks under ``path``. Reads only inside it: a link to a file or folder elsewhere is said and skipped, as
    is anything but a regular file (a FIFO would block the read); the walk is bounded in depth, entries and ranks
    (`profan.rulepack.limits`)."""
    root = Path(path)
    try:
        if not root.exists():
            raise ProfanInputError(root, "no such file or directory")
        if root.is_file():
            return _discover_file(root)
        if not root.is_dir():
            raise ProfanInputError(root, "is not a folder nor a regular file (a FIFO, socket or device); refused")
    except OSError as exc:
        raise ProfanInputError(root, f"cannot read: {exc.strerror or exc}") from None
    walk = _Walk(root, limits.active())
    found: list[RankSource] = []
    rejected: list[str] = []  # *.json files that are not traces, for the error message
    for d, dirnames, filenames in walk:
        rank = _rank_dir(d, dirnames, filenames, walk)
        if rank is not None:
            found.append(rank)
            dirnames[:] = []  # a rank directory's subfolders (PROF_*, FRAMEWORK, logs) are its raw data
        else:
            found.extend(_kineto_ranks(d, filenames, rejected, walk))
        if len(found) > walk.limits.max_ranks:
            raise ProfanInputError(
                root,
                f"holds more than {walk.limits.max_ranks:,} ranks, the most one analysis "
                "takes (max_ranks under [limits] in a rules file raises it)",
            )
    empty = [rs for rs in found if not rs.files and not rs.ignored and not rs.unread]
    found, captures = _split_captures([rs for rs in found if rs not in empty])
    if not found:
        why = f"; {rejected[0]}" if rejected else ""
        if empty:
            why = f"; {len(empty)} folder(s) look like rank folders but hold no profiler file"
        raise ProfanInputError(
            root,
            "no profiler output found (looked for ASCEND_PROFILER_OUTPUT/, "
            "profiler_info_*.json, kernel_details.csv, PROF_*/mindstudio_profiler_output/, "
            f"PyTorch/Kineto *.json / *.json.gz traces){why}",
        )
    disc = Discovery(root=root, ranks=found, notes=walk.notes, warnings=walk.said())
    if empty:
        disc.warnings.append(
            f"skipped {len(empty)} folder(s) that look like rank folders but hold no profiler "
            f"file: {_names(relpath(rs.path, root) for rs in empty)}"
        )
    _resolve_ranks(disc)
    _graph_captures(disc, captures)
    _refuse_unreadable(disc)
    _note_missing_files(disc)
    kinds = sorted({r.kind for r in disc.ranks})
    if len(kinds) > 1:  # e.g. NPU and GPU ranks side by side: one job only if the user says so
        disc.warnings.append(
            f"the folder holds ranks of {len(kinds)} kinds ({', '.join(kinds)}); they are analysed "
            "as one job — analyse each collection on its own if they are separate runs"
        )
    return disc


def _names(names, shown: int = 5) -> str:
    names = list(names)
    return ", ".join(names[:shown]) + (f", … ({len(names) - shown} more)" if len(names) > shown else "")


class _Walk:
    """`os.walk` of the analysed folder within the bounds, never following a link out of it.

    Said afterwards, with counts: links to folders or files outside, entries that are no regular file, folders
    too deep to walk, and folders that could not be listed — nothing is dropped without a word."""

    def __init__(self, root: Path, bounds: Limits) -> None:
        self.root = root
        self.real = root.resolve()
        self.limits = bounds
        self.entries = 0
        self.notes: list[str] = []
        self.outside: list[str] = []  # links leading out of the folder
        self.irregular: list[str] = []  # FIFOs, sockets, devices named like profiler files
        self.too_deep: list[str] = []
        self.unlisted: list[str] = []

    def __iter__(self):
        for dirpath, dirnames, filenames in os.walk(self.root, onerror=self._unlisted):
            d = Path(dirpath)
            dirnames.sort()
            self.entries += len(dirnames) + len(filenames)
            if self.entries > self.limits.max_entries:
                raise ProfanInputError(
                    self.root,
                    f"holds more than {self.limits.max_entries:,} files and folders; "
                    "is it the profiler output folder? (max_entries under [limits] "
                    "in a rules file raises the bound)",
                )
            keep = []
            for n in dirnames:
                if n in DERIVED_DIRS:
                    self.notes.append(
                        f"skipped {relpath(d / n, self.root)}/: derived output of another tool, not profiler data"
                    )
                elif n.startswith("."):
                    continue
                elif (d / n).is_symlink() and not trust.inside(d / n, self.real):
                    self.outside.append(relpath(d / n, self.root))
                else:
                    keep.append(n)  # a link to a folder inside is not followed (os.walk): it is read where it lies
            dirnames[:] = keep
            yield d, dirnames, filenames  # the caller sees every name, and clears them under a rank folder
            if len(d.relative_to(self.root).parts) >= self.limits.max_depth and dirnames:
                self.too_deep += [relpath(d / n, self.root) for n in dirnames]
                dirnames[:] = []

    def _unlisted(self, exc: OSError) -> None:
        self.unlisted.append(
            f"{relpath(Path(exc.filename), self.root) if exc.filename else '?'} ({exc.strerror or exc})"
        )

    def readable(self, p: Path) -> bool:
        """A regular file inside the folder (links resolved); what is not is remembered and said."""
        try:
            if not p.is_file():
                if p.exists() and not p.is_dir():
                    self.irregular.append(relpath(p, self.root))
                return False
        except OSError:
            return False
        if not trust.inside(p, self.real):
            self.outside.append(relpath(p, self.root))
            return False
        return True

    def said(self) -> list[str]:
        out = []
        if self.outside:
            out.append(
                f"skipped {len(self.outside)} link(s) to files or folders outside the analysed folder "
                f"(profan reads only inside it): {_names(self.outside)}"
            )
        if self.irregular:
            out.append(f"skipped {len(self.irregular)} entr(ies) that are not regular files: {_names(self.irregular)}")
        if self.too_deep:
            out.append(
                f"did not walk {len(self.too_deep)} folder(s) more than {self.limits.max_depth} levels down "
                f"(max_depth under [limits] in a rules file): {_names(self.too_deep)}"
            )
        if self.unlisted:
            out.append(f"could not list {len(self.unlisted)} folder(s): {_names(self.unlisted)}")
        return out


def _split_captures(found: list[RankSource]) -> tuple[list[RankSource], list[Path]]:
    """(the ranks, the graph-capture traces). A folder named as roles ``graph_capture_folder`` beside Kineto traces
    holds the traces recorded while their CUDA / HIP graphs were captured (SGLang, TraceLens): the capture of those
    traces' graphs (`_graph_captures`), not another collection."""
    name = roles.defaults().graph_capture_folder
    beside = {rs.path.parent for rs in found if rs.kind == "kineto"}
    cap = [rs.kind == "kineto" and rs.path.parent.name == name and rs.path.parent.parent in beside for rs in found]
    pairs = list(zip(found, cap, strict=True))
    return [rs for rs, c in pairs if not c], [rs.path for rs, c in pairs if c]


def _graph_captures(disc: Discovery, captures: list[Path]) -> None:
    """Each capture trace goes to the rank of the trace beside its folder with the same rank (the only one, when
    there is one); one that matches no rank is said and not read."""
    unmatched = []
    for cap in captures:
        beside = [rs for rs in disc.ranks if rs.kind == "kineto" and rs.path.parent == cap.parent.parent]
        rank, _ = _kineto_rank_of(RankSource(path=cap, kind="kineto", files={"kineto_trace": cap}))
        to = [rs for rs in beside if rank is not None and rs.rank == rank] or (beside if len(beside) == 1 else [])
        if not to:
            unmatched.append(relpath(cap, disc.root))
            continue
        n = sum(k.startswith("graph_capture") for k in to[0].files)
        to[0].files[f"graph_capture_{n}"] = cap
    if unmatched:
        disc.warnings.append(
            f"skipped {len(unmatched)} graph-capture trace(s) whose rank matches no trace beside their folder: "
            + _names(unmatched)
        )


def _discover_file(path: Path) -> Discovery:
    name = path.name
    if not stat.S_ISREG(path.stat().st_mode):
        raise ProfanInputError(path, "is not a regular file (a FIFO, socket or device); refused")
    if name in ("kernel_details.csv",) or _OP_SUMMARY.match(name):
        rs = RankSource(
            path=path.parent,
            kind="ascend" if name == "kernel_details.csv" else "msprof",
            files={"kernel_details": path},
        )
        disc = Discovery(root=path, ranks=[rs])
        _resolve_ranks(disc)
        return disc
    if ASCEND_DB.match(name):
        # the DB alone: its analysis.db beside it is not read (only the named file is)
        disc = Discovery(root=path, ranks=[RankSource(path=path.parent, kind="ascend", files={"ascend_db": path})])
        _resolve_ranks(disc)
        return disc
    if name.endswith(_TRACE_SUFFIXES):
        # named explicitly: treat it as a trace and let the reader say precisely what is wrong with it
        disc = Discovery(root=path, ranks=[RankSource(path=path, kind="kineto", files={"kineto_trace": path})])
        _resolve_ranks(disc)
        return disc
    raise ProfanInputError(
        path,
        "not a profiler output file profan can read (expected a directory, kernel_details.csv, "
        "ascend_pytorch_profiler_*.db, op_summary_*.csv or a Kineto *.json / *.json.gz trace)",
    )


def _rank_dir(d: Path, dirnames: list[str], filenames: list[str], walk: _Walk) -> RankSource | None:
    infos = [f for f in filenames if _INFO_FILE.match(f)]
    if d.name == OUTPUT_DIR:
        # A bare ASCEND_PROFILER_OUTPUT: its parent may hold profiler_info_*.json, read only when the parent is
        # inside the analysed folder too.
        infos = [p.name for p in d.parent.glob("profiler_info*.json") if _INFO_FILE.match(p.name)]
        if infos and d == walk.root:
            walk.notes.append(
                f"{', '.join(sorted(infos))} in the parent folder not read (profan reads only inside "
                "the folder it was given; analyse the rank folder to use it)"
            )
            infos = []
        return _ascend_rank(d.parent, d, infos, walk)
    if OUTPUT_DIR in dirnames or infos:
        out = d / OUTPUT_DIR
        rs = _ascend_rank(d, out if out.is_dir() and trust.inside(out, walk.real) else None, infos, walk)
        rs.ignored += [(d / f, "is a folder, not a file") for f in sorted(dirnames) if _INFO_FILE.match(f)]
        return rs
    if _PROF_DIR.match(d.name) and (
        "mindstudio_profiler_output" in dirnames or any(_MSPROF_DB.match(f) for f in filenames)
    ):
        return _msprof_rank(d, walk)
    if d.name == "mindstudio_profiler_output" and any(_OP_SUMMARY.match(f) for f in filenames):
        # the msprof output folder itself (passed directly, or its PROF_* parent was renamed)
        return _msprof_rank(d.parent, walk)
    if {"kernel_details.csv", "trace_view.json", "step_trace_time.csv"} & set(filenames) or any(
        ASCEND_DB.match(f) for f in filenames
    ):
        # the integrated files copied out of ASCEND_PROFILER_OUTPUT into a folder of their own
        return _ascend_rank(d, d, [], walk)
    return None


def _ascend_rank(d: Path, out: Path | None, infos: list[str], walk: _Walk) -> RankSource:
    rs = RankSource(path=d, kind="ascend")
    if out is not None:
        for logical, fname in ASCEND_FILES.items():
            if _is_file(out / fname, rs, walk):
                rs.files[logical] = out / fname
        _ascend_db_files(rs, out, walk)
    for f in sorted(infos):
        if _is_file(d / f, rs, walk):
            rs.files["profiler_info"] = d / f
    if _is_file(d / "profiler_metadata.json", rs, walk):
        rs.files["profiler_metadata"] = d / "profiler_metadata.json"
    return rs


def _ascend_db_files(rs: RankSource, out: Path, walk: _Walk) -> None:
    """torch_npu's DB export of the rank, when its text export has no ``kernel_details.csv``: one source per rank,
    never kernels from one export and steps from the other (two captures of a job differ). Which one is read is
    said (a note naming both)."""
    try:
        dbs = sorted(p for p in out.iterdir() if ASCEND_DB.match(p.name) and _is_file(p, rs, walk))
    except OSError:
        return
    if not dbs:
        return
    where = relpath(out, walk.root) or "."
    if "kernel_details" in rs.files:
        walk.notes.append(
            f"{where}: holds both the text export and {dbs[-1].name}; read the text export "
            "(kernel_details.csv, …), the DB not read"
        )
        return
    text = sorted(p.name for k, p in rs.files.items() if k in ASCEND_FILES)
    if text:
        walk.notes.append(f"{where}: read {dbs[-1].name}; its text files ({', '.join(text)}) not read")
        for k in [k for k in rs.files if k in ASCEND_FILES]:
            del rs.files[k]
    rs.files["ascend_db"] = dbs[-1]
    if len(dbs) > 1:
        walk.notes.append(f"{where}: holds {len(dbs)} DB files; read the last by name, {dbs[-1].name}")
    if _is_file(out / ANALYSIS_DB, rs, walk):
        rs.files["analysis_db"] = out / ANALYSIS_DB


def _is_file(p: Path, rs: RankSource, walk: _Walk) -> bool:
    """A readable regular file inside the analysed folder. A folder of that name is noted on the rank (and said
    as a warning); a folder whose entries cannot be listed is one clear input error, not a traceback."""
    try:
        if p.is_dir():
            rs.ignored.append((p, "is a folder, not a file"))
            return False
    except OSError as exc:
        raise ProfanInputError(p.parent, f"cannot read: {exc.strerror or exc}") from None
    return walk.readable(p)


def _msprof_unread(d: Path, out: Path) -> str:
    """What an msprof collection without ``op_summary_*.csv`` holds instead, and why profan cannot read it; empty
    when it holds neither of the known cases."""
    dbs = sorted(p.name for p in [*d.glob("msprof_*.db"), *out.glob("msprof_*.db")] if _MSPROF_DB.match(p.name))
    sampled = sorted(p.name for p in out.glob("*.csv") if _MSPROF_SAMPLED.match(p.name))
    if dbs:
        return (
            f"{_names(dbs, 2)} (msprof's DB export) but no mindstudio_profiler_output/op_summary_*.csv: "
            "export the text summaries too (msprof --export=on) and analyse again"
        )
    if sampled:
        return (
            f"{_names(sampled, 3)} (a sample-based collection: device-wide samples, no per-kernel rows) but no "
            "op_summary_*.csv: collect task-based (msprof --task-time=on) to get per-kernel rows"
        )
    return ""


def _msprof_rank(d: Path, walk: _Walk) -> RankSource:
    out = d / "mindstudio_profiler_output"
    rs = RankSource(path=d, kind="msprof")
    summaries = sorted(p for p in out.glob("op_summary_*.csv") if _is_file(p, rs, walk))
    if summaries:
        rs.files["kernel_details"] = summaries[-1]
    stats = sorted(p for p in out.glob("op_statistic_*.csv") if _is_file(p, rs, walk))
    if stats:
        rs.files["op_statistic"] = stats[-1]
    if not summaries:
        rs.unread = _msprof_unread(d, out)
    infos = sorted(d.glob("device_*/info.json.*"))
    if infos and not trust.inside(d, walk.real):  # mindstudio_profiler_output given: its PROF_* is outside
        walk.notes.append(
            f"{infos[0].relative_to(d).as_posix()} of the PROF_* folder not read (profan reads only "
            "inside the folder it was given; analyse the PROF_* folder to use it)"
        )
        infos = []
    for info in infos:
        if _is_file(info, rs, walk):
            rs.files["device_info"] = info
            break
    return rs


_SNIFF_BYTES = 1 << 16
_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(\d+)"?\s*[,}]')  # 1.5: no rank


@functools.cache
def _rank_in_name(kind: str) -> re.Pattern[str]:
    """The rule pack's built-in pattern of a rank id in a folder name (``folder``) or trace file name (``trace``):
    roles ``rank_in_folder_name`` / ``rank_in_trace_name``. Discovery runs before any pack is applied."""
    builtin = roles.defaults()
    return re.compile(builtin.rank_in_folder_name if kind == "folder" else builtin.rank_in_trace_name)


def _trace_head(path: Path) -> bytes:
    """The first 64 KiB of a (possibly gzipped) trace; raises OSError/EOFError/zlib errors on unreadable files."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return fh.read(_SNIFF_BYTES)
    with open(path, "rb") as fh:
        return fh.read(_SNIFF_BYTES)


def _kineto_array(head: bytes) -> bool:
    """A bare event array (the 2020-21 PyTorch profiler wrote no top-level object) is Kineto's when its head holds
    an event of a Kineto category (roles ``kineto_keep_cats``, other writers' names included)."""
    cats = b"|".join(re.escape(c.encode()) for c in roles.defaults().kineto_keep_cats)
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
    m = _DIST_RANK.search(head)
    return True, (_rank_id(m.group(1)) if m else None), ""


def _kineto_ranks(d: Path, filenames: list[str], rejected: list[str], walk: _Walk) -> list[RankSource]:
    """One rank per Kineto trace file in this directory (``*.json`` / ``*.json.gz``, sniffed, not parsed)."""
    out = []
    for f in sorted(filenames):
        if not f.endswith(_TRACE_SUFFIXES) or not walk.readable(d / f):
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
    if _rank_id(rank) is not None:
        return rank, f"distributedInfo.rank in {path.name}"
    m = _rank_in_name("trace").search(path.name)
    if m and _rank_id(m.group(1)) is not None:
        return int(m.group(1)), f"file name {path.name}"
    return None, ""


def _read_json_quiet(path: Path) -> dict | None:
    """A small side file's object, for its rank id; None when it is not one (its reader says why later)."""
    try:
        if path.stat().st_size > _SIDE_FILE_BYTES:
            return None
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError, RecursionError):
        return None


_SIDE_FILE_BYTES = 64 << 20  # profiler_info / info.json are a few KB: a bigger one holds no rank id worth reading
MAX_RANK = 2**31 - 1  # rank ids are 32-bit in every profiler; a larger number is no rank id


def _rank_id(value: object) -> int | None:
    """A usable rank id from a file's value (a number, or text of digits); None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        rank = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return rank if 0 <= rank <= MAX_RANK and (not isinstance(value, float) or value == rank) else None


def _rank_of(rs: RankSource) -> tuple[int | None, str]:
    if rs.kind == "kineto":
        return _kineto_rank_of(rs)
    info = rs.files.get("profiler_info")
    if info is not None:
        m = _INFO_FILE.match(info.name)
        if m and _rank_id(m.group(1)) is not None:
            return int(m.group(1)), f"file name {info.name}"
        rid = _rank_id((_read_json_quiet(info) or {}).get("rank_id"))
        if rid is not None:
            return rid, f"rank_id in {info.name}"
    db = rs.files.get("ascend_db")
    m = ASCEND_DB.match(db.name) if db is not None else None
    if m and m.group(1) and _rank_id(m.group(1)) is not None:
        return int(m.group(1)), f"file name {db.name}"
    dev = rs.files.get("device_info")
    if dev is not None:
        rid = _rank_id((_read_json_quiet(dev) or {}).get("rank_id"))
        if rid is not None:
            return rid, f"rank_id in {dev.name}"
    m = _rank_in_name("folder").search(rs.path.name)
    if m and _rank_id(m.group(1)) is not None:
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
            disc.warnings.append(
                f"{len(unknown)} folder(s) carry no rank id; numbered by path order: "
                + ", ".join(f"{relpath(r.path, disc.root) or '.'} -> rank {r.rank}" for r in unknown)
            )
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
            disc.warnings.append(
                f"rank {rank} appears in {len(group)} folders; using the last by name "
                f"({relpath(chosen.path, disc.root)}), skipped {len(group) - 1}: "
                + ", ".join(relpath(r.path, disc.root) for r in group[:-1])
            )
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
        raise ProfanInputError(
            disc.root,
            f"holds {len(parents)} separate profiler collections whose ranks "
            f"overlap or carry no rank id ({', '.join(names[:6])}"
            f"{', …' if len(names) > 6 else ''}); analyse one of them at a time",
        )


# a rank is analysed when it holds one of these (op_statistic only cross-checks kernel rows: not enough alone)
READ_KINDS = (*(k for k in ASCEND_FILES if k != "op_statistic"), "ascend_db", "kineto_trace")


def _unreadable(rs: RankSource, root: Path) -> str:
    """Why a rank holds nothing profan reads (one clause naming its files); empty when it holds something."""
    if any(k in rs.files for k in READ_KINDS):
        return ""
    where = relpath(rs.path, root) or "."
    if rs.unread:
        return f"{where} holds {rs.unread}"
    out = rs.path / OUTPUT_DIR if (rs.path / OUTPUT_DIR).is_dir() else rs.path
    try:
        held = sorted(p.name for p in out.iterdir() if p.is_file())
    except OSError:
        held = []
    return (
        f"{where} holds {_names(held, 4) if held else 'no file'} but none of "
        f"{', '.join(ASCEND_FILES.values())} nor ascend_pytorch_profiler_*.db (the text or DB export)"
    )


def _refuse_unreadable(disc: Discovery) -> None:
    """Ranks with nothing profan reads: all of them is one input error naming the files and what is missing (never
    an empty report); some of them are skipped with a warning that names them."""
    why = {id(rs): _unreadable(rs, disc.root) for rs in disc.ranks}
    bad = [rs for rs in disc.ranks if why[id(rs)]]
    if not bad:
        return
    if len(bad) == len(disc.ranks):
        more = f" (and {len(bad) - 1} more folder(s) alike)" if len(bad) > 1 else ""
        raise ProfanInputError(disc.root, f"nothing profan can read: {why[id(bad[0])]}{more}")
    disc.ranks = [rs for rs in disc.ranks if not why[id(rs)]]
    disc.warnings.append(
        f"skipped {len(bad)} rank(s) with nothing profan reads: " + "; ".join(why[id(rs)] for rs in bad[:3])
    )


def _note_missing_files(disc: Discovery) -> None:
    wanted = ("kernel_details", "step_trace_time")
    for rs in disc.ranks:
        for p, why in rs.ignored:
            disc.warnings.append(f"rank {rs.rank}: {relpath(p, disc.root)} {why}; ignored")
        if rs.kind != "ascend" or "ascend_db" in rs.files:
            continue
        missing = [ASCEND_FILES[w] for w in wanted if w not in rs.files]
        if missing and rs.files:
            have = sorted(Path(p).name for k, p in rs.files.items() if k in ASCEND_FILES)
            disc.warnings.append(
                f"rank {rs.rank} ({relpath(rs.path, disc.root)}) has no {', '.join(missing)}; "
                f"using what it has: {', '.join(have) or 'nothing'}"
            )
