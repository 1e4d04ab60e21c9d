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
from profan.sources.rowframe import rows_frame

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


def entries(path: Path) -> tuple[list[tuple[str, int | None, str, str, object]], int]:
    """The op-level entries of a communication.json / communication_matrix.json document:
    ([(step key, step, section, op key, body), …], skipped count). ``Total Op Info`` aggregates are not ops and are
    left out; a step key or section of unexpected shape is counted as skipped.
    """
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise ProfanInputError(path, "expected a JSON object keyed by step")
    out: list[tuple[str, int | None, str, str, object]] = []
    skipped = 0
    for step_key, sections in doc.items():
        is_step, step = step_of(step_key)
        if not is_step or not isinstance(sections, dict):
            skipped += 1
            continue
        for kind, items in sections.items():
            if not isinstance(items, dict):
                skipped += 1
                continue
            out += [(step_key, step, kind, key, body) for key, body in items.items() if key != TOTAL_KEY]
    return out, skipped


def step_of(step_key: str) -> tuple[bool, int | None]:
    """(whether a top-level key names a step, its number): ``step12`` → (True, 12), ``step`` → (True, None)."""
    m = _STEP.match(step_key)
    return (True, int(m.group(1)) if m.group(1) else None) if m else (False, None)


def read(path: Path) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(ops, bandwidth rows, skipped entries)."""
    return tables(*entries(path))


Entry = tuple[str, int | None, str, str, object]


def tables(items: list[Entry], skipped: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(ops, bandwidth rows, skipped entries) from `entries` — so other readers of the same document (packet sizes)
    share one parse."""
    ops: list[tuple] = []  # rows as tuples in schema order: many ranks × thousands of ops
    bws: list[tuple] = []
    for step_key, step, kind, op, body in items:
        if not isinstance(body, dict) or not isinstance(body.get("Communication Time Info"), dict):
            skipped += 1
            continue
        t = body["Communication Time Info"]
        name, _, group = op.partition("@")
        ptr = make_pointer(step_key, kind, op)
        # numbers as the JSON holds them; rows_frame coerces another type (text, a list) to float or null
        ops.append((step, kind, op, name, group or None, t.get("Start Timestamp(us)"), t.get("Elapse Time(ms)"),
                    t.get("Transit Time(ms)"), t.get("Wait Time(ms)"), t.get("Synchronization Time(ms)"),
                    t.get("Idle Time(ms)"), ptr))
        bw_info = body.get("Communication Bandwidth Info")
        for transport, b in (bw_info.items() if isinstance(bw_info, dict) else ()):
            if not isinstance(b, dict):
                continue
            bws.append((step, kind, op, transport, b.get("Transit Size(MB)"), b.get("Transit Time(ms)"),
                        b.get("Bandwidth(GB/s)"), b.get("Large Packet Ratio"),
                        ptr + make_pointer("Communication Bandwidth Info", transport)))
    return rows_frame(ops, OP_SCHEMA), rows_frame(bws, BW_SCHEMA), skipped
