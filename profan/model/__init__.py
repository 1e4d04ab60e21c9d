"""The values the stages pass on: Evidence (and reading cited rows back), Finding, Report, and the errors that reach
the user as one line."""
