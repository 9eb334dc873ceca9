"""Comparing a golden request's replayed outputs with the recorded ones.

Outputs are ``{name: {"datatype", "shape", "data"}}`` (data flattened or nested, row-major),
compared within ``rtol``/``atol`` (exact for BOOL and BYTES). The validation worker decides with
this, from the raw outputs the check child returns; ``serving.check`` uses it when run by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def compare_outputs(
    actual: dict[str, dict[str, Any]], expected: dict[str, Any], *, rtol: float, atol: float
) -> list[str]:
    """Differences between replayed and expected outputs (empty: they agree)."""
    problems = []
    for name, want in expected.items():
        got = actual.get(name)
        if not isinstance(got, dict) or not isinstance(want, dict):
            problems.append(f"output '{name}' is missing")
            continue
        if got.get("datatype") != want.get("datatype"):
            problems.append(
                f"output '{name}': datatype {got.get('datatype')}, expected {want.get('datatype')}"
            )
            continue
        if _shape(got) != _shape(want):
            problems.append(
                f"output '{name}': shape {got.get('shape')}, expected {want.get('shape')}"
            )
            continue
        problems += _compare_data(name, got, want, rtol=rtol, atol=atol)
    return problems


def _shape(tensor: dict[str, Any]) -> list[int]:
    return [int(d) for d in tensor.get("shape") or []]


def _compare_data(
    name: str, got: dict[str, Any], want: dict[str, Any], *, rtol: float, atol: float
) -> list[str]:
    if got["datatype"] in ("BYTES", "BOOL"):
        same = flatten(got.get("data", [])) == flatten(want.get("data", []))
        return [] if same else [f"output '{name}': values differ"]
    try:
        a = np.asarray(flatten(got.get("data", [])), dtype=np.float64)
        b = np.asarray(flatten(want.get("data", [])), dtype=np.float64)
    except (TypeError, ValueError):
        return [f"output '{name}': values are not numbers"]
    if a.shape != b.shape:
        return [f"output '{name}': {a.size} values, expected {b.size}"]
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return []
    worst = float(np.max(np.abs(a - b))) if a.size else 0.0
    return [f"output '{name}': max abs difference {worst:g} exceeds rtol={rtol:g} atol={atol:g}"]


def flatten(data: Any) -> list[Any]:
    """Nested lists of values as one flat list (a scalar as a list of one)."""
    if not isinstance(data, list):
        return [data]
    flat: list[Any] = []
    for item in data:
        flat.extend(flatten(item))
    return flat
