"""The rules index: the rule pack (bucket rules and checks) as data, or one entry of it.

Shared by the CLI (``rules --format json``) and the MCP server; held to a byte cap by the ladder of forms of
`profan.render.byte_cap`, where the listing becomes an index of ids and names before entries go.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError
from profan.model.report import clean
from profan.render.byte_cap import Size, below_floor, clip, fit, json_bytes

RULES_SCHEMA = "profan.rules/1"


def rules_doc(
    extra: list[Path] | None = None,
    ident: str | None = None,
    *,
    max_bytes: int | None = None,
    size: Size = json_bytes,
) -> dict[str, Any]:
    """The rule pack as data (``ident`` None) or one rule/check, held to ``max_bytes`` by `_rule_forms`; an
    unknown id is a one-line input error."""
    from profan.rulepack.pack import BucketRule, load

    pack = load(extra or [])
    if ident:
        item = pack.find(ident)
        if item is None:
            raise ProfanInputError(None, f"no rule or check {ident!r}; run 'profan rules' for the list")
        entry = _rule_entry(item) if isinstance(item, BucketRule) else _check_entry(item)
        doc = clean({"schema": RULES_SCHEMA, "item": entry})
    else:
        doc = clean(
            {
                "schema": RULES_SCHEMA,
                "files": pack.files,
                "rules": [_rule_entry(rule) for rule in pack.rules],
                "checks": [_check_entry(check) for check in pack.checks.values()],
            }
        )
    doc, fits = fit(_rule_forms(doc), max_bytes, size)
    return doc if fits else below_floor(doc, "rules document", max_bytes, size)


def _rule_entry(r: Any) -> dict[str, Any]:
    return {
        "kind": "bucket-rule",
        "id": r.id,
        "name": r.name,
        "bucket": r.bucket,
        "match": r.match,
        "why": r.why,
        "example": r.example,
        "applies_to": r.applies_to,
        "source": r.source,
    }


def _check_entry(c: Any) -> dict[str, Any]:
    # a check that can be a cause says what to change, how to verify it and what else could explain the data
    # (templates: a report fills in the cause's numbers)
    cause = c.params.get("cause") if isinstance(c.params.get("cause"), dict) else {}
    return {
        "kind": "check",
        "id": c.id,
        "name": c.name,
        "detects": c.detects,
        "why": c.why,
        "params": c.params,
        "source": c.source,
        **{k: cause[k] for k in ("action", "verify", "alternatives") if k in cause},
    }


RULE_DETAILS = ("params", "match", "example")  # what `rules ID` shows of one entry
RULE_TEXTS = ("why", "action", "verify", "alternatives", "applies_to", "source")


def _rule_forms(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The forms of a rules document, richest first, each holding less than the one before (``doc`` shrunk in
    place). The listing becomes an index: the entries' thresholds, patterns and examples go, then their texts,
    then what each check detects; then entries from the end, bucket rules before checks (counted in
    ``rules_total`` / ``checks_total``). One entry: its texts are shortened, then its example goes."""
    yield doc
    if "item" in doc:
        item = doc["item"]
        for n in (320, 120):
            for key in ("why", "detects", "action", "verify"):
                if key in item:
                    item[key] = clip(item[key], n)
            if "alternatives" in item:
                item["alternatives"] = [clip(a, n) for a in item["alternatives"]]
            yield doc
        item.pop("example", None)
        yield doc
        return
    entries = [*doc["checks"], *doc["rules"]]
    for keys in (RULE_DETAILS, RULE_TEXTS, ("detects",)):
        for entry in entries:
            for key in keys:
                entry.pop(key, None)
        yield doc
    for key, keep in (("rules", 0), ("checks", 1)):
        total = len(doc[key])
        while len(doc[key]) > keep:
            doc[key].pop()
            doc[f"{key}_total"] = total
            yield doc
