"""What the byte-capped JSON documents share: their compact JSON, how a size is measured, and the ladder of forms.

The brief (`profan.render.brief`), the evidence document (`profan.render.evidence_doc`) and the rules index
(`profan.render.rules_index`) can each be held to a byte cap. A capped document is the first of a ladder of forms,
richest first, each holding less than the one before, that fits: so a larger cap never shows less, and a smaller
one loses detail step by step (the least important findings, rows, locators, the later causes' texts) instead of
all at once. The size is measured by the caller's ``size`` function: compact JSON for the CLI, the bytes of the
whole response on the wire for the MCP server. Below the smallest form, that form is returned with a ``note``
saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

LOCATORS_PER_ITEM = 3  # the largest rows of each evidence item; `profan evidence` gives all cited rows
IDS_LISTED = 16  # ranks / steps listed per item; `ranks_total` / `steps_total` say how many there are

Size = Callable[[dict[str, Any]], int]


def dumps(doc: Any) -> str:
    """Compact JSON, the form the CLI prints and measures its budget in."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def json_bytes(doc: Any) -> int:
    return len(dumps(doc).encode())


def fit(forms: Iterable[dict[str, Any]], max_bytes: int | None, size: Size = json_bytes) -> tuple[dict[str, Any], bool]:
    """The first of ``forms`` (richest first, each holding less than the one before) within ``max_bytes``, so a
    larger cap never shows less than a smaller one; if none fits, the last — the smallest form — and False.

    A form may be the same dict shrunk in place between yields: the first that fits is returned and the rest of
    the ladder is never built."""
    doc: dict[str, Any] = {}
    for doc in forms:
        if max_bytes is None or size(doc) <= max_bytes:
            return doc, True
    return doc, False


def below_floor(doc: dict[str, Any], what: str, max_bytes: int | None, size: Size) -> dict[str, Any]:
    """The smallest form, saying that it is over the cap and by how much (its size counted with the note)."""
    n = size(doc)
    for _ in range(3):  # the note's own digits can change the size it states
        doc["note"] = f"max_bytes {max_bytes} is below the smallest {what} ({n} bytes); this is that form"
        n, stated = size(doc), n
        if n == stated:
            break
    return doc


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def list_ids(stub: dict[str, Any], key: str, values: tuple[int, ...] | list[Any], listed: int = IDS_LISTED) -> None:
    """``values`` under ``key``: all of them, or the first ``listed`` and their count (a job of 1,270 steps)."""
    stub[key] = list(values[:listed])
    if len(values) > listed:
        stub[f"{key}_total"] = len(values)


@dataclass(frozen=True)
class ByteCap:
    """A document's byte cap and how its size is measured: compact JSON for the CLI, the bytes of the whole
    response on the wire for the MCP server."""

    max_bytes: int | None
    size: Size = json_bytes
