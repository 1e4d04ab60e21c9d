"""Discovery: a path in, the ranks and their files out. No file bodies are parsed here beyond rank ids.

Ascend layouts recognised (see shared reference `ascend-formats.md` §1):

* a rank directory holds ``ASCEND_PROFILER_OUTPUT/`` and/or ``profiler_info_{rank}.json`` — whatever its name
  (``*_ascend_pt``, ``*_ascend_ms``, or renamed like ``test_rank_0``);
* a bare ``ASCEND_PROFILER_OUTPUT/`` folder, or any folder holding ``kernel_details.csv`` directly;
* msprof's ``PROF_*`` directory with ``mindstudio_profiler_output/op_summary_*.csv``;
* torch_npu's DB export: ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db`` (with ``analysis.db``), read by
  `profan.sources.ascend_db.reader`. A rank that holds both exports is read from one of them only, never a mix: the text
  export when it has ``kernel_details.csv``, else the DB; the report says which.

What profan cannot read is refused in one line naming the files (msprof's ``msprof_*.db``, a sample-based msprof
collection without ``op_summary``, an export with neither text nor DB), never analysed into an empty report
(`profan.sources.discovery.refusals`).

Derived outputs (msprof-analyze's ``cluster_analysis_output/``) are skipped and that is said
(`profan.sources.discovery.walk`).

Kineto traces: ``*.json`` / ``*.json.gz`` with a ``traceEvents`` object, or a bare event array of Kineto categories
(the 2020-21 profiler), sniffed by `profan.sources.discovery.sniff`. A ``capture_traces/`` folder (roles
``graph_capture_folder``) beside traces holds the traces recorded while their CUDA / HIP graphs were captured: each
goes to the rank of its trace, not a rank of its own (`_split_captures`, `_graph_captures`).

Rank ids: `profan.sources.discovery.ranks`; the names looked for: `profan.sources.discovery.names`.
"""

from __future__ import annotations

import functools
import stat
from dataclasses import dataclass, field
from pathlib import Path

from profan import trust
from profan.model.errors import ProfanInputError
from profan.rulepack import limits, roles
from profan.sources.discovery.names import (
    ANALYSIS_DB,
    ASCEND_DB,
    ASCEND_FILES,
    INFO_FILE,
    MSPROF_DB,
    MSPROF_SAMPLED,
    OP_SUMMARY,
    OUTPUT_DIR,
    PROF_DIR,
    TRACE_SUFFIXES,
    short_list,
)
from profan.sources.discovery.ranks import resolve_ranks
from profan.sources.discovery.refusals import note_missing_files, refuse_unreadable
from profan.sources.discovery.sniff import sniff_kineto, trace_rank
from profan.sources.discovery.walk import Walk, escaped, is_utf8


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
    role: str | None = None  # an RL job's trace: the program it profiled (`rl_roles`), None for any other
    role_rank: int | None = None  # its rank within that role; ``rank`` is then the job-wide one

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
        kinds = sorted({rank.kind for rank in self.ranks})
        return kinds[0] if len(kinds) == 1 else "+".join(kinds)

    def relpath(self, path: Path) -> str:
        """``path`` as the report names it: relative to the analysed folder (`relpath`)."""
        return relpath(path, self.root)


def base_dir(root: Path) -> Path:
    """The folder report paths are relative to: the analysed folder, or the folder of an analysed file."""
    return root if root.is_dir() else root.parent


def relpath(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(base_dir(root).resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _utf8_path(root: Path) -> Path:
    """The named path, if the OS name is UTF-8: the readers (polars) cannot open one that is not, and no report
    can name it. One line with its bytes escaped otherwise."""
    if not is_utf8(str(root)):
        why = "the path is not valid UTF-8: rename it (or the folder holding it) to analyse it"
        raise ProfanInputError(escaped(str(root)), why)
    return root


def discover(path: str | Path) -> Discovery:
    """The ranks under ``path``. Reads only inside it: a link to a file or folder elsewhere is said and skipped, as
    is anything but a regular file (a FIFO would block the read); the walk is bounded in depth, entries and ranks
    (`profan.rulepack.limits`)."""
    root = _utf8_path(Path(path))
    try:
        if not root.exists():
            raise ProfanInputError(root, "no such file or directory")
        if root.is_file():
            return _discover_file(root)
        if not root.is_dir():
            raise ProfanInputError(root, "is not a folder nor a regular file (a FIFO, socket or device); refused")
    except OSError as exc:
        raise ProfanInputError(root, f"cannot read: {exc.strerror or exc}") from None
    walk = Walk(root, limits.active(), functools.partial(relpath, root=root))
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
        why += "".join(f"; {said}" for said in walk.said())  # a folder it could not list may be what was meant
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
            f"file: {short_list(relpath(rs.path, root) for rs in empty)}"
        )
    resolve_ranks(disc)
    _graph_captures(disc, captures)
    refuse_unreadable(disc)
    note_missing_files(disc)
    kinds = sorted({r.kind for r in disc.ranks})
    if len(kinds) > 1:  # e.g. NPU and GPU ranks side by side: one job only if the user says so
        disc.warnings.append(
            f"the folder holds ranks of {len(kinds)} kinds ({', '.join(kinds)}); they are analysed "
            "as one job — analyse each collection on its own if they are separate runs"
        )
    return disc


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
        rank, _ = trace_rank(cap)
        to = [rs for rs in beside if rank is not None and rs.rank == rank] or (beside if len(beside) == 1 else [])
        if not to:
            unmatched.append(relpath(cap, disc.root))
            continue
        n = sum(file.startswith("graph_capture") for file in to[0].files)
        to[0].files[f"graph_capture_{n}"] = cap
    if unmatched:
        disc.warnings.append(
            f"skipped {len(unmatched)} graph-capture trace(s) whose rank matches no trace beside their folder: "
            + short_list(unmatched)
        )


def _discover_file(path: Path) -> Discovery:
    name = path.name
    if not stat.S_ISREG(path.stat().st_mode):
        raise ProfanInputError(path, "is not a regular file (a FIFO, socket or device); refused")
    if name in ("kernel_details.csv",) or OP_SUMMARY.match(name):
        rs = RankSource(
            path=path.parent,
            kind="ascend" if name == "kernel_details.csv" else "msprof",
            files={"kernel_details": path},
        )
        disc = Discovery(root=path, ranks=[rs])
        resolve_ranks(disc)
        return disc
    if ASCEND_DB.match(name):
        # the DB alone: its analysis.db beside it is not read (only the named file is)
        disc = Discovery(root=path, ranks=[RankSource(path=path.parent, kind="ascend", files={"ascend_db": path})])
        resolve_ranks(disc)
        return disc
    if name.endswith(TRACE_SUFFIXES):
        # named explicitly: treat it as a trace and let the reader say precisely what is wrong with it
        disc = Discovery(root=path, ranks=[RankSource(path=path, kind="kineto", files={"kineto_trace": path})])
        resolve_ranks(disc)
        return disc
    raise ProfanInputError(
        path,
        "not a profiler output file profan can read (expected a directory, kernel_details.csv, "
        "ascend_pytorch_profiler_*.db, op_summary_*.csv or a Kineto *.json / *.json.gz trace)",
    )


def _rank_dir(path: Path, dirnames: list[str], filenames: list[str], walk: Walk) -> RankSource | None:
    infos = [filename for filename in filenames if INFO_FILE.match(filename)]
    if path.name == OUTPUT_DIR:
        # A bare ASCEND_PROFILER_OUTPUT: its parent may hold profiler_info_*.json, read only when the parent is
        # inside the analysed folder too.
        infos = [p.name for p in path.parent.glob("profiler_info*.json") if INFO_FILE.match(p.name)]
        if infos and path == walk.root:
            walk.notes.append(
                f"{', '.join(sorted(infos))} in the parent folder not read (profan reads only inside "
                "the folder it was given; analyse the rank folder to use it)"
            )
            infos = []
        return _ascend_rank(path.parent, path, infos, walk)
    if OUTPUT_DIR in dirnames or infos:
        out = path / OUTPUT_DIR
        rs = _ascend_rank(path, out if out.is_dir() and trust.inside(out, walk.real) else None, infos, walk)
        rs.ignored += [
            (path / filename, "is a folder, not a file") for filename in sorted(dirnames) if INFO_FILE.match(filename)
        ]
        return rs
    if PROF_DIR.match(path.name) and (
        "mindstudio_profiler_output" in dirnames or any(MSPROF_DB.match(filename) for filename in filenames)
    ):
        return _msprof_rank(path, walk)
    if path.name == "mindstudio_profiler_output" and any(OP_SUMMARY.match(filename) for filename in filenames):
        # the msprof output folder itself (passed directly, or its PROF_* parent was renamed)
        return _msprof_rank(path.parent, walk)
    if {"kernel_details.csv", "trace_view.json", "step_trace_time.csv"} & set(filenames) or any(
        ASCEND_DB.match(filename) for filename in filenames
    ):
        # the integrated files copied out of ASCEND_PROFILER_OUTPUT into a folder of their own
        return _ascend_rank(path, path, [], walk)
    return None


def _ascend_rank(path: Path, out: Path | None, infos: list[str], walk: Walk) -> RankSource:
    rs = RankSource(path=path, kind="ascend")
    if out is not None:
        for logical, fname in ASCEND_FILES.items():
            if _is_file(out / fname, rs, walk):
                rs.files[logical] = out / fname
        _ascend_db_files(rs, out, walk)
    for info in sorted(infos):
        if _is_file(path / info, rs, walk):
            rs.files["profiler_info"] = path / info
    if _is_file(path / "profiler_metadata.json", rs, walk):
        rs.files["profiler_metadata"] = path / "profiler_metadata.json"
    return rs


def _ascend_db_files(rs: RankSource, out: Path, walk: Walk) -> None:
    """torch_npu's DB export of the rank, when its text export has no ``kernel_details.csv``: one source per rank,
    never kernels from one export and steps from the other (two captures of a job differ). Which one is read is
    said (a note naming both)."""
    try:
        dbs = sorted(value for value in out.iterdir() if ASCEND_DB.match(value.name) and _is_file(value, rs, walk))
    except OSError:
        return
    if not dbs:
        return
    where = walk.rel(out) or "."
    if "kernel_details" in rs.files:
        walk.notes.append(
            f"{where}: holds both the text export and {dbs[-1].name}; read the text export "
            "(kernel_details.csv, …), the DB not read"
        )
        return
    text = sorted(value.name for key, value in rs.files.items() if key in ASCEND_FILES)
    if text:
        walk.notes.append(f"{where}: read {dbs[-1].name}; its text files ({', '.join(text)}) not read")
        for key in [key for key in rs.files if key in ASCEND_FILES]:
            del rs.files[key]
    rs.files["ascend_db"] = dbs[-1]
    if len(dbs) > 1:
        walk.notes.append(f"{where}: holds {len(dbs)} DB files; read the last by name, {dbs[-1].name}")
    if _is_file(out / ANALYSIS_DB, rs, walk):
        rs.files["analysis_db"] = out / ANALYSIS_DB


def _is_file(path: Path, rs: RankSource, walk: Walk) -> bool:
    """A readable regular file inside the analysed folder. A folder of that name is noted on the rank (and said
    as a warning); a folder whose entries cannot be listed is one clear input error, not a traceback."""
    try:
        if path.is_dir():
            rs.ignored.append((path, "is a folder, not a file"))
            return False
    except OSError as exc:
        raise ProfanInputError(path.parent, f"cannot read: {exc.strerror or exc}") from None
    return walk.readable(path)


def _msprof_unread(path: Path, out: Path) -> str:
    """What an msprof collection without ``op_summary_*.csv`` holds instead, and why profan cannot read it; empty
    when it holds neither of the known cases."""
    dbs = sorted(p.name for p in [*path.glob("msprof_*.db"), *out.glob("msprof_*.db")] if MSPROF_DB.match(p.name))
    sampled = sorted(p.name for p in out.glob("*.csv") if MSPROF_SAMPLED.match(p.name))
    if dbs:
        return (
            f"{short_list(dbs, 2)} (msprof's DB export) but no mindstudio_profiler_output/op_summary_*.csv: "
            "export the text summaries too (msprof --export=on) and analyse again"
        )
    if sampled:
        return (
            f"{short_list(sampled, 3)} (a sample-based collection: device-wide samples, no per-kernel rows) but no "
            "op_summary_*.csv: collect task-based (msprof --task-time=on) to get per-kernel rows"
        )
    return ""


def _msprof_rank(path: Path, walk: Walk) -> RankSource:
    out = path / "mindstudio_profiler_output"
    rs = RankSource(path=path, kind="msprof")
    summaries = sorted(p for p in out.glob("op_summary_*.csv") if _is_file(p, rs, walk))
    if summaries:
        rs.files["kernel_details"] = summaries[-1]
    stats = sorted(p for p in out.glob("op_statistic_*.csv") if _is_file(p, rs, walk))
    if stats:
        rs.files["op_statistic"] = stats[-1]
    if not summaries:
        rs.unread = _msprof_unread(path, out)
    infos = sorted(path.glob("device_*/info.json.*"))
    if infos and not trust.inside(path, walk.real):  # mindstudio_profiler_output given: its PROF_* is outside
        walk.notes.append(
            f"{infos[0].relative_to(path).as_posix()} of the PROF_* folder not read (profan reads only "
            "inside the folder it was given; analyse the PROF_* folder to use it)"
        )
        infos = []
    for info in infos:
        if _is_file(info, rs, walk):
            rs.files["device_info"] = info
            break
    return rs


def _kineto_ranks(path: Path, filenames: list[str], rejected: list[str], walk: Walk) -> list[RankSource]:
    """One rank per Kineto trace file in this directory (``*.json`` / ``*.json.gz``, sniffed, not parsed)."""
    out = []
    for filename in sorted(filenames):
        if not filename.endswith(TRACE_SUFFIXES) or not walk.readable(path / filename):
            continue
        ok, _, why = sniff_kineto(path / filename)
        if ok:
            out.append(RankSource(path=path / filename, kind="kineto", files={"kineto_trace": path / filename}))
        elif why:
            rejected.append(why)
    return out
