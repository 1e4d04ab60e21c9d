"""Rank ids of the found rank folders and traces: from ``profiler_info_{rank}.json`` (its name, else its
``rank_id``), the DB file's name, msprof's ``info.json``, the folder's or trace's name — never from ``Device_id``,
which is the physical NPU. Ranks without an id are numbered by path order; a rank found twice keeps the newest
folder; separate collections whose ranks overlap are refused rather than merged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from profan.model.errors import ProfanInputError
from profan.sources.discovery.names import ASCEND_DB, INFO_FILE
from profan.sources.discovery.rl_roles import assign_roles, find_timers
from profan.sources.discovery.sniff import rank_id, rank_in_name, read_json_quiet, trace_rank

if TYPE_CHECKING:  # discover.py defines them and imports this module: types only, so run time imports point one way
    from profan.sources.discovery.discover import Discovery, RankSource


def rank_of(rs: RankSource) -> tuple[int | None, str]:
    """(the rank id, where it was read), first found of: a trace's own, profiler_info's name or body, the DB's
    name, msprof's info.json, the folder's name; (None, '') when none holds one."""
    if rs.kind == "kineto":
        return trace_rank(rs.files["kineto_trace"])
    info = rs.files.get("profiler_info")
    if info is not None:
        match = INFO_FILE.match(info.name)
        if match and rank_id(match.group(1)) is not None:
            return int(match.group(1)), f"file name {info.name}"
        rid = rank_id((read_json_quiet(info) or {}).get("rank_id"))
        if rid is not None:
            return rid, f"rank_id in {info.name}"
    db = rs.files.get("ascend_db")
    match = ASCEND_DB.match(db.name) if db is not None else None
    if match and match.group(1) and rank_id(match.group(1)) is not None:
        return int(match.group(1)), f"file name {db.name}"
    dev = rs.files.get("device_info")
    if dev is not None:
        rid = rank_id((read_json_quiet(dev) or {}).get("rank_id"))
        if rid is not None:
            return rid, f"rank_id in {dev.name}"
    match = rank_in_name("folder").search(rs.path.name)
    if match and rank_id(match.group(1)) is not None:
        return int(match.group(1)), f"folder name {rs.path.name}"
    return None, ""


def _read_ids(disc: Discovery) -> None:
    """Each rank's id from its files; an RL job's traces from their role and rank (`rl_roles`), with the job's
    timer log beside them."""
    rl_job = assign_roles(disc, rank_of)
    for rank in disc.ranks:
        if rank.role is None:
            rank.rank, rank.rank_origin = rank_of(rank)
    if rl_job:  # an RL job's roles sit in folders of their own (discrete mode) by design: no mixed collections
        find_timers(disc)
    else:
        refuse_mixed_collections(disc)


def resolve_ranks(disc: Discovery) -> None:
    _read_ids(disc)
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
                + ", ".join(f"{disc.relpath(r.path) or '.'} -> rank {r.rank}" for r in unknown)
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
                f"({disc.relpath(chosen.path)}), skipped {len(group) - 1}: "
                + ", ".join(disc.relpath(r.path) for r in group[:-1])
            )
            keep.append(chosen)
        else:
            keep.append(group[0])
    disc.ranks = keep


def refuse_mixed_collections(disc: Discovery) -> None:
    """Several separate collections under one root (e.g. level0/, level1/, level2/ of one job, or unrelated
    single-rank fragments) cannot be merged into one job: say which ones, instead of guessing."""
    if len(disc.ranks) < 2:
        return
    parents: dict[Path, list[RankSource]] = {}
    for rank in disc.ranks:
        parents.setdefault(rank.path.parent, []).append(rank)
    if len(parents) < 2:
        return
    clash = False
    seen: dict[int, Path] = {}
    for parent, members in parents.items():
        for rank in members:
            if rank.rank is None or (rank.rank in seen and seen[rank.rank] != parent):
                clash = True
            else:
                seen.setdefault(rank.rank, parent)
    if clash:
        names = sorted(disc.relpath(value[0].path if len(value) == 1 else key) or "." for key, value in parents.items())
        raise ProfanInputError(
            disc.root,
            f"holds {len(parents)} separate profiler collections whose ranks "
            f"overlap or carry no rank id ({', '.join(names[:6])}"
            f"{', …' if len(names) > 6 else ''}); analyse one of them at a time",
        )
