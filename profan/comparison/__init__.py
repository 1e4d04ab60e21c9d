"""Comparing two ranks of one job, or two runs of the same job (``profan compare``).

`compare` assembles the report; `sides` reads each side and pairs their steps; `tables` sets B beside A per
bucket and kernel; `coverage` says what has no counterpart and is left out; `findings` words the changes with rows
cited on both sides; `regression_limits` is ``--fail-on-regression``.
"""
