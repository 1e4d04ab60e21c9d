"""RL post-training knowledge as data (``rules/rl.toml``): how a trace's name gives its role and rank, which
annotation marks which phase of a step, and which of the framework's timers measures it.

Discovery reads it without a rule pack (as `profan.rulepack.roles.defaults`), so it is loaded once, built in.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from profan.rulepack.pack import load_toml
from profan.rulepack.paths import rules_dir


@dataclass(frozen=True)
class Phase:
    name: str
    annotations: tuple[str, ...]
    timer: str
    source: str
    driver: bool = False  # computed by the driver process, which the framework does not profile
    unannotated: bool = False  # no annotation marks it: the work after the last annotated phase of the step


@dataclass(frozen=True)
class RlRules:
    trace_name: re.Pattern[str]
    e2e_folder: str
    metrics_files: tuple[str, ...]
    timer_prefix: str
    step_timer: str
    roles: dict[str, str]
    phases: tuple[Phase, ...]

    def phase_of(self, annotation: str) -> str | None:
        """The phase an annotation marks, None for any other annotation."""
        return next((p.name for p in self.phases if annotation in p.annotations), None)

    @property
    def annotation_phase(self) -> dict[str, str]:
        return {a: p.name for p in self.phases for a in p.annotations}

    def role(self, name: str) -> str | None:
        return self.roles.get(name)


@functools.lru_cache(maxsize=1)
def rules() -> RlRules:
    path = rules_dir() / "rl.toml"
    doc = load_toml(path)
    layout = doc["layout"]
    return RlRules(
        trace_name=re.compile(layout["trace_name"]),
        e2e_folder=layout["e2e_folder"],
        metrics_files=tuple(layout["metrics_files"]),
        timer_prefix=layout["timer_prefix"],
        step_timer=layout["step_timer"],
        roles=dict(doc["roles"]),
        phases=tuple(
            Phase(
                name=p["name"],
                annotations=tuple(p["annotations"]),
                timer=p["timer"],
                source=p["source"],
                driver=bool(p.get("driver", False)),
                unannotated=bool(p.get("unannotated", False)),
            )
            for p in doc["phase"]
        ),
    )
