"""`python -m profan` runs the CLI."""

from profan.cli import main

main()
