"""The Report value: everything a renderer needs, computed once. Renderers only render it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import polars as pl

from profan.findings import Finding

SCHEMA = "profan.report/1"


@dataclass
class Report:
    source: dict[str, Any]  # root, format, ranks[{rank, path, files, …}]
    findings: list[Finding]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)  # breakdown, steps, top_kernels, …
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # assumptions and what was skipped on purpose
    meta: dict[str, Any] = field(default_factory=dict)  # profan version, rule files, timings

    @property
    def breakdown(self) -> pl.DataFrame:
        return self.tables.get("breakdown", pl.DataFrame())

    def finding(self, fid: str) -> Finding:
        for f in self.findings:
            if f.id == fid:
                return f
        raise KeyError(fid)

    @property
    def worst_severity(self) -> str | None:
        order = ("critical", "warning", "info")
        sev = {f.severity for f in self.findings}
        return next((s for s in order if s in sev), None)

    def to_dict(self, *, tables: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "source": self.source,
            "breakdown": records(self.breakdown),
            "findings": [f.to_dict() for f in self.findings],
            "warnings": self.warnings,
            "notes": self.notes,
            "meta": self.meta,
        }
        if tables:
            out["tables"] = {k: records(v) for k, v in self.tables.items() if k != "breakdown"}
        return clean(out)


def records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return df.to_dicts() if df is not None and not df.is_empty() else []


def clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf -> None, floats rounded to 6 significant decimals, dates to ISO."""
    if isinstance(obj, float):
        if math.isnan(obj) or math.isinf(obj):
            return None
        return round(obj, 6)
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    return obj


def from_dict(d: dict[str, Any]) -> Report:
    """Rebuild a Report from its JSON (tables become DataFrames again) — for `profan evidence REPORT.json`."""
    if d.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document (schema={d.get('schema')!r})")
    tables = {k: pl.DataFrame(v) for k, v in (d.get("tables") or {}).items() if v}
    if d.get("breakdown"):
        tables["breakdown"] = pl.DataFrame(d["breakdown"])
    return Report(source=d["source"], findings=[Finding.from_dict(f) for f in d["findings"]], tables=tables,
                  warnings=d.get("warnings", []), notes=d.get("notes", []), meta=d.get("meta", {}))
