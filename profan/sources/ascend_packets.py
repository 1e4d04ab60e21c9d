"""Reader for the packet-size distribution in ``communication.json``: per op and link transport, how many
transfers of each size there were and how long they took (``"Size Distribution": {"<MB>": [count, total ms]}``).

Small transfers do not reach a link's bandwidth (latency dominates), so this is what the small-packet check reads.
Only link transports carry a distribution (SDMA, the engine total of HCCS/PCIE/SIO, has it empty), so nothing is
counted twice. ``Total Op Info`` is skipped: it repeats the ops' entries.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from profan.evidence import make_pointer
from profan.sources.ascend_meta import load_json

TOTAL_KEY = "Total Op Info"
_STEP = re.compile(r"^step(\d*)$")
SCHEMA = {"step": pl.Int64, "kind": pl.Utf8, "op": pl.Utf8, "transport": pl.Utf8, "packet_mb": pl.Float64,
          "count": pl.Int64, "time_ms": pl.Float64, "pointer": pl.Utf8, "transport_pointer": pl.Utf8}


def read(path: Path) -> pl.DataFrame:
    """One row per (step, op, transport, packet size). Malformed entries are ignored (the op reader counts them).

    ``pointer`` locates the ``[count, ms]`` pair; ``transport_pointer`` the op's transport object that holds the
    distribution (what findings cite, so a reader sees the sizes next to the totals).
    """
    doc = load_json(path)
    rows: list[dict] = []
    if not isinstance(doc, dict):
        return pl.DataFrame(schema=SCHEMA)
    for step_key, sections in doc.items():
        m = _STEP.match(step_key)
        if not m or not isinstance(sections, dict):
            continue
        step = int(m.group(1)) if m.group(1) else None
        for kind, entries in sections.items():
            if not isinstance(entries, dict):
                continue
            for op, body in entries.items():
                if op == TOTAL_KEY or not isinstance(body, dict):
                    continue
                for transport, b in (body.get("Communication Bandwidth Info") or {}).items():
                    dist = b.get("Size Distribution") if isinstance(b, dict) else None
                    if not isinstance(dist, dict):
                        continue
                    for size, val in dist.items():
                        try:
                            mb, cnt, t = float(size), int(val[0]), float(val[1])
                        except (TypeError, ValueError, IndexError):
                            continue
                        rows.append({"step": step, "kind": kind, "op": op, "transport": transport, "packet_mb": mb,
                                     "count": cnt, "time_ms": t,
                                     "pointer": make_pointer(step_key, kind, op, "Communication Bandwidth Info",
                                                             transport, "Size Distribution", size),
                                     "transport_pointer": make_pointer(step_key, kind, op,
                                                                       "Communication Bandwidth Info", transport)})
    return pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)
