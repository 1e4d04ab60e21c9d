"""Roles: the kernel, op, category and file names analyses rely on, as data in ``rules/roles.toml``.

The bucket rules say what a kernel *is*; roles say which names play a part in an analysis (a communication core,
the expert GEMM, the Kineto category of device activity, the bytes of a dtype, a rank id in a file name…). No such
name is written in Python: readers take them from the rule pack (``pack.roles``), which is picklable and goes to
the worker processes with the pack; code without a pack (discovery) takes the built-in ones (`defaults`).
A user rules file may replace any role's value under ``[roles.<name>]``; a wrong name or type is one line naming
the file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError

NELEMS = ("in", "out", "max")  # which message size a collective moves (`CollectiveKind.nelems`)
BUS_FACTORS = ("2(n-1)/n", "(n-1)/n", "1")  # the forms of nccl-tests' bus-bandwidth factor


@dataclass(frozen=True)
class CollectiveKind:
    kind: str  # the name analyses use (allreduce, allgather, …)
    match: str  # regex on the lower-cased letters of the collective's name; first match wins
    nelems: str  # one of NELEMS
    bus_factor: str  # one of BUS_FACTORS


@dataclass(frozen=True)
class Roles:
    comm_cores: tuple[str, ...]
    comm_ops: str
    p2p_ops: str
    hccl_group_tag: str
    hccl_op_sequence: str
    expert_gemm: str
    ai_cpu_core: str
    ascend_name_ops: tuple[str, ...]
    hccl_matrix_op_types: str
    ascend_comm_processes: tuple[str, ...]
    ascend_node_links: tuple[str, ...]
    ascend_network_link: str
    ascend_copy_engine: str
    ascend_not_links: tuple[str, ...]
    replica_groups: tuple[str, ...]
    pipeline_group: str
    expert_group: str
    kineto_device_cats: tuple[str, ...]
    kineto_cpu_op_cat: str
    kineto_annotation_cat: str
    kineto_gpu_annotation_cat: str
    kineto_runtime_cats: tuple[str, ...]
    kineto_step: str
    kineto_comm_kernels: str
    kineto_comm_ops: str
    kineto_label_strip: tuple[str, ...]
    kineto_peer_wait_ops: str
    collectives: tuple[CollectiveKind, ...]
    dtype_bytes: dict[str, int]
    rank_in_folder_name: str
    rank_in_trace_name: str
    kineto_category_aliases: dict[str, str]
    kineto_graph_launch: str
    kineto_graph_capture: tuple[str, ...]
    kineto_graph_node_calls: str
    kineto_module_frame: str
    kineto_data_loading: str
    kineto_python_cat: str
    kineto_host_cats: tuple[str, ...]
    graph_capture_folder: str
    layer_anchor_buckets: tuple[str, ...]
    why: dict[str, str]  # role -> its reason, as the file gives it
    source: str  # the file(s) the values came from

    # ------------------------------------------------------------------------------------------- derived views

    @property
    def kineto_keep_cats(self) -> tuple[str, ...]:
        """Every Kineto category some reader uses: the events a trace parse keeps (other writers' names for the
        same categories too: `kineto_category_aliases`)."""
        cats = (
            self.kineto_cpu_op_cat,
            self.kineto_annotation_cat,
            self.kineto_gpu_annotation_cat,
            *self.kineto_runtime_cats,
            *self.kineto_device_cats,
            *self.kineto_category_aliases,
        )
        return tuple(dict.fromkeys(cats))

    @property
    def kineto_device_cats_all(self) -> tuple[str, ...]:
        """Device activity under every name a writer gives it (`kineto_category_aliases` read as a device one)."""
        device = set(self.kineto_device_cats)
        old = [key for key, value in self.kineto_category_aliases.items() if value in device]
        return tuple(dict.fromkeys((*self.kineto_device_cats, *old)))

    @property
    def kineto_detail_cats(self) -> tuple[str, ...]:
        """Categories whose full args a trace parse reads: device activity (under any of its names) and the
        GPU-side annotations."""
        return (*self.kineto_device_cats_all, self.kineto_gpu_annotation_cat)

    @property
    def kineto_op_cats(self) -> tuple[str, ...]:
        """Categories of CPU-side ops that launch kernels (cpu ops first: they win over annotations)."""
        return (self.kineto_cpu_op_cat, self.kineto_annotation_cat)

    @property
    def kineto_step_cats(self) -> tuple[str, ...]:
        return (self.kineto_annotation_cat, self.kineto_gpu_annotation_cat)

    def is_comm(self):  # -> pl.Expr
        """A kernel row (columns ``core`` and ``op``) of a communication op, not compute (Ascend)."""
        import polars as pl

        return pl.col("core").is_in(list(self.comm_cores)) | pl.col("op").fill_null("").str.contains(self.comm_ops)

    def comm_variant(self) -> str:
        """The roles `is_comm` reads, as text: what a cached result that depends on them is keyed by."""
        return f"{','.join(self.comm_cores)}|{self.comm_ops}"

    def override(self, table: Any, source: str | Path) -> Roles:
        """These roles with a rules file's ``[roles]`` on top (each ``[roles.<name>]`` replaces that value)."""
        values = _read(table, source, partial=True)
        why = {**self.why, **{key: value for key, value in values.pop("why").items() if value}}
        return replace(self, **values, why=why, source=f"{self.source}, {source}")


_KIND = {  # role -> what its value must be
    "comm_cores": "names",
    "comm_ops": "regex",
    "p2p_ops": "regex",
    "hccl_group_tag": "regex",
    "hccl_op_sequence": "regex",
    "expert_gemm": "regex",
    "ai_cpu_core": "name",
    "ascend_name_ops": "regexes",
    "hccl_matrix_op_types": "pyregex",
    "ascend_comm_processes": "names",
    "ascend_node_links": "names",
    "ascend_network_link": "name",
    "ascend_copy_engine": "name",
    "ascend_not_links": "names",
    "replica_groups": "names",
    "pipeline_group": "name",
    "expert_group": "name",
    "kineto_device_cats": "names",
    "kineto_cpu_op_cat": "name",
    "kineto_annotation_cat": "name",
    "kineto_gpu_annotation_cat": "name",
    "kineto_runtime_cats": "names",
    "kineto_step": "regex",
    "kineto_comm_kernels": "regex",
    "kineto_comm_ops": "regex",
    "kineto_peer_wait_ops": "regex",
    "kineto_label_strip": "regexes",
    "collectives": "collectives",
    "dtype_bytes": "dtype_bytes",
    "rank_in_folder_name": "pyregex",
    "rank_in_trace_name": "pyregex",
    "kineto_category_aliases": "aliases",
    "kineto_graph_launch": "regex",
    "kineto_graph_capture": "regexes",
    "kineto_graph_node_calls": "regex",
    "kineto_module_frame": "regex",
    "kineto_data_loading": "regex",
    "kineto_python_cat": "name",
    "kineto_host_cats": "names",
    "layer_anchor_buckets": "names",
    "graph_capture_folder": "name",
}
# Roles read where no rule pack is at hand (discovery; analyses not yet handed the pack): a user file cannot set
# them, rather than set them for some readers only.
BUILTIN_ONLY = frozenset(
    {
        "rank_in_folder_name",
        "rank_in_trace_name",
        "expert_gemm",
        "expert_group",
        "replica_groups",
        "pipeline_group",
        "graph_capture_folder",
        "layer_anchor_buckets",
        "ascend_name_ops",
        "hccl_matrix_op_types",
        "ascend_comm_processes",
        "ascend_node_links",
        "ascend_network_link",
        "ascend_copy_engine",
        "ascend_not_links",
    }
)
_GROUPED = {
    "hccl_group_tag",
    "hccl_op_sequence",
    "kineto_step",
    "rank_in_folder_name",
    "rank_in_trace_name",
    "kineto_module_frame",
    "ascend_name_ops",
}
_PAIRS = {"kineto_graph_capture"}  # [opening, closing] patterns: exactly two
_WANT = {
    "names": "a list of non-empty texts",
    "name": "a non-empty text",
    "regex": "a regular expression",
    "regexes": "a list of regular expressions",
    "pyregex": "a regular expression",
    "dtype_bytes": "a table of dtype name = bytes (a whole number above 0)",
    "aliases": "a list of 'their category=today's category' texts",
    "collectives": "a list of {kind, match, nelems, bus_factor} tables",
}


def _text(v: object) -> bool:
    return isinstance(v, str) and bool(v)


class _BadValue(Exception):
    """A role's value does not fit its kind: `_value` turns it into the one-line error naming the file."""


def _value(name: str, v: object, source: str | Path) -> object:
    """A role's value checked against its kind (and converted: lists to tuples); else one line naming the file."""
    kind = _KIND[name]
    try:
        return _CONVERT[kind](name, v, source)
    except _BadValue:
        raise ProfanInputError(source, f"[roles.{name}] value must be {_WANT[kind]}, not {str(v)[:60]!r}") from None


def _require(ok: bool) -> None:
    if not ok:
        raise _BadValue


def _as_name(name: str, value: Any, source: str | Path) -> object:
    _require(_text(value))
    return value


def _as_names(name: str, value: Any, source: str | Path) -> object:
    _require(isinstance(value, list) and bool(value) and all(_text(item) for item in value))
    return tuple(value)


def _as_regexes(name: str, value: Any, source: str | Path) -> object:
    _require(isinstance(value, list) and all(_text(item) for item in value))
    _require(name not in _PAIRS or len(value) == 2)
    for pattern in value:
        _check_regex(name, pattern, "regex", source)
    return tuple(value)


def _as_regex(kind: str) -> Callable[[str, Any, str | Path], object]:
    def convert(name: str, value: Any, source: str | Path) -> object:
        _require(_text(value))
        _check_regex(name, str(value), kind, source)
        return value

    return convert


def _as_aliases(name: str, value: Any, source: str | Path) -> object:
    texts = isinstance(value, list) and all(isinstance(item, str) for item in value)
    pairs = [item.split("=") for item in value] if texts else []
    _require(bool(pairs) and all(len(pair) == 2 and all(side.strip() for side in pair) for pair in pairs))
    return {old.strip(): new.strip() for old, new in pairs}


def _as_dtype_bytes(name: str, value: Any, source: str | Path) -> object:
    _require(isinstance(value, dict) and bool(value))
    _require(all(isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in value.values()))
    return dict(value)


def _as_collectives(name: str, value: Any, source: str | Path) -> object:
    keys = {f.name for f in fields(CollectiveKind)}
    _require(isinstance(value, list) and bool(value))
    _require(
        all(
            isinstance(entry, dict) and set(entry) == keys and all(_text(entry[key]) for key in keys) for entry in value
        )
    )
    out = []
    for entry in value:
        if entry["nelems"] not in NELEMS or entry["bus_factor"] not in BUS_FACTORS:
            raise ProfanInputError(
                source,
                f"[roles.{name}] {entry['kind']}: nelems must be one of {', '.join(NELEMS)} "
                f"and bus_factor one of {', '.join(BUS_FACTORS)}",
            )
        _check_regex(name, entry["match"], "regex", source)
        out.append(CollectiveKind(**{key: entry[key] for key in keys}))
    return tuple(out)


_CONVERT: dict[str, Callable[[str, Any, str | Path], object]] = {
    "name": _as_name,
    "names": _as_names,
    "regexes": _as_regexes,
    "regex": _as_regex("regex"),
    "pyregex": _as_regex("pyregex"),
    "aliases": _as_aliases,
    "dtype_bytes": _as_dtype_bytes,
    "collectives": _as_collectives,
}


def _check_regex(name: str, pattern: str, kind: str, source: str | Path) -> None:
    try:
        groups = re.compile(pattern).groups  # the group count; Python's parser takes the syntax used here
    except re.error as exc:
        if kind == "pyregex":
            raise ProfanInputError(source, f"[roles.{name}]: invalid regular expression {pattern!r}: {exc}") from None
        groups = None
    if kind == "regex":  # matched by polars (Rust regex): its parser decides
        import polars as pl

        try:
            pl.Series([""]).str.contains(pattern)
        except Exception as exc:  # polars raises ComputeError with the regex parser's message
            raise ProfanInputError(
                source, f"[roles.{name}]: invalid regular expression {pattern!r}: {str(exc).splitlines()[0]}"
            ) from None
    if name in _GROUPED and groups == 0:
        raise ProfanInputError(
            source, f"[roles.{name}]: the regular expression {pattern!r} needs a group (…) holding the part it extracts"
        )


def _read(doc: Any, source: str | Path, *, partial: bool) -> dict[str, Any]:
    """The ``[roles]`` table's values by role, and ``why``; every name known, every value of its kind."""
    if not isinstance(doc, dict):
        raise ProfanInputError(source, "[roles] must be a table of [roles.<name>] tables")
    unknown = sorted(set(doc) - set(_KIND))
    if unknown:
        raise ProfanInputError(source, f"[roles] has no role {unknown[0]!r}; known: {', '.join(sorted(_KIND))}")
    fixed = sorted(set(doc) & BUILTIN_ONLY) if partial else []
    if fixed:
        settable = ", ".join(sorted(set(_KIND) - BUILTIN_ONLY))
        raise ProfanInputError(
            source,
            f"[roles.{fixed[0]}] cannot be set in a rules file (it is read where no "
            f"rule pack is at hand); settable: {settable}",
        )
    missing = sorted(set(_KIND) - set(doc))
    if missing and not partial:
        raise ProfanInputError(source, f"[roles] lacks {', '.join(missing)}")
    values: dict[str, Any] = {}
    why: dict[str, str] = {}
    for name, entry in doc.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise ProfanInputError(source, f"[roles.{name}] must be a table with a value (and a why)")
        extra = sorted(set(entry) - {"value", "why"})
        if extra:
            raise ProfanInputError(source, f"[roles.{name}] has no setting {extra[0]!r} (only value and why)")
        if not isinstance(entry.get("why", ""), str) or (not partial and not _text(entry.get("why"))):
            raise ProfanInputError(source, f'[roles.{name}] needs its reason as text: why = "…"')
        values[name] = _value(name, entry["value"], source)
        why[name] = entry.get("why", "")
    values["why"] = why
    return values


def load(path: Path) -> Roles:
    """The roles of one complete roles file (``rules/roles.toml``)."""
    from profan.rulepack.toml_file import load_toml

    doc = load_toml(path, "roles file")
    extra = sorted(set(doc) - {"roles"})
    if extra:
        raise ProfanInputError(path, f"unknown table {extra[0]!r}: a roles file holds only [roles.<name>] tables")
    return Roles(**_read(doc.get("roles"), path, partial=False), source=f"rules/{path.name}")


@functools.lru_cache(maxsize=1)
def defaults() -> Roles:
    """The built-in roles (``rules/roles.toml``), read once per process."""
    from profan.rulepack.paths import rules_dir

    return load(rules_dir() / "roles.toml")
