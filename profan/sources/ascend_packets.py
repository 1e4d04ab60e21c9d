"""Reader for the packet-size distribution in ``communication.json``: per op and link transport, how many
transfers of each size there were and how long they took (``"Size Distribution": {"<MB>": [count, total ms]}``).

Small transfers do not reach a link's bandwidth (latency dominates), so this is what the small-packet check reads.
Only link transports carry a distribution (SDMA, the engine total of HCCS/PCIE/SIO, has it empty), so nothing is
counted twice. ``Total Op Info`` is skipped: it repeats the ops' entries.
"""

from __future__ import annotations

import polars as pl

from profan.evidence import make_pointer
from profan.sources import ascend_comm
from profan.sources.rowframe import rows_frame

SCHEMA = {"step": pl.Int64, "kind": pl.Utf8, "op": pl.Utf8, "transport": pl.Utf8, "packet_mb": pl.Float64,
          "count": pl.Int64, "time_ms": pl.Float64, "pointer": pl.Utf8, "transport_pointer": pl.Utf8}


def read(items: list[ascend_comm.Entry]) -> pl.DataFrame:
    """One row per (step, op, transport, packet size), from `ascend_comm.entries` (the document is parsed once for
    ops and packets). Malformed entries are ignored (the op reader counts them).

    ``pointer`` locates the ``[count, ms]`` pair; ``transport_pointer`` the op's transport object that holds the
    distribution (what findings cite, so a reader sees the sizes next to the totals).
    """
    rows: list[tuple] = []  # in SCHEMA order
    for step_key, step, kind, op, body in items:
        if not isinstance(body, dict):
            continue
        bw_info = body.get("Communication Bandwidth Info")
        for transport, b in (bw_info.items() if isinstance(bw_info, dict) else ()):
            dist = b.get("Size Distribution") if isinstance(b, dict) else None
            if not isinstance(dist, dict):
                continue
            tptr = make_pointer(step_key, kind, op, "Communication Bandwidth Info", transport)
            for size, val in dist.items():
                try:
                    mb, cnt, t = float(size), int(val[0]), float(val[1])
                except (TypeError, ValueError, IndexError):
                    continue
                rows.append((step, kind, op, transport, mb, cnt, t,
                             tptr + make_pointer("Size Distribution", size), tptr))
    return rows_frame(rows, SCHEMA)
