"""Validation of candidate versions: materialise, check, run ``serving.check`` in a child.

The registry never imports serving: the check runs as ``python -m serving.check`` in a child
process with a wall-clock limit and an address-space limit, and reports each step as one JSON line
on stdout while it runs.
"""
