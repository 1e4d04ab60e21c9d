"""JSON renderer: the `profan.report/2` document (schema in docs/report-schema.md)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profan.model.report import Report, records_json


def render_json(report: Report, out: Path | None = None) -> str | None:
    """The report as indented JSON. The tables are encoded by polars (`records_json`) and spliced in as raw
    JSON; the rest by msgspec, ~10x faster than the stdlib. The bytes equal ``report.to_dict()`` encoded whole.
    Written as bytes: a cluster's report is tens of MB."""
    doc = report.to_dict(rows=lambda df: msgspec.Raw(records_json(df)))
    data = msgspec.json.format(msgspec.json.encode(doc), indent=1)
    if out is not None:
        out.write_bytes(data + b"\n")
        return None
    return data.decode("utf-8")
