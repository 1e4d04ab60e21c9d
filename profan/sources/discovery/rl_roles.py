"""The roles of an RL job's traces: which program (rollout, actor, reference, critic, reward) each trace profiled,
and its rank within that role, from the file's name and folder (rules/rl.toml ``[layout]``, ``[roles]``).

An RL framework writes one trace per role and rank (verl: ``e2e/rollout_prof_rank-0.json.gz`` beside
``e2e/actor_prof_rank-0.json.gz``): rank numbers repeat across roles, so a rank number alone would keep one of
them and drop the other. Here each (role, rank) gets a job-wide rank of its own, said in its rank origin; a trace
whose role cannot be told is the unknown role, read like the others and named in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from profan.rulepack import rl
from profan.sources.discovery.names import short_list
from profan.sources.discovery.sniff import trace_body

if TYPE_CHECKING:  # discover.py defines them and imports this module's caller: types only
    from profan.sources.discovery.discover import Discovery, RankSource


RankOf = Callable[["RankSource"], tuple[int | None, str]]
CONTENT = "role from "  # the rank origin of a trace whose role its content told, not its name


def _told(rs: RankSource, rank_of: RankOf, sniff: bool = True) -> tuple[str, int, str] | None:
    """A rank's (role, rank within it, where the role was read): a Kineto trace's from its name and folder, else
    (``sniff``) its content, a profiler folder's (torch_npu ``*_ascend_pt``, which verl's npu tool writes in the
    same role folders) from the folder holding it; None where none names a role."""
    rules = rl.rules()
    if rs.kind == "kineto":
        told = rules.trace_role(rs.files["kineto_trace"])
        if (told is not None and told[0] != rules.unknown_role) or not sniff:
            return told
        content = _from_content(rs.files["kineto_trace"])
        if content is None:
            return told
        rank, origin = rank_of(rs)
        rank_from = origin or "by path order among its role (no distributedInfo)"
        return content[0], rank, f"{CONTENT}{content[1]}; rank {rank_from}"
    folder = rs.path.parent.name
    if folder == rules.e2e_folder or rules.role(folder) is None:
        return None
    rank, _ = rank_of(rs)
    return rules.roles[folder], rank or 0, f"folder {folder}/"


def _from_content(path: Path) -> tuple[str, str] | None:
    """(role, where it was read) of a trace whose name tells none, from the phases its annotations mark, else
    its Ray worker's process name (rules/rl.toml [content_roles]); None where neither tells one."""
    rules = rl.rules()
    body = trace_body(path, int(rules.sniff_max_mb * 1e6))
    if body is None or not rules.phase_roles:
        return None
    named = rules.annotation_phase
    pattern = rb'"name"\s*:\s*"(' + b"|".join(re.escape(name.encode()) for name in named) + rb')"'
    found = {match.decode() for match in re.findall(pattern, body)}
    marked = {named[name] for name in found}
    for phases, role in rules.phase_roles:
        if set(phases) <= marked:
            return role, f"its annotations ({', '.join(sorted(found))})"
    match = rules.process_name.search(body) if rules.process_name is not None else None
    worker = match.group(1).decode() if match else ""
    role = next((role for pattern, role in rules.process_roles if worker and pattern.search(worker)), None)
    return (role, f"its process name ray::{worker}") if role else None


def _number_unranked(traces: list[RankSource], told: dict[int, tuple | None]) -> None:
    """A role's traces whose content told the role but no rank: the next free ranks of the role, by path."""
    for trace in sorted(traces, key=lambda trace: str(trace.path)):
        found = told[id(trace)]
        if found is None or found[1] is not None:
            continue
        used = {t[1] for t in told.values() if t is not None and t[0] == found[0] and t[1] is not None}
        told[id(trace)] = (found[0], next(n for n in range(len(traces) + 1) if n not in used), found[2])


def assign_roles(disc: Discovery, rank_of: RankOf) -> bool:
    """Give every rank of an RL job its role, its rank within the role and a job-wide rank; False (nothing
    changed) when no trace's name or folder names a known role: then it is no RL job. ``rank_of``: a rank's own
    id, where its name does not give it (`ranks.rank_of`)."""
    rules = rl.rules()
    traces = disc.ranks
    # an RL job has a handful of traces per role: a cluster's many traces are not each read twice for a role
    sniff = sum(trace.kind == "kineto" for trace in traces) <= rules.sniff_max_traces
    told = {id(trace): _told(trace, rank_of, sniff) for trace in traces}
    if not any(t is not None and t[0] != rules.unknown_role for t in told.values()):
        return False
    _number_unranked(traces, told)
    for trace in traces:
        found = told[id(trace)]
        if found is None:  # a rank of another name in the job: its rank as any rank's, its role unknown
            rank, origin = rank_of(trace)
            found = (rules.unknown_role, rank or 0, origin or "no rank in its name")
        trace.role, trace.role_rank, trace.rank_origin = found[0], found[1], f"{found[0]} rank {found[1]} ({found[2]})"
    order = list(dict.fromkeys([*rules.roles.values(), rules.unknown_role]))

    def key(trace: RankSource) -> tuple[int, int, str]:
        # discrete mode writes a role's rank once per annotated call, in a folder per call: each is a trace
        return (order.index(trace.role) if trace.role in order else len(order), trace.role_rank, trace.path.parent.name)

    number = {k: index for index, k in enumerate(sorted({key(trace) for trace in traces}))}
    for trace in traces:
        trace.rank = number[key(trace)]
    _say_gaps(disc, traces, rules.unknown_role)
    return True


def _say_gaps(disc: Discovery, traces: list[RankSource], unknown: str) -> None:
    """Warn of traces whose role is unknown and of ranks missing from a role (its ranks are 0..N-1 in every
    framework: a gap is a trace not written, not copied, or profiled only on some ranks)."""
    odd = [trace for trace in traces if trace.role == unknown]
    if odd:
        disc.warnings.append(
            f"{len(odd)} trace(s) of this RL job whose role cannot be told from the file name or folder, read as "
            f"'{unknown}': " + short_list(f"{disc.relpath(trace.path)} (rank {trace.role_rank})" for trace in odd)
        )
    read = [trace for trace in traces if f"({CONTENT}" in (trace.rank_origin or "")]
    if read:
        disc.warnings.append(
            f"{len(read)} trace(s) of this RL job whose file name and folder tell no role, their role read from "
            "their content: "
            + short_list(f"{disc.relpath(trace.path)} as {trace.role} rank {trace.role_rank}" for trace in read)
        )
    by_role: dict[str, set[int]] = {}
    for trace in traces:
        if trace.role != unknown:
            by_role.setdefault(trace.role, set()).add(trace.role_rank)
    for role, ranks in sorted(by_role.items()):
        missing = sorted(set(range(max(ranks) + 1)) - ranks)
        if missing:
            disc.warnings.append(
                f"{role} rank(s) {', '.join(map(str, missing))} missing: the job's traces hold {role} rank(s) "
                f"{', '.join(map(str, sorted(ranks)))} only, so the {role} phases are read without them"
            )


def find_timers(disc: Discovery) -> None:
    """The framework's per-step timer log of an RL job (rules/rl.toml ``metrics_files``), in the analysed folder
    or a folder holding its traces up to it, as each RL trace's file ``rl_timers`` (read once, by the pipeline)."""
    found = _timer_file(disc)
    for rank in disc.ranks:
        if found is not None and rank.role is not None:
            rank.files["rl_timers"] = found


def _timer_file(disc: Discovery) -> Path | None:
    if not disc.root.is_dir() or not any(rank.role is not None for rank in disc.ranks):
        return None
    root = disc.root.resolve()
    folders = [root]
    for rank in disc.ranks:
        folder = rank.path.resolve().parent
        while folder != root and root in folder.parents:
            folders.append(folder)
            folder = folder.parent
    for folder in dict.fromkeys(folders):
        for name in rl.rules().metrics_files:
            if (folder / name).is_file() and not (folder / name).is_symlink():
                return folder / name
    return None
