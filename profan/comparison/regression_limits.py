"""``profan compare --fail-on-regression``: the limits, checked before any file is read, and what regressed past
them, read from the comparison's own figures (the total finding, the bucket table and the verdict's causes)."""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from profan.comparison.cause_changes import CHECK as CAUSES_CHECK
from profan.comparison.cause_changes import appeared_at
from profan.comparison.findings import CHECK
from profan.model.errors import ProfanInputError
from profan.model.report import Report
from profan.model.textfmt import ms
from profan.rulepack.pack import RulePack

CAUSES = "causes"  # the value that gates on causes that appeared in B


class Limits(NamedTuple):
    """What ``--fail-on-regression`` allows: B's step time and buckets' growth in percent of A, and the severity
    from which a cause that appeared in B fails (None: causes not gated)."""

    step_pct: float | None
    bucket_pct: dict[str, float]
    causes_at: str | None = None


def regression_limits(values: list[str], pack: RulePack) -> Limits:
    """``--fail-on-regression`` values: ``PCT`` (the step time) or ``BUCKET=PCT`` (a bucket's time per step),
    percent of A that B may grow by, or ``causes``: a cause that appeared in B (each side diagnosed, causes
    matched by check and ranks) at the severity of compare-causes' ``fail_severity`` or above. Checked before any
    file is read, so a typo fails at once instead of after the comparison (or, worse, never fails the build)."""
    known = {b for order in pack.buckets.values() for b in order} | {rule.bucket for rule in pack.rules}
    step: float | None = None
    buckets: dict[str, float] = {}
    causes_at = pack.check(CAUSES_CHECK)["fail_severity"] if CAUSES in (v.strip() for v in values) else None
    for value in (v for v in values if v.strip() != CAUSES):
        name, _, num = value.rpartition("=")
        name = name.strip()
        try:
            limit = float(num.strip().removesuffix("%"))
        except ValueError:
            limit = float("nan")
        if not limit >= 0 or limit == float("inf"):
            raise ProfanInputError(
                None, f"--fail-on-regression takes PCT, BUCKET=PCT or {CAUSES}, PCT a number ≥ 0 (got {value!r})"
            )
        if "=" not in value:
            if step is not None:
                raise ProfanInputError(None, f"--fail-on-regression: the step-time limit is given twice ({value!r})")
            step = limit
        elif name not in known:
            raise ProfanInputError(
                None, f"--fail-on-regression: unknown bucket {name!r}; buckets: {', '.join(sorted(known))}"
            )
        else:
            buckets[name] = limit
    return Limits(step, buckets, causes_at)


def regressions(report: Report, limits: Limits) -> list[str]:
    """What regressed past its limit, one phrase each, read from the comparison's own figures: the step time of
    the total finding (step_trace_time.csv where both sides have it, else the summed kernel time per step and
    rank), the bucket table's time per step, and the verdict's causes that appeared in B. B growing from nothing
    exceeds any limit."""
    step_pct, bucket_pct = limits.step_pct, limits.bucket_pct
    out = []
    if limits.causes_at is not None:
        out += appeared_at(report.tables.get("compare_causes", pl.DataFrame()), limits.causes_at)
    if step_pct is not None:
        total = next(
            (finding for finding in report.findings if finding.check == CHECK and "a_kernel_us" in finding.metrics),
            None,
        )
        if total is not None:
            m = total.metrics
            kind = (
                "step time (step_trace_time.csv)"
                if "a_step_us" in m
                else "step time (summed kernel time per step and rank; no step_trace_time.csv rows on both sides)"
            )
            a, b = (m["a_step_us"], m["b_step_us"]) if "a_step_us" in m else (m["a_kernel_us"], m["b_kernel_us"])
            out += _past(kind, a, b, step_pct)
    t = report.tables.get("compare_buckets", pl.DataFrame())
    for bucket, limit in bucket_pct.items():
        row = t.filter(pl.col("bucket") == bucket) if "bucket" in t.columns else t.head(0)
        a, b = (float(row["a_time_us"][0]), float(row["b_time_us"][0])) if row.height else (0.0, 0.0)
        out += _past(f"{bucket} per step", a, b, limit)
    return out


def _past(what: str, a: float, b: float, limit: float) -> list[str]:
    if b <= a or (a > 0 and 100 * (b - a) / a <= limit):
        return []
    grew = f"+{_pct(100 * (b - a) / a)}%" if a > 0 else "new in B"
    return [f"{what} {ms(a)} → {ms(b)} ({grew}, more than the {limit:g}% allowed)"]


def _pct(x: float) -> str:
    """A percentage for the CI line: one decimal, but a growth under 0.1 % keeps two significant digits (a
    0.027 % regression past a 0.02 % limit must not read +0.0 %)."""
    return f"{x:.1f}" if abs(x) >= 0.1 else f"{x:.2g}"
