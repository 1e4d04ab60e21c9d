"""`profan mcp`: profan's tools served over MCP on stdio, reading only inside the folders named."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from profan.model.errors import ProfanInputError


def mcp(
    root: Annotated[
        list[Path] | None,
        typer.Option("--root", help="A folder the tools may read (repeat for more); default: the current folder."),
    ] = None,
) -> None:
    """Serve profan's tools (analyze, compare, evidence, rules) over MCP on stdio; needs 'pip install profan[mcp]'."""
    from profan.app.mcp_server import serve

    for r in root or []:
        if not r.is_dir():
            raise ProfanInputError(r, "--root takes a folder that exists")
    serve(root)
