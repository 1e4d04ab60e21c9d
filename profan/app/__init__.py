"""The doors people and agents use: the command line, the MCP server, the compact agent JSON (brief), evidence
look-ups (drill) and the guarded writing of ``-o``. They call the pipeline; nothing below imports them."""
