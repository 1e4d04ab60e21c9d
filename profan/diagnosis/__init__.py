"""The diagnosis: from the findings of the analyses to the causes that explain them.

`causes` is the last analysis of the pipeline: it reads every finding and turns those of cause checks (a slow
pipeline stage, a straggler, a hot expert, a slow link, idle or exposed communication no other cause accounts for)
into causes, each with the symptoms it explains, a conservative gain per step and what to change (rules/checks.toml,
[check.cause]). `fold` assembles the report's findings around them: one finding per check and cause across ranks
and steps, numbered, each symptom pointing at its cause.
"""
