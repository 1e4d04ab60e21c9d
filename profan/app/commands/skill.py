"""`profan skill`: where the agent skill shipped with profan is, and copying it into a skills directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from profan.model.errors import ProfanInputError

skill_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="The agent skill (SKILL.md + references) shipped with profan."
)


def skill_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "skill" / "profan"


@skill_app.command("path")
def skill_path() -> None:
    """Print the folder holding the skill (SKILL.md and references/)."""
    typer.echo(str(skill_dir()))


@skill_app.command("install")
def skill_install(
    dest: Annotated[
        Path, typer.Argument(help="A skills directory, e.g. ~/.claude/skills; the skill goes in DEST/profan.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DEST/profan.")] = False,
) -> None:
    """Copy the skill folder into a skills directory (never asks; refuses to overwrite without --force)."""
    import shutil

    target = dest.expanduser() / "profan"
    if dest.exists() and not dest.is_dir():
        raise ProfanInputError(dest, "not a directory")
    if target.is_symlink():  # rmtree refuses one, and copying through it would write where it points
        raise ProfanInputError(target, "is a symbolic link; remove it or name another skills directory")
    if target.exists():
        if not force:
            raise ProfanInputError(target, "already exists; pass --force to replace it")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    shutil.copytree(skill_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    typer.echo(str(target))
