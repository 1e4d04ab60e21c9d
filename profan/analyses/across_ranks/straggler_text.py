"""The words of a straggler finding: where the rank arrives last, what the clocks show, what the profiler itself
records of the wait, and the cause (extra work or a host-side gap), in the terms of the device the trace measured.
"""

from __future__ import annotations

from profan.analyses.across_ranks.straggler_late_rank import LateRank
from profan.analyses.across_ranks.straggler_windows import WindowComparison
from profan.model.textfmt import ms
from profan.rulepack.pack import Check


def step_text(step: int | None) -> str:
    return f"step {step}" if step is not None else "the profile"


def where_last(lr: LateRank) -> str:
    """Which collectives of which groups it arrives last at: 'collectives 1–5 of group 123; collective 2 of …'."""
    return "; ".join(
        f"{_ordinal_list(g['seq'].to_list())} of group {grp}"
        for (grp,), g in lr.last_rows.group_by(["group"], maintain_order=True)
    )


def _ordinal_list(seqs: list[int]) -> str:
    """[0,1,2,3,4] -> 'collectives 1–5'; [5,6] -> 'collectives 6, 7'."""
    n = sorted(seq + 1 for seq in seqs)
    if len(n) == 1:
        return f"collective {n[0]}"
    if len(n) > 2 and n == list(range(n[0], n[-1] + 1)):
        return f"collectives {n[0]}–{n[-1]}"
    return "collectives " + ", ".join(map(str, n))


def straggler_message(lr: LateRank, chk: Check) -> str:
    worst, share = lr.worst, lr.share
    return (
        f"Rank {lr.rank} arrives last at {int(worst['times_last'])} of {int(worst['collectives'])} aligned "
        f"collectives in {step_text(lr.step)} ({where_last(lr)}). At {int(worst['times_flagged'])} of them "
        f"it is an outlier (over {chk['mad_z']:g} robust deviations and {chk['min_lag_us']:,.0f} µs behind the "
        f"median rank) and holds them up by {ms(worst['lag_us'])} in total after the second-latest rank"
        + (f" ({100 * share:.1f}% of the step)" if share is not None else "")
        + f".{_clock_text(lr, chk)} Peers wait {ms(worst['peers_wait_us'])} inside the collectives it is last "
        f"at (summed over the peers), {ms(worst['caused_wait_us'])} of which only because of it."
        f"{_recorded_text(lr)} Compared with rank {lr.typical} (typical): {_cause_text(lr.why)}"
        f"{_other_steps_text(lr)}{_also_text(lr)}"
    )


def _clock_text(lr: LateRank, chk: Check) -> str:
    """Where the ranks' clocks agree (all end together), the late start itself is visible: say so."""
    top = lr.top
    if top["end_spread_us"] is None or top["end_spread_us"] > chk["min_lag_us"]:
        return ""
    return (
        f" At {_ordinal_list([top['seq']])} ({top['name'].split('(')[0][:60]}) it starts "
        f"{ms(top['start_lag_us'])} after the earliest rank while all ranks end within "
        f"{top['end_spread_us']:,.0f} µs."
    )


def _recorded_text(lr: LateRank) -> str:
    if not lr.recorded.len():
        return ""
    n = lr.picked.height
    return (
        f" The profiler itself records {ms(float(lr.recorded.sum()))} of wait on the peers at "
        f"{'that collective' if n == 1 else f'those {n} collectives'} (Wait Time in communication.json)."
    )


def _other_steps_text(lr: LateRank) -> str:
    h = lr.steps
    if h.height <= 1:
        return ""
    return (
        f" It is a straggler in {h.height} steps ({', '.join(str(s) for s in h['step'].to_list())}), "
        f"{ms(float(h['lag_us'].mean()))} late per step on average."
    )


def _also_text(lr: LateRank) -> str:
    if not lr.also.height:
        return ""
    return (
        " Also last, below the straggler threshold: "
        + "; ".join(
            f"rank {rank} at {_ordinal_list(g['seq'].to_list())} ({ms(float(g['lateness_us'].max()))})"
            for (rank,), g in lr.also.sort("rank", "seq").group_by(["rank"], maintain_order=True)
        )
        + "."
    )


# what the windows hold, in the words of the device the trace measured
_WORDS = {
    False: {
        "work": "device work",
        "rows": "kernel rows",
        "gap": "the device sat idle waiting for work: dispatch, data loading, synchronisation or Python",
        "calls": "launches",
        "none": "no kernel",
    },
    True: {
        "work": "work on the main thread",
        "rows": "op rows",
        "gap": "the main thread ran no op: a sleep, I/O, data loading, synchronisation or Python between ops",
        "calls": "calls",
        "none": "no op",
    },
}


def _cause_text(why: WindowComparison) -> str:
    w = _WORDS[why.cpu]
    if why.cause_class == "unknown":
        return (
            f"its pre-collective windows are {ms(why.extra_window_us)} longer; the {w['rows']} needed to "
            f"split that into {w['work']} and idle time are missing on one of the two ranks."
        )
    parts = [
        f"its pre-collective windows are {ms(why.extra_window_us)} longer: "
        f"{ms(why.extra_compute_us)} more {w['work']} and {ms(why.extra_idle_us)} more time with no "
        f"{w['work']}"
    ]
    if why.cause_class == "host_gap":
        parts.append(f" — a host-side gap ({w['gap']}).{_gap_text(why.gap, w['none'])}")
    else:
        ks = "; ".join(
            f"{kernel['op']} +{kernel['delta_us'] / 1000:,.2f} ms ({kernel['how']}: {kernel['count']} vs "
            f"{kernel['typical_count']} {w['calls']})"
            for kernel in why.kernels[:3]
        )
        buckets = ", ".join(f"{b} {v / 1000:+,.2f} ms" for b, v in list(why.by_bucket.items())[:3])
        parts.append(f" — extra compute, by bucket {buckets}; largest: {ks}.")
    return "".join(parts)


def _gap_text(g: dict | None, none: str = "no kernel") -> str:
    """Where the slow rank's longest stretch with ``none`` (no kernel, or no op on a CPU-only trace's main
    thread) is, and the typical rank's at the same place."""
    if not g or not g.get("lines"):
        return ""
    unit = "events" if str(g.get("file", "")).endswith((".json", ".json.gz")) else "lines"
    return (
        f" The longest stretch is {ms(g['gap_us'])} with {none}, between {unit} "
        f"{' and '.join(map(str, g['lines']))} of its {'trace' if unit == 'events' else 'kernel file'}"
        + (
            f" (rank {g['typical']['rank']}: {ms(g['typical']['gap_us'])} at the same place)"
            if g.get("typical") and g["typical"].get("gap_us") is not None
            else ""
        )
        + "."
    )
