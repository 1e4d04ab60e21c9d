"""What discovery refuses or warns about once the ranks are known: ranks holding nothing profan reads (all of them:
one input error naming the files and what is missing, never an empty report; some: skipped with a warning), and
Ascend ranks missing kernel_details.csv or step_trace_time.csv, analysed with what they have.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from profan.model.errors import ProfanInputError
from profan.sources.discovery.names import ASCEND_FILES, OUTPUT_DIR, READ_KINDS, short_list

if TYPE_CHECKING:  # discover.py defines them and imports this module: types only, so run time imports point one way
    from profan.sources.discovery.discover import Discovery, RankSource


def _unreadable(rs: RankSource, disc: Discovery) -> str:
    """Why a rank holds nothing profan reads (one clause naming its files); empty when it holds something."""
    if any(k in rs.files for k in READ_KINDS):
        return ""
    where = disc.relpath(rs.path) or "."
    if rs.unread:
        return f"{where} holds {rs.unread}"
    out = rs.path / OUTPUT_DIR if (rs.path / OUTPUT_DIR).is_dir() else rs.path
    try:
        held = sorted(path.name for path in out.iterdir() if path.is_file())
    except OSError:
        held = []
    return (
        f"{where} holds {short_list(held, 4) if held else 'no file'} but none of "
        f"{', '.join(ASCEND_FILES.values())} nor ascend_pytorch_profiler_*.db (the text or DB export)"
    )


def refuse_unreadable(disc: Discovery) -> None:
    """Ranks with nothing profan reads: all of them is one input error naming the files and what is missing (never
    an empty report); some of them are skipped with a warning that names them."""
    why = {id(rank): _unreadable(rank, disc) for rank in disc.ranks}
    bad = [rank for rank in disc.ranks if why[id(rank)]]
    if not bad:
        return
    if len(bad) == len(disc.ranks):
        more = f" (and {len(bad) - 1} more folder(s) alike)" if len(bad) > 1 else ""
        raise ProfanInputError(disc.root, f"nothing profan can read: {why[id(bad[0])]}{more}")
    disc.ranks = [rank for rank in disc.ranks if not why[id(rank)]]
    disc.warnings.append(
        f"skipped {len(bad)} rank(s) with nothing profan reads: " + "; ".join(why[id(rank)] for rank in bad[:3])
    )


def note_missing_files(disc: Discovery) -> None:
    wanted = ("kernel_details", "step_trace_time")
    for rank in disc.ranks:
        for value, why in rank.ignored:
            disc.warnings.append(f"rank {rank.rank}: {disc.relpath(value)} {why}; ignored")
        if rank.kind != "ascend" or "ascend_db" in rank.files:
            continue
        missing = [ASCEND_FILES[w] for w in wanted if w not in rank.files]
        if missing and rank.files:
            have = sorted(Path(value).name for key, value in rank.files.items() if key in ASCEND_FILES)
            disc.warnings.append(
                f"rank {rank.rank} ({disc.relpath(rank.path)}) has no {', '.join(missing)}; "
                f"using what it has: {', '.join(have) or 'nothing'}"
            )
