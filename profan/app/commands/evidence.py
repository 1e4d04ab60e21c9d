"""`profan evidence`: the raw source rows behind one cause or finding, read back from the analysed files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from profan.app.console import bad, mode, safe
from profan.app.options import Debug


def evidence(
    report_or_dir: Annotated[Path, typer.Argument(help="A report.json written by 'analyze', or the data directory.")],
    finding_id: Annotated[str, typer.Argument(help="A cause (C1), finding (F3) or group member (F3.2) id.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
    root: Annotated[Path | None, typer.Option("--root", help="Data directory, if moved since the report.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=0, help="At most this many rows per evidence item; 0: the claim and locators only."
        ),
    ] = None,
    debug: Debug = False,
) -> None:
    """Print the raw source lines behind one cause or finding, read back from the original files."""
    from profan.app.drill import load_report_or_analyze
    from profan.render.byte_cap import dumps
    from profan.render.evidence_doc import evidence_doc

    mode(False, False, debug)
    if fmt not in ("text", "json"):
        bad(f"unknown format {fmt!r}; use text or json")
    report, data_root = load_report_or_analyze(report_or_dir, root)
    doc = evidence_doc(report, data_root, finding_id, where=report_or_dir, limit=limit)
    if fmt == "json":
        typer.echo(dumps(doc))
        return
    typer.echo(safe(f"{doc['id']} [{doc['severity']}] {doc['message']}"))
    for item in doc["evidence"]:
        typer.echo(
            "\n"
            + safe(
                f"{item['file']}  ({item.get('cited', len(item['rows']))} of {item['row_count']} rows cited; select: "
                f"{json.dumps(item['select'], ensure_ascii=False)})"
            )
        )
        for row in item["rows"]:
            typer.echo(safe(f"{row['locator']:>12}: {row['text']}"))
