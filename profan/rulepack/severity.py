"""The severity-from-cost rule as data (``rules/severity.toml``): thresholds on a cost's share of the step and its
absolute time, the floor under which a cause is none, which metric says what a finding of a check costs, and per
kind of run (cpu, gpu, npu) the share of the step a healthy run of that kind spends so.

Why data: what is normal differs by kind of run (gloo on the CPU exposes every collective by design), and a team
whose steps are 2 ms must be able to set its own floor (`--rules FILE` with a ``[severity]`` table on top)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError
from profan.rulepack.paths import rules_dir
from profan.rulepack.toml_file import load_toml

LEVELS = ("floor", "warning", "critical")


@dataclass(frozen=True)
class SeverityRules:
    shares: dict[str, float]  # floor / warning / critical: the share of the step a cost must reach
    times_ms: dict[str, float]  # the same, in ms per step
    min_events: int
    cost: dict[str, str | list[str]] = field(default_factory=dict)  # check -> metric (or [a, b]: a - b)
    baseline: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> check -> normal share

    def normal_share(self, kind: str, check: str) -> float:
        """The share of the step a healthy run of ``kind`` spends in what ``check`` measures (0: none normal). A
        narrower kind ("cpu-unstepped") takes its broader one's ("cpu") for a check it does not name."""
        broader = self.baseline.get(kind.split("-")[0], {}).get(check, 0.0)
        return float(self.baseline.get(kind, {}).get(check, broader))

    def override(self, table: dict[str, Any], source: str | Path) -> SeverityRules:
        """These rules with a user file's ``[severity]`` on top (one-line error for a wrong name or value)."""
        merged = _parse({**_as_table(self), **table}, source)
        return replace(
            merged,
            cost={**self.cost, **merged.cost},
            baseline={
                key: {**self.baseline.get(key, {}), **value}
                for key, value in {**self.baseline, **merged.baseline}.items()
            },
        )


def _as_table(rules: SeverityRules) -> dict[str, Any]:
    table: dict[str, Any] = {f"{level}_share": rules.shares[level] for level in LEVELS}
    table.update({f"{level}_ms": rules.times_ms[level] for level in LEVELS})
    return {**table, "min_events": rules.min_events}


def _parse(table: dict[str, Any], source: str | Path) -> SeverityRules:
    numbers = {f"{level}_{unit}" for level in LEVELS for unit in ("share", "ms")}
    known = numbers | {"min_events", "cost", "baseline"}
    for name, value in table.items():
        if name not in known:
            raise ProfanInputError(source, f"[severity] has no setting {name!r}; known: {', '.join(sorted(known))}")
        if name in numbers and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ProfanInputError(source, f"[severity] {name} must be a number from 0 up, not {value!r}")
    missing = sorted(numbers - set(table))
    if missing:
        raise ProfanInputError(source, f"[severity] lacks {', '.join(missing)}")
    baseline = table.get("baseline", {})
    if not isinstance(baseline, dict) or not all(isinstance(v, dict) for v in baseline.values()):
        raise ProfanInputError(source, "[severity.baseline.KIND] tables map a check to a share of the step")
    return SeverityRules(
        shares={level: float(table[f"{level}_share"]) for level in LEVELS},
        times_ms={level: float(table[f"{level}_ms"]) for level in LEVELS},
        min_events=int(table.get("min_events", 1)),
        cost=dict(table.get("cost", {})),
        baseline={k: {key: float(s) for key, s in v.items()} for k, v in baseline.items()},
    )


@functools.lru_cache(maxsize=1)
def defaults() -> SeverityRules:
    path = rules_dir() / "severity.toml"
    return _parse(load_toml(path).get("severity", {}), path)
