"""JSON renderer: the `profan.report/1` document (schema in docs/report-schema.md)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profan.report import Report


def render_json(report: Report, out: Path | None = None) -> str | None:
    # msgspec encodes a long report (thousands of breakdown rows, a cluster's link tables) ~10x faster than the
    # stdlib; same JSON. Written as bytes: a cluster's report is tens of MB.
    data = msgspec.json.format(msgspec.json.encode(report.to_dict()), indent=1)
    if out is not None:
        out.write_bytes(data + b"\n")
        return None
    return data.decode("utf-8")
