"""RL post-training knowledge as data (``rules/rl.toml``): how a trace's name gives its role and rank, which
annotation marks which phase of a step, and which of the framework's timers measures it.

Discovery reads it without a rule pack (as `profan.rulepack.roles.defaults`), so it is loaded once, built in.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

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
class Switch:
    """A colocated job's switch between the training and the inference engine (rules/rl.toml ``[[switch]]``)."""

    name: str
    annotations: tuple[str, ...]
    timer: str
    source: str


@dataclass(frozen=True)
class RlRules:
    trace_name: re.Pattern[str]
    e2e_folder: str
    metrics_files: tuple[str, ...]
    timer_prefix: str
    step_timer: str
    roles: dict[str, str]
    phases: tuple[Phase, ...]
    unknown_role: str = "unknown role"
    lead_in_us: float = 1000.0
    forward_op: str = ""
    forward_input: int = 1  # the forward op's input that holds the batch's token ids: [sequences, tokens]
    forward_read_max_mb: float = 64.0  # a larger trace is not read a second time for its forwards' shapes
    switches: tuple[Switch, ...] = ()
    # a trace whose name tells no role: read from its content (rules/rl.toml [content_roles])
    sniff_max_mb: float = 8.0
    sniff_max_traces: int = 64  # a job of more Kineto traces is not read for roles (only their names tell them)
    phase_roles: tuple[tuple[tuple[str, ...], str], ...] = ()  # (phases all marked, role), first match wins
    process_name: re.Pattern[bytes] | None = None  # Kineto's process_name metadata of a Ray worker: its class
    process_roles: tuple[tuple[re.Pattern[str], str], ...] = ()

    @property
    def annotation_switch(self) -> dict[str, str]:
        return {annotation: switch.name for switch in self.switches for annotation in switch.annotations}

    def phase_of(self, annotation: str) -> str | None:
        """The phase an annotation marks, None for any other annotation."""
        return next((phase.name for phase in self.phases if annotation in phase.annotations), None)

    @property
    def annotation_phase(self) -> dict[str, str]:
        return {annotation: phase.name for phase in self.phases for annotation in phase.annotations}

    def role(self, name: str) -> str | None:
        return self.roles.get(name)

    def trace_role(self, path: Path) -> tuple[str, int, str] | None:
        """(role, rank within the role, where the role was read) of a trace an RL framework's profiler wrote, by
        its name (``[<prefix>_]prof_rank-<N>.json[.gz]``) and folder; None for a name of another form. The prefix
        names the role where it is one, else the folder does (discrete mode's role folders, ``e2e``'s prefix);
        neither: the unknown role, never a dropped trace."""
        match = self.trace_name.match(path.name)
        if match is None:
            return None
        prefix, rank, folder = match.group(1), int(match.group(2)), path.parent.name
        if prefix and self.role(prefix):
            return self.roles[prefix], rank, f"file name {path.name}"
        if folder != self.e2e_folder and self.role(folder):
            return self.roles[folder], rank, f"folder {folder}/"
        return self.unknown_role, rank, f"no role in file name {path.name} nor folder {folder}/"


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
        unknown_role=layout["unknown_role"],
        lead_in_us=float(layout["lead_in_us"]),
        forward_op=layout["forward_op"],
        forward_input=int(layout["forward_input"]),
        forward_read_max_mb=float(layout["forward_read_max_mb"]),
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
        **_content_roles(doc.get("content_roles", {})),
        switches=tuple(
            Switch(name=w["name"], annotations=tuple(w["annotations"]), timer=w["timer"], source=w["source"])
            for w in doc.get("switch", [])
        ),
    )


def _content_roles(doc: dict) -> dict:
    """The [content_roles] table as RlRules' fields."""
    if not doc:
        return {}
    return {
        "sniff_max_mb": float(doc["sniff_max_mb"]),
        "sniff_max_traces": int(doc["sniff_max_traces"]),
        "phase_roles": tuple((tuple(entry["phases"]), entry["role"]) for entry in doc["phase_roles"]),
        "process_name": re.compile(doc["process_name"].encode()),
        "process_roles": tuple((re.compile(entry["pattern"]), entry["role"]) for entry in doc["process_roles"]),
    }
