"""`profan rules` and `profan schema`: the rule pack, one rule or check explained, and the JSON Schemas."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from profan.app.console import err
from profan.model.errors import EXIT_BAD_INPUT


def rules(
    ident: Annotated[str | None, typer.Argument(help="A rule or check id to explain.")] = None,
    extra: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule file(s) to include.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
) -> None:
    """List the rule pack (bucket rules and checks), or explain one rule."""
    from profan.render.byte_cap import dumps
    from profan.render.rules_index import rules_doc

    if fmt not in ("text", "json"):
        err(f"unknown format {fmt!r}; use text or json")
        raise typer.Exit(EXIT_BAD_INPUT)
    doc = rules_doc(extra or [], ident)
    if fmt == "json":
        typer.echo(dumps(doc))
        return
    if ident:
        item = doc["item"]
        if item["kind"] == "bucket-rule":
            typer.echo(
                f"{item['id']} ({item['name']}) -> bucket '{item['bucket']}'  [{item['source']}, {item['applies_to']}]"
            )
            typer.echo("matches: " + "; ".join(f"{key} ~ /{value}/" for key, value in item["match"].items()))
            typer.echo(f"why: {item['why']}")
            if item["example"]:
                typer.echo(f"example: {item['example']}")
        else:
            _print_check(item)
        return
    typer.echo("Bucket rules (first match wins):")
    for r in doc["rules"]:
        typer.echo(f"  {r['id']:<16} {r['bucket']:<14} {r['name']:<28} {r['applies_to']:<7} {r['source']}")
    typer.echo("\nChecks:")
    for c in doc["checks"]:
        typer.echo(f"  {c['id']:<28} {c['name']}")
    typer.echo("\n'profan rules ID' explains one.")


def _print_check(item: dict) -> None:
    """One check as ruff prints a rule: what it detects and why, its parameters, and, for a check that names a
    cause, what to change, how to verify the change worked and what else could explain the same data. The three
    are templates whose {names} a report fills with the cause's numbers."""
    params = item.get("params") or {}
    cause = params.get("cause") if isinstance(params.get("cause"), dict) else {}
    typer.echo(f"{item['id']} ({item['name']})  [{item['source']}]")
    typer.echo(f"detects: {item['detects']}")
    typer.echo(f"why: {item['why']}")
    shown = {k: value for k, value in params.items() if k != "cause"}
    if shown:
        typer.echo("parameters: " + ", ".join(f"{k}={value}" for k, value in shown.items()))
    for key in ("action", "verify"):
        if text := item.get(key) or cause.get(key):
            typer.echo(f"{key}: {text}")
    if alternatives := item.get("alternatives") or cause.get("alternatives"):
        typer.echo("alternatives:")
        for alt in alternatives:
            typer.echo(f"  - {alt}")


SCHEMAS = ("report", "brief", "evidence")


def schema(
    which: Annotated[str, typer.Argument(help="report | brief | evidence")] = "report",
) -> None:
    """Print the JSON Schema of the JSON report (or of the --brief / evidence documents)."""
    if which not in SCHEMAS:
        err(f"unknown schema {which!r}; use one of {', '.join(SCHEMAS)}")
        raise typer.Exit(EXIT_BAD_INPUT)
    sys.stdout.write(_schema_path(which).read_text(encoding="utf-8"))


def _schema_path(which: str) -> Path:
    return Path(__file__).resolve().parents[2] / "schema" / f"{which}.schema.json"
