"""`python -m profan` runs the CLI."""

from profan.app.cli import main

main()
