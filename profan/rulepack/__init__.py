"""The rule pack loaded from ``rules/``: bucket rules and classification, checks, kernel roles, limits, hardware
priors, and where the pack's files live."""
