"""The rule pack: bucket rules and diagnostic checks loaded from TOML (``rules/`` plus user files).

The engine knows nothing about kernels; everything it needs to decide a bucket or a threshold is here as data.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from profan.model.errors import ProfanInputError
from profan.model.findings import SEVERITIES, Severity
from profan.rulepack.classify import MATCH_FIELDS  # the fields a rule may match: the engine's
from profan.rulepack.limits import Limits, defaults
from profan.rulepack.paths import rules_dir
from profan.rulepack.roles import Roles
from profan.rulepack.roles import defaults as default_roles
from profan.rulepack.severity import SeverityRules
from profan.rulepack.severity import defaults as default_severity
from profan.rulepack.toml_file import load_toml

# the texts of a [check.cause] a case may have its own of, ``<case>_<text>`` (`profan.diagnosis.claims.make_cause`)
CASE_TEXTS = ("_title", "_assumption", "_action", "_verify")
# a check's tables of texts that a report fills with the cause's (or the comparison's) numbers
TEMPLATE_TABLES = ("cause", "compare")
# check settings that hold regular expressions: a name ending so, or a table of them by that name
PATTERN_SETTINGS = ("_kernel", "phases")


@dataclass(frozen=True)
class BucketRule:
    id: str
    name: str
    bucket: str
    match: dict[str, str]
    why: str
    example: str
    applies_to: str  # "ascend" | "gpu" | "cpu" | "any"
    source: str  # file the rule came from
    # what the kernel does inside its bucket, where a rule can tell (rules/buckets [pack] parts): an MoE layer's
    # dispatch, combine, routing, experts; "" for most rules. The breakdown's bucket totals never depend on it.
    part: str = ""


@dataclass(frozen=True)
class Check:
    """A diagnostic check of ``rules/checks.toml``: its thresholds (``params``) and the severities of its findings.

    Severities are settings like the thresholds, validated when the pack is loaded: ``severity`` is what the
    check's findings are where no threshold grades them, ``<case>_severity`` what one case of them is (a table of
    severities: one per value, e.g. per pipe). Thresholds named ``warning_<x>`` / ``critical_<x>`` grade a finding
    by their own name (`analyses.common.graded`); a check graded only by them has no ``severity``."""

    id: str
    name: str
    detects: str
    why: str
    params: dict[str, Any]  # every setting of the check, severities included (as `profan rules` lists them)
    source: str

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    @property
    def severity(self) -> Severity:
        if "severity" not in self.params:
            raise KeyError(f"check {self.id} has no fixed severity: its warning_/critical_ thresholds grade it")
        return self.params["severity"]

    def severity_for(self, case: str) -> Severity:
        """The severity of one case of this check's findings (setting ``<case>_severity``)."""
        return self.params[f"{case}_severity"]

    @property
    def cause(self) -> dict[str, Any]:
        """The check's [check.cause] table: the texts of the causes made from its findings (`profan.diagnosis`)."""
        if "cause" not in self.params:
            raise KeyError(f"check {self.id} has no [check.cause] table in rules/checks.toml")
        return self.params["cause"]

    @property
    def supersedes(self) -> tuple[str, ...]:
        """Checks whose finding for a rank and step this check's finding for the same rank and step replaces: it
        says all they say, and more (`analyses.contract.drop_superseded`)."""
        return tuple(self.params.get("supersedes", ()))


@dataclass
class RulePack:
    rules: list[BucketRule] = field(default_factory=list)
    checks: dict[str, Check] = field(default_factory=dict)
    buckets: dict[str, list[str]] = field(default_factory=dict)  # applies_to -> bucket order
    parts: dict[str, str] = field(default_factory=dict)  # part -> what it is, from the [pack] parts tables
    files: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=defaults)  # rules/limits.toml, a user file's [limits] on top
    roles: Roles = field(default_factory=default_roles)  # rules/roles.toml, a user file's [roles] on top
    severity: SeverityRules = field(default_factory=default_severity)  # rules/severity.toml, a [severity] on top
    # the serving iteration view (rules/serving.toml): a user file's ``[serving] iterations = false`` (or ``analyze
    # --no-iterations``) reads a capture as it was read before iterations existed, one span of whole-trace time
    iterations: bool = True

    def rules_for(self, applies_to: str) -> list[BucketRule]:
        return [rule for rule in self.rules if rule.applies_to in (applies_to, "any")]

    def check(self, check_id: str) -> Check:
        """The check of that id; an id the pack does not have is a bug in the caller, raised at once."""
        try:
            return self.checks[check_id]
        except KeyError:
            raise KeyError(f"no check {check_id!r} in the rule pack (rules/checks.toml)") from None

    def rule_parts(self) -> dict[str, str]:
        """rule id -> the part its kernels are (only the rules that name one)."""
        return {rule.id: rule.part for rule in self.rules if rule.part}

    def find(self, ident: str) -> BucketRule | Check | None:
        if ident in self.checks:
            return self.checks[ident]
        return next((rule for rule in self.rules if rule.id == ident), None)


def _validate_regex(path: Path | str, what: str, pattern: str) -> None:
    """``what`` (``rule ID``, ``check ID: setting``) holds a regular expression polars can compile."""
    try:
        pl.Series([""]).str.contains(pattern)
    except Exception as exc:  # polars raises ComputeError with the regex parser's message
        raise ProfanInputError(
            path, f"{what}: invalid regular expression {pattern!r}: {str(exc).splitlines()[0]}"
        ) from None


def _read_rules(path: Path, doc: dict[str, Any], seen: set[str]) -> tuple[list[BucketRule], str, list[str]]:
    pack = doc.get("pack", {})
    if not isinstance(pack, dict):
        raise ProfanInputError(path, "[pack] must be a table")
    applies = str(pack.get("applies_to", "any"))
    parts = pack.get("parts", {})
    rules = []
    for index, r in enumerate(_tables(path, doc, "rule"), start=1):
        rid = r.get("id")
        if (
            not isinstance(rid, str)
            or not rid
            or not isinstance(r.get("bucket"), str)
            or not r["bucket"]
            or not isinstance(r.get("match"), dict)
            or not r["match"]
        ):
            raise ProfanInputError(path, f"rule #{index} needs a text id, a text bucket and a non-empty match table")
        if rid in seen:
            raise ProfanInputError(path, f"rule id {rid} is defined twice")
        bad = [key for key in r["match"] if key not in MATCH_FIELDS]
        if bad:
            raise ProfanInputError(
                path, f"rule {rid}: unknown match field(s) {', '.join(bad)} (use {', '.join(MATCH_FIELDS)})"
            )
        for pattern in r["match"].values():
            _validate_regex(path, f"rule {rid}", str(pattern))
        part = r.get("part", "")
        if part and (not isinstance(part, str) or (parts and part not in parts) or not part.isidentifier()):
            known = f"one of [pack] parts ({', '.join(parts)})" if parts else "a lowercase word"
            raise ProfanInputError(path, f"rule {rid}: part {part!r} is not {known}")
        seen.add(rid)
        rules.append(
            BucketRule(
                id=rid,
                name=r.get("name", rid),
                bucket=r["bucket"],
                match={key: str(value) for key, value in r["match"].items()},
                why=r.get("why", ""),
                example=r.get("example", ""),
                applies_to=str(r.get("applies_to", applies)),
                source=path.name,
                part=str(part),
            )
        )
    return rules, applies, list(pack.get("buckets", []))


def _tables(path: Path, doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The ``[[key]]`` entries of a rules file; anything else there is one line naming the file."""
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ProfanInputError(path, f"'{key}' must be a list of tables ([[{key}]] entries)")
    return items


def load(extra: list[Path] | None = None) -> RulePack:
    """Built-in pack plus user rule files; user bucket rules take precedence (are tried first)."""
    base = rules_dir()
    pack = RulePack()
    seen: set[str] = set()
    user_rules: list[BucketRule] = []
    for path in [*(Path(p) for p in (extra or []))]:
        doc = load_toml(path)
        rules, _, _ = _read_rules(path, doc, seen)
        user_rules.extend(rules)
        for c in _tables(path, doc, "check"):
            _add_check(pack, path, c, override=True)
        if "limits" in doc:
            if not isinstance(doc["limits"], dict):
                raise ProfanInputError(path, "[limits] must be a table of name = number")
            pack.limits = pack.limits.override(doc["limits"], path)
        if "roles" in doc:
            pack.roles = pack.roles.override(doc["roles"], path)
        if "severity" in doc:
            if not isinstance(doc["severity"], dict):
                raise ProfanInputError(path, "[severity] must be a table")
            pack.severity = pack.severity.override(doc["severity"], path)
        if "serving" in doc:
            pack.iterations = _serving_switch(doc["serving"], path)
        pack.files.append(str(path))
    builtin: list[BucketRule] = []
    for path in sorted((base / "buckets").glob("*.toml")):
        doc = load_toml(path)
        rules, applies, buckets = _read_rules(path, doc, seen)
        builtin.extend(rules)
        pack.buckets.setdefault(applies, buckets)
        pack.parts.update(doc.get("pack", {}).get("parts", {}))
        pack.files.append(f"rules/buckets/{path.name}")
    checks_doc = load_toml(base / "checks.toml")
    user_checks = set(pack.checks)
    for c in checks_doc.get("check", []):
        _add_check(pack, base / "checks.toml", c, override=False)
        user_checks.discard(c["id"])
    if user_checks:
        cid = min(user_checks)
        raise ProfanInputError(pack.checks[cid].source, f"no built-in check {cid!r} to set ('profan rules' lists them)")
    _check_supersedes(pack)
    pack.files.append("rules/checks.toml")
    pack.rules = user_rules + builtin
    _check_rule_ids(pack)
    _check_patterns(pack)
    return pack


def _serving_switch(table: Any, path: Path) -> bool:
    """A user file's ``[serving]`` table: ``iterations`` (true / false) alone; anything else is refused."""
    if not isinstance(table, dict) or set(table) - {"iterations"} or not isinstance(table.get("iterations"), bool):
        raise ProfanInputError(path, "[serving] takes one setting, iterations = true | false")
    return table["iterations"]


def _check_overrides(user: Check, builtin: dict[str, Any]) -> None:
    """A user's settings of a built-in check: each must name a setting the check has, with a value of its kind (a
    misspelt name or a threshold of text would otherwise be ignored, or fail deep inside an analysis)."""
    for key, value in user.params.items():
        if key not in builtin:
            raise ProfanInputError(
                user.source, f"check {user.id} has no setting {key!r}; it has {', '.join(sorted(builtin)) or 'none'}"
            )
        want = builtin[key]
        number = (int, float)
        ok = (
            isinstance(value, number) and not isinstance(value, bool)
            if isinstance(want, number) and not isinstance(want, bool)
            else isinstance(value, type(want))
        )
        if not ok:
            raise ProfanInputError(
                user.source,
                f"check {user.id}: {key} must be a {type(want).__name__} like {want!r}, not {str(value)[:40]!r}",
            )
        if key == "cause":
            unknown = sorted(k for k in value if k not in want and not k.endswith(CASE_TEXTS))
            if unknown:
                raise ProfanInputError(
                    user.source, f"check {user.id}: [check.cause] has no {unknown[0]!r}; it has {', '.join(want)}"
                )
        if key in TEMPLATE_TABLES:
            _check_placeholders(user, key, value, want)


def _fields(text: Any, where: str = "") -> set[str]:
    """The names a template (or every template of a list or table of them) fills: ``{name}``, ``{name:,.1f}``,
    ``{name[0]}`` all fill ``name``. ValueError for text that is no template (a lone brace)."""
    if isinstance(text, dict):
        return {name for key, item in text.items() for name in _fields(item, key)}
    if isinstance(text, list):
        return {name for item in text for name in _fields(item, where)}
    if not isinstance(text, str):
        return set()
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{where or 'a text'} is no template ({exc}): {text[:60]!r}") from None
    return {field.split(".")[0].split("[")[0] for _, field, _, _ in parsed if field is not None}


def _allowed(table: str, key: str, builtin: dict[str, Any]) -> set[str]:
    """The names a user's text ``key`` of a check's ``table`` may fill (`_check_placeholders`)."""
    if table == "cause" or key not in builtin:
        return _fields(builtin)
    own = _fields(builtin[key], key)
    if not isinstance(builtin[key], str):
        return own
    kin = [_fields(text, name) for name, text in builtin.items() if isinstance(text, str)]
    return own.union(*(names for names in kin if names & own))


def _check_placeholders(user: Check, table: str, texts: dict[str, Any], builtin: dict[str, Any]) -> None:
    """A user's texts of a check's [check.cause] or [check.compare] fill only names the check's built-in texts of
    the same kind fill: a misspelt name would otherwise end the report in a KeyError, long after the file was
    read. A cause's texts share one set of numbers; a compare text shares its set with the built-in texts that
    fill a name its own built-in text fills (the verdict's sentences all fill {what}; gain and bound {value}), a
    table of phrases with its phrases."""
    for key, text in texts.items():
        try:
            allowed, used = _allowed(table, key, builtin), _fields(text, key)
        except ValueError as exc:
            raise ProfanInputError(user.source, f"check {user.id}: [check.{table}] {exc}") from None
        unknown = sorted(used - allowed)
        if unknown:
            raise ProfanInputError(
                user.source,
                f"check {user.id}: [check.{table}] {key} uses {{{unknown[0]}}}, which this check does not fill; "
                f"it fills {', '.join('{' + name + '}' for name in sorted(allowed)) or 'nothing'}",
            )


@functools.cache
def builtin_check_ids() -> frozenset[str]:
    """The ids of rules/checks.toml: every check there can be (a user file only sets their thresholds)."""
    return frozenset(c["id"] for c in load_toml(rules_dir() / "checks.toml").get("check", []))


def require_known_checks(items: Iterable[Any]) -> None:
    """Raise ValueError naming the first finding or cause (a group's members too) whose check is not in
    rules/checks.toml. The ids are the rule pack's, so the model's types take any text and the places that gather
    findings ask here: the analyses' merge, the finished report, a comparison, a report read back from JSON."""
    known = builtin_check_ids()
    pending = list(items)
    while pending:
        item = pending.pop(0)
        if item.check not in known:
            raise ValueError(f"unknown check {str(item.check)[:60]!r} (not in rules/checks.toml)")
        pending.extend(getattr(item, "members", ()))


def _check_severities(path: Path | str, cid: str, params: dict[str, Any]) -> None:
    """``severity`` and ``<case>_severity`` settings (a severity, or a table of them) name a known severity."""
    for key, value in params.items():
        if key != "severity" and not key.endswith("_severity"):
            continue
        for v in value.values() if isinstance(value, dict) else [value]:
            if v not in SEVERITIES:
                raise ProfanInputError(
                    path, f"check {cid}: {key} must be one of {', '.join(SEVERITIES)}, not {str(v)[:40]!r}"
                )


def _check_supersedes(pack: RulePack) -> None:
    """``supersedes`` lists ids of checks of the pack (a misspelt one would silently keep both findings)."""
    for check in pack.checks.values():
        wrong = [x for x in check.params.get("supersedes", ()) if x not in pack.checks]
        if not isinstance(check.params.get("supersedes", []), list) or wrong:
            raise ProfanInputError(
                check.source,
                f"check {check.id}: supersedes must list check ids, "
                f"not {str(wrong or check.params['supersedes'])[:60]}",
            )


def _check_patterns(pack: RulePack) -> None:
    """A check's `PATTERN_SETTINGS` hold regular expressions (``score_kernel``, ``phases``' values): one a rules
    file got wrong is refused in one line naming it, not met deep inside an analysis."""
    for check in pack.checks.values():
        for key, value in check.params.items():
            if key.endswith(PATTERN_SETTINGS):
                for name, pattern in value.items() if isinstance(value, dict) else [(None, value)]:
                    where = f"{key}.{name}" if name is not None else key
                    _validate_regex(check.source, f"check {check.id}: {where}", str(pattern))


def _check_rule_ids(pack: RulePack) -> None:
    """A check's ``<kind>_rules`` setting lists ids of bucket rules of the pack (``fused_rules``: a misspelt id, or
    one a team's file renamed, would make every fused attention kernel look unfused)."""
    ids = {rule.id for rule in pack.rules}
    for check in pack.checks.values():
        for key, value in check.params.items():
            if not key.endswith("_rules"):
                continue
            wrong = [x for x in value if x not in ids] if isinstance(value, list) else [value]
            if wrong:
                raise ProfanInputError(
                    check.source,
                    f"check {check.id}: {key} must list bucket rule ids, and {str(wrong[0])[:40]!r} is none",
                )


def _add_check(pack: RulePack, path: Path, c: dict[str, Any], *, override: bool) -> None:
    cid = c.get("id")
    if not isinstance(cid, str) or not cid:
        raise ProfanInputError(path, "a [[check]] entry has no text id")
    params = {key: value for key, value in c.items() if key not in ("id", "name", "detects", "why")}
    _check_severities(path, cid, params)
    if cid in pack.checks:
        if override:
            raise ProfanInputError(path, f"check {cid} is defined twice")
        # a user file overrides thresholds of a built-in check; keep the user's params on top (a table entry by
        # entry: setting one transport's or one pipe's value keeps the others)
        existing = pack.checks[cid]
        _check_overrides(existing, params)
        merged = {
            **params,
            **{
                key: {**params[key], **value} if isinstance(value, dict) else value
                for key, value in existing.params.items()
            },
        }
        pack.checks[cid] = Check(
            cid, c.get("name", cid), c.get("detects", ""), c.get("why", ""), merged, existing.source
        )
        return
    pack.checks[cid] = Check(
        cid, c.get("name", cid), c.get("detects", ""), c.get("why", ""), params, str(path) if override else path.name
    )
