"""One module per command of the command line; `profan.app.cli` registers them and maps errors to exit codes."""
