"""The diagnosis of two runs: each side's causes (as ``profan analyze`` finds them, from the ranks compare already
read), matched across the sides by check and ranks, and said as the verdict of the comparison.

Why: a bucket that grew is a symptom ("communication +49 ms per step"); the cause that came with it ("rank 2 is a
straggler") is what to fix. The match rule (rules/checks.toml ``compare-causes``): a cause is its check and its
rank set. Same check and same ranks: one cause, *changed* when its gain (or bound) moved by at least
max(min_change_us, min_change_share of the larger) or its severity moved, else *unchanged*. Same check on ranks
that overlap in part: one cause that *changed ranks*. Same check on disjoint ranks (a straggler on rank 2 in A,
on rank 3 in B): two faults, one *vanished* and one *appeared*. A cause of one side only: appeared (B) or
vanished (A). Several causes of one check and rank set on a side pair in gain order. Sides that hold different
ranks (``--ranks 0,2``, two rank files) pair by check alone: there rank 0's straggler and rank 2's are the
same question asked of two ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from profan.model.causes import Cause
from profan.model.findings import SEVERITIES
from profan.model.rank import RankData
from profan.model.textfmt import fmt_ranks, ms
from profan.rulepack.pack import RulePack
from profan.sources.discovery.discover import Discovery

CHECK = "compare-causes"


@dataclass(frozen=True)
class CauseChange:
    """One cause of either side and what became of it from A to B (``cause_a`` or ``cause_b`` None: on one side
    only)."""

    status: str  # appeared | vanished | changed | unchanged
    cause_a: Cause | None
    cause_b: Cause | None
    ranks_changed: bool = False  # matched on ranks that overlap in part (sides of the same ranks only)

    @property
    def lead(self) -> Cause:
        """The side the verdict speaks of: B's cause, A's where it vanished."""
        return self.cause_b if self.cause_b is not None else self.cause_a  # type: ignore[return-value]


def side_causes(ranks: list[RankData], pack: RulePack, disc: Discovery) -> list[Cause]:
    """The causes ``profan analyze`` gives for these ranks, from the ranks already read (no file is read again)."""
    from profan.pipeline import build_report

    return build_report(ranks, pack, disc).causes


def match_causes(
    causes_a: list[Cause], causes_b: list[Cause], pack: RulePack, *, by_ranks: bool = True
) -> list[CauseChange]:
    """Each cause of A and B once, paired by check and ranks (the module's rule), ordered by B's gain or bound
    (largest first), the vanished ones after by A's. ``by_ranks`` False (the sides are different ranks: two ranks
    of one job, ranks 0 and 2): a rank number names no place on both sides, so causes pair by check alone."""
    left_a, left_b = list(causes_a), list(causes_b)
    pairs: list[tuple[Cause | None, Cause | None]] = []
    rules = (lambda mine, theirs: set(mine) == set(theirs), lambda mine, theirs: bool(set(mine) & set(theirs)))
    for same in rules if by_ranks else (lambda mine, theirs: True,):
        for cause_a in list(left_a):
            cause_b = next((c for c in left_b if c.check == cause_a.check and same(c.ranks, cause_a.ranks)), None)
            if cause_b is not None:
                pairs.append((cause_a, cause_b))
                left_a.remove(cause_a)
                left_b.remove(cause_b)
    pairs += [(cause, None) for cause in left_a] + [(None, cause) for cause in left_b]
    params = pack.check(CHECK)
    changes = [
        CauseChange(
            _status(cause_a, cause_b, params, by_ranks),
            cause_a,
            cause_b,
            by_ranks and cause_a is not None and cause_b is not None and set(cause_a.ranks) != set(cause_b.ranks),
        )
        for cause_a, cause_b in pairs
    ]
    return sorted(changes, key=_order)


def _order(change: CauseChange) -> tuple:
    worth_b = change.cause_b.worth_us if change.cause_b is not None else None
    worth_a = change.cause_a.worth_us if change.cause_a is not None else None
    return (change.cause_b is None, -(worth_b or 0.0), -(worth_a or 0.0), change.lead.check, change.lead.ranks)


def _status(cause_a: Cause | None, cause_b: Cause | None, params: Any, by_ranks: bool) -> str:
    if cause_a is None or cause_b is None:
        return "appeared" if cause_a is None else "vanished"
    if (
        (by_ranks and set(cause_a.ranks) != set(cause_b.ranks))
        or cause_a.severity != cause_b.severity
        or (cause_a.impact_us is None) != (cause_b.impact_us is None)
    ):
        return "changed"
    worth_a, worth_b = cause_a.worth_us or 0.0, cause_b.worth_us or 0.0
    moved = abs(worth_b - worth_a) >= max(params["min_change_us"], params["min_change_share"] * max(worth_a, worth_b))
    return "changed" if moved else "unchanged"


def worth_text(cause: Cause | None, texts: dict[str, str]) -> str:
    """A side's gain ('gain 60.6 ms per step'), its bound where it has no estimate, or 'no estimate'."""
    if cause is None or cause.worth_us is None:
        return texts["no_estimate"]
    return texts["gain" if cause.impact_us is not None else "bound"].format(value=ms(cause.worth_us))


def what_text(cause: Cause, phrases: dict[str, str]) -> str:
    """The cause in a few words (its check's phrase, filled with its ranks), else its title."""
    phrase = phrases.get(cause.check)
    if phrase is None or not cause.ranks:
        return cause.title
    one = len(cause.ranks) == 1
    words = {"rank_word": "rank" if one else "ranks", "ranks": fmt_ranks(cause.ranks)}
    return phrase.format(
        **words, **{"is": "is" if one else "are", "s": "s" if one else "", "its": "its" if one else "their"}
    )


def sentence(change: CauseChange, pack: RulePack) -> str:
    """The verdict's line for one change, from the texts of rules/checks.toml ``[check.compare]``."""
    texts = pack.check(CHECK)["compare"]
    key = "moved" if change.ranks_changed else change.status
    return texts[key].format(
        what=what_text(change.lead, texts["phrases"]),
        a_worth=worth_text(change.cause_a, texts),
        b_worth=worth_text(change.cause_b, texts),
        a_ranks=_where(change.cause_a),
        b_ranks=_where(change.cause_b),
    )


def _where(cause: Cause | None) -> str:
    if cause is None or not cause.ranks:
        return "the job"
    return f"rank{'s' if len(cause.ranks) != 1 else ''} {fmt_ranks(cause.ranks)}"


def causes_table(changes: list[CauseChange], pack: RulePack) -> pl.DataFrame:
    """Table ``compare_causes``: one row per change, the verdict's order, both sides' gains and bounds side by
    side (``a_…``/``b_…``, null on the side without the cause)."""
    rows = [
        {
            "status": change.status,
            "ranks_changed": change.ranks_changed,
            "check": change.lead.check,
            "severity": change.lead.severity,
            "sentence": sentence(change, pack),
            **_side("a", change.cause_a),
            **_side("b", change.cause_b),
        }
        for change in changes
    ]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)


def _side(label: str, cause: Cause | None) -> dict[str, Any]:
    fields = ("ranks", "steps", "impact_us", "bound_us", "impact_share", "step_us", "severity", "title")
    if cause is None:
        return {f"{label}_{name}": None for name in fields}
    values = cause.to_dict()
    return {f"{label}_{name}": values[name] for name in fields}


SCHEMA = {
    "status": pl.String,
    "ranks_changed": pl.Boolean,
    "check": pl.String,
    "severity": pl.String,
    "sentence": pl.String,
    **{
        f"{label}_{name}": dtype
        for label in ("a", "b")
        for name, dtype in (
            ("ranks", pl.List(pl.Int64)),
            ("steps", pl.List(pl.Int64)),
            ("impact_us", pl.Float64),
            ("bound_us", pl.Float64),
            ("impact_share", pl.Float64),
            ("step_us", pl.Float64),
            ("severity", pl.String),
            ("title", pl.String),
        )
    },
}


def appeared_at(changes: pl.DataFrame, severity: str) -> list[str]:
    """The verdict's lines of causes that appeared in B at ``severity`` or above (``--fail-on-regression causes``)."""
    if changes.is_empty():
        return []
    graver = list(SEVERITIES[: SEVERITIES.index(severity) + 1])
    hit = changes.filter((pl.col("status") == "appeared") & pl.col("severity").is_in(graver))
    return hit["sentence"].to_list()
