"""Reader for ``communication.json``: per step, per communication op, the time split and the bandwidth per
transport (format reference §5). ``Total Op Info`` aggregates are excluded — they are not ops.

Each row carries a JSON pointer to the op's object, the evidence locator.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from profan.errors import ProfanInputError
from profan.evidence import make_pointer
from profan.sources.ascend_meta import load_json

TOTAL_KEY = "Total Op Info"
_STEP = re.compile(r"^step(\d*)$")
OP_SCHEMA = {
    "step": pl.Int64, "kind": pl.Utf8, "op": pl.Utf8, "op_name": pl.Utf8, "group_hash": pl.Utf8,
    "start_us": pl.Float64, "elapse_ms": pl.Float64, "transit_ms": pl.Float64, "wait_ms": pl.Float64,
    "sync_ms": pl.Float64, "idle_ms": pl.Float64, "pointer": pl.Utf8,
}
BW_SCHEMA = {
    "step": pl.Int64, "kind": pl.Utf8, "op": pl.Utf8, "transport": pl.Utf8, "size_mb": pl.Float64,
    "time_ms": pl.Float64, "bandwidth_gbps": pl.Float64, "large_packet_ratio": pl.Float64, "pointer": pl.Utf8,
}


def _f(d: dict, key: str) -> float | None:
    v = d.get(key)
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def read(path: Path) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(ops, bandwidth rows, skipped entries)."""
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise ProfanInputError(path, "expected a JSON object keyed by step")
    ops: list[dict] = []
    bws: list[dict] = []
    skipped = 0
    for step_key, sections in doc.items():
        m = _STEP.match(step_key)
        if not m or not isinstance(sections, dict):
            skipped += 1
            continue
        step = int(m.group(1)) if m.group(1) else None
        for kind, entries in sections.items():
            if not isinstance(entries, dict):
                skipped += 1
                continue
            for op, body in entries.items():
                if op == TOTAL_KEY:
                    continue
                if not isinstance(body, dict) or not isinstance(body.get("Communication Time Info"), dict):
                    skipped += 1
                    continue
                t = body["Communication Time Info"]
                name, _, group = op.partition("@")
                ptr = make_pointer(step_key, kind, op)
                ops.append({"step": step, "kind": kind, "op": op, "op_name": name, "group_hash": group or None,
                            "start_us": _f(t, "Start Timestamp(us)"), "elapse_ms": _f(t, "Elapse Time(ms)"),
                            "transit_ms": _f(t, "Transit Time(ms)"), "wait_ms": _f(t, "Wait Time(ms)"),
                            "sync_ms": _f(t, "Synchronization Time(ms)"), "idle_ms": _f(t, "Idle Time(ms)"),
                            "pointer": ptr})
                for transport, b in (body.get("Communication Bandwidth Info") or {}).items():
                    if not isinstance(b, dict):
                        continue
                    bws.append({"step": step, "kind": kind, "op": op, "transport": transport,
                                "size_mb": _f(b, "Transit Size(MB)"), "time_ms": _f(b, "Transit Time(ms)"),
                                "bandwidth_gbps": _f(b, "Bandwidth(GB/s)"),
                                "large_packet_ratio": _f(b, "Large Packet Ratio"),
                                "pointer": make_pointer(step_key, kind, op, "Communication Bandwidth Info",
                                                        transport)})
    return (pl.DataFrame(ops, schema=OP_SCHEMA, orient="row") if ops else pl.DataFrame(schema=OP_SCHEMA),
            pl.DataFrame(bws, schema=BW_SCHEMA, orient="row") if bws else pl.DataFrame(schema=BW_SCHEMA),
            skipped)
