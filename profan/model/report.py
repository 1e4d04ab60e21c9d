"""The Report value: everything a renderer needs, computed once. Renderers only render it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import polars as pl

from profan.model.causes import Cause
from profan.model.evidence import typed
from profan.model.findings import SEVERITIES, Finding, Severity
from profan.model.rl_ledger import ledger_summary

SCHEMA = "profan.report/2"


@dataclass
class Report:
    source: dict[str, Any]  # root, format, ranks[{rank, path, files, …}]
    findings: list[Finding]
    causes: list[Cause] = field(default_factory=list)  # the diagnosis, largest estimated gain first
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)  # breakdown, steps, top_kernels, …
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # assumptions and what was skipped on purpose
    meta: dict[str, Any] = field(default_factory=dict)  # profan version, rule files, timings
    # The data folder this process analysed (None for a report loaded from a file): its evidence may be read
    # back from there. Never written out: a loaded report's root is decided by `trust.report_root`.
    read_root: Path | None = None

    @property
    def breakdown(self) -> pl.DataFrame:
        return self.tables.get("breakdown", pl.DataFrame())

    def finding(self, fid: str) -> Finding:
        """A finding by id, or a member of a group by its id (F3.2)."""
        for finding in self.findings:
            if finding.id == fid:
                return finding
            for member in finding.members:
                if member.id == fid:
                    return member
        raise KeyError(fid)

    def ungrouped(self) -> list[Finding]:
        """The findings as measured, one per rank and step: each single finding and each member of a group."""
        return [m for finding in self.findings for m in (finding.members or (finding,))]

    def cause(self, cid: str) -> Cause:
        for cause in self.causes:
            if cause.id == cid:
                return cause
        raise KeyError(cid)

    @property
    def headline(self) -> list[Cause | Finding]:
        """What to read first: the causes, then the warning and critical findings no cause explains."""
        return [
            *self.causes,
            *(
                finding
                for finding in self.findings
                if finding.explained_by is None and finding.severity in ("critical", "warning")
            ),
        ]

    @property
    def worst_severity(self) -> Severity | None:
        sev = {finding.severity for finding in self.findings}
        return next((s for s in SEVERITIES if s in sev), None)

    def to_dict(self, *, rows: Callable[[pl.DataFrame], Any] | None = None) -> dict[str, Any]:
        """The ``profan.report/2`` document. ``rows`` turns each table into its JSON value (default `records`:
        a list of row dicts); the JSON renderer passes one that has polars write the table's JSON instead."""
        rows = rows or records  # tables are made JSON-safe column by column, not by `clean`
        out: dict[str, Any] = clean(
            {
                "schema": SCHEMA,
                "source": self.source,
                "headline": [item.id for item in self.headline],
                "causes": [cause.to_dict() for cause in self.causes],
                "findings": [finding.to_dict() for finding in self.findings],
                "warnings": self.warnings,
                "notes": self.notes,
                "meta": self.meta,
            }
        )
        out["breakdown"] = rows(self.breakdown)
        ledger = ledger_summary(self.tables)
        if ledger is not None:  # an RL job's step ledger, said beside the verdict
            out["rl_ledger"] = clean(ledger)
        out["tables"] = {key: rows(value) for key, value in self.tables.items() if key != "breakdown"}
        order = (
            "schema",
            "source",
            "headline",
            "causes",
            "breakdown",
            "rl_ledger",
            "findings",
            "warnings",
            "notes",
            "meta",
            "tables",
        )
        return {key: out[key] for key in order if key in out}


def records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON-safe rows, as `clean` makes them up to the last digit. Floats (and lists of floats) are
    rounded and NaN/inf nulled by polars, column by column: a cluster's report holds millions of values, and a
    recursive Python walk over them cost seconds. Two differences from `clean`, both below 1e-6: a value exactly
    half-way between two 6-decimal numbers may round the other way, and magnitudes from 1e9 up keep all their
    digits (`_json_float`). Tables with other column types take the walk."""
    if frame is None or frame.is_empty():
        return []
    safe = _json_safe(frame)
    return clean(frame.to_dicts()) if safe is None else safe.to_dicts()


def records_json(frame: pl.DataFrame) -> bytes:
    """`records` encoded as a JSON array, written by polars without Python rows in between: the same bytes as
    encoding `records` with msgspec, in half the time (a 64-rank report's tables are 37 MB)."""
    if frame is None or frame.is_empty():
        return b"[]"
    safe = _json_safe(frame)
    if safe is None:
        import msgspec

        return msgspec.json.encode(clean(frame.to_dicts()))
    return safe.write_json().encode("utf-8")


def _json_safe(df: pl.DataFrame) -> pl.DataFrame | None:
    """``df`` with its float columns made JSON-safe (`_json_float`); None when a column type needs `clean`."""
    exprs: list[pl.Expr] = []
    for name, dtype in df.schema.items():
        col = pl.col(name)
        if dtype.is_float():
            exprs.append(_json_float(col).alias(name))
        elif isinstance(dtype, pl.List) and dtype.inner.is_float():
            exprs.append(col.list.eval(_json_float(pl.element())).alias(name))
        elif not (
            dtype.is_numeric()
            or dtype in (pl.String, pl.Boolean, pl.Null)
            or (isinstance(dtype, pl.List) and (dtype.inner.is_numeric() or dtype.inner == pl.String))
        ):
            return None
    return df.with_columns(exprs) if exprs else df


def _json_float(x: pl.Expr) -> pl.Expr:
    """`clean`'s float rule in polars: NaN/inf -> null, 6 decimals. Magnitudes from 1e9 up (epoch-µs timestamps)
    are kept as they are: there a float has no 6th decimal to round, and scaling by 1e6 would lose digits."""
    return pl.when(~x.is_finite()).then(None).when(x.abs() < 1e9).then(x.round(6)).otherwise(x)


def clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf -> None, floats rounded to 6 significant decimals, dates to ISO."""
    if isinstance(obj, float):
        if math.isnan(obj) or math.isinf(obj):
            return None
        return round(obj, 6)
    if isinstance(obj, dict):
        return {str(key): clean(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(value) for value in obj]
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    return obj


def from_dict(d: dict[str, Any]) -> Report:
    """Rebuild a Report from its JSON (tables become DataFrames again) — for `profan evidence REPORT.json`."""
    if d.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document (schema={d.get('schema')!r})")
    try:
        tables = {key: pl.DataFrame(value) for key, value in typed(d, "tables", dict, {}).items() if value}
        if d.get("breakdown"):
            tables["breakdown"] = pl.DataFrame(d["breakdown"])
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
        raise ValueError(f"a table is not a list of rows ({str(exc)[:80]})") from None
    return Report(
        source=typed(d, "source", dict),
        findings=[Finding.from_dict(f) for f in typed(d, "findings", list)],
        causes=[Cause.from_dict(c) for c in typed(d, "causes", list, [])],
        tables=tables,
        warnings=typed(d, "warnings", list, []),
        notes=typed(d, "notes", list, []),
        meta=typed(d, "meta", dict, {}),
    )
