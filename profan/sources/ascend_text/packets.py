"""Reader for the packet-size distribution in ``communication.json``: per op and link transport, how many
transfers of each size there were and how long they took (``"Size Distribution": {"<MB>": [count, total ms]}``).

Small transfers do not reach a link's bandwidth (latency dominates), so this is what the small-packet check reads.
Only link transports carry a distribution (SDMA, the engine total of HCCS/PCIE/SIO, has it empty), so nothing is
counted twice. ``Total Op Info`` is skipped: it repeats the ops' entries.
"""

from __future__ import annotations

import math

import polars as pl

from profan.model.evidence import make_pointer
from profan.sources.ascend_text import comm as ascend_comm
from profan.sources.common.rowframe import rows_frame

SCHEMA = {
    "step": pl.Int64,
    "kind": pl.Utf8,
    "op": pl.Utf8,
    "transport": pl.Utf8,
    "packet_mb": pl.Float64,
    "count": pl.Int64,
    "time_ms": pl.Float64,
    "pointer": pl.Utf8,
    "transport_pointer": pl.Utf8,
}


def read(items: list[ascend_comm.Entry]) -> tuple[pl.DataFrame, int]:
    """(one row per (step, op, transport, packet size), size entries skipped), from `ascend_comm.entries` (the
    document is parsed once for ops and packets). Ops and transports of unexpected shape are left to the op
    reader, which counts them; a size entry that is not ``"<MB>": [count, ms]`` with a finite size, a whole
    count from 0 to 2^63 and a finite time of 0 or more is skipped and counted here.

    ``pointer`` locates the ``[count, ms]`` pair; ``transport_pointer`` the op's transport object that holds the
    distribution (what findings cite, so a reader sees the sizes next to the totals).
    """
    rows: list[tuple] = []  # in SCHEMA order
    skipped = 0
    for step_key, step, kind, op, body in items:
        if not isinstance(body, dict):
            continue
        bw_info = body.get("Communication Bandwidth Info")
        for transport, b in bw_info.items() if isinstance(bw_info, dict) else ():
            dist = b.get("Size Distribution") if isinstance(b, dict) else None
            if not isinstance(dist, dict):
                continue
            tptr = make_pointer(step_key, kind, op, "Communication Bandwidth Info", transport)
            for size, val in dist.items():
                pair = _pair(size, val)
                if pair is None:
                    skipped += 1
                    continue
                rows.append((step, kind, op, transport, *pair, tptr + make_pointer("Size Distribution", size), tptr))
    return rows_frame(rows, SCHEMA), skipped


def _pair(size: str, val: object) -> tuple[float, int, float] | None:
    """(MB, count, ms) of one size entry, or None when it is not one (see `read`)."""
    if not isinstance(val, list | tuple) or len(val) < 2:
        return None
    cnt, ms = val[0], val[1]
    try:
        mb = float(size)
    except ValueError:
        return None
    if (
        isinstance(cnt, bool)
        or not isinstance(cnt, int | float)
        or isinstance(ms, bool)
        or not isinstance(ms, int | float)
    ):
        return None
    if not (
        math.isfinite(mb)
        and math.isfinite(cnt)
        and cnt == int(cnt)
        and 0 <= cnt < 2**63
        and math.isfinite(ms)
        and ms >= 0
    ):
        return None
    return mb, int(cnt), float(ms)
