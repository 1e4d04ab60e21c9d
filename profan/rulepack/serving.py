"""Serving knowledge as data (``rules/serving.toml``): which events mark a model iteration, best first, and which
annotation or attention kernel tells an iteration's phase (prefill, decode, mixed).

The trace reader segments a rank with it before any rule pack is chosen (as `profan.rulepack.rl`), so it is
loaded once, built in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from profan.rulepack.pack import load_toml
from profan.rulepack.paths import rules_dir

PHASES = ("prefill", "decode", "mixed", "unknown")


@dataclass(frozen=True)
class Marker:
    id: str
    kind: str  # annotation | graph_launch | module_forward
    cat: str
    pattern: str
    source: str


@dataclass(frozen=True)
class PhaseRule:
    id: str
    pattern: str
    phase: str
    source: str


@dataclass(frozen=True)
class ServingRules:
    training_op: str
    token_op: str
    token_input: int
    token_read_max_mb: float
    markers: tuple[Marker, ...]
    phase_annotations: tuple[PhaseRule, ...]
    phase_kernels: tuple[PhaseRule, ...]
    layer_min_layers: int  # the layer-pattern fallback (`profan.sources.trace.layer_pattern`): layers per iteration
    layer_min_iterations: int  # and iterations, at least
    layer_id: str
    layer_source: str

    def marker(self, rule_id: str) -> Marker:
        return next(marker for marker in self.markers if marker.id == rule_id)


def _phase_rules(doc: dict, key: str) -> tuple[PhaseRule, ...]:
    rules = tuple(PhaseRule(rule["id"], rule["pattern"], rule["phase"], rule["source"]) for rule in doc.get(key, []))
    bad = [rule.id for rule in rules if rule.phase not in PHASES[:3]]
    if bad:
        raise ValueError(f"rules/serving.toml: [[{key}]] {bad}: phase must be one of {PHASES[:3]}")
    return rules


@functools.lru_cache(maxsize=1)
def rules() -> ServingRules:
    doc = load_toml(rules_dir() / "serving.toml")
    cap = doc["capture"]
    return ServingRules(
        training_op=cap["training_op"],
        token_op=cap["token_op"],
        token_input=int(cap["token_input"]),
        token_read_max_mb=float(cap["token_read_max_mb"]),
        markers=tuple(Marker(m["id"], m["kind"], m["cat"], m["pattern"], m["source"]) for m in doc["marker"]),
        phase_annotations=_phase_rules(doc, "phase_annotation"),
        phase_kernels=_phase_rules(doc, "phase_kernel"),
        layer_min_layers=int(doc["layer_pattern"]["min_layers"]),
        layer_min_iterations=int(doc["layer_pattern"]["min_iterations"]),
        layer_id=doc["layer_pattern"]["id"],
        layer_source=doc["layer_pattern"]["source"],
    )
