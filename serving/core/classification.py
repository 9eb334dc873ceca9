"""Triton's classification extension (PROTOCOL.md §1.5): top-k ``"value:index[:label]"`` strings."""

from __future__ import annotations

import numpy as np

from serving.core.datatypes import NumpyArray
from serving.errors import InvalidArgumentError


def classify(
    array: NumpyArray, k: int, *, batching: bool, labels: list[str] | None, name: str
) -> NumpyArray:
    """Replace an output by its top-``k`` classes per batch item (BYTES tensor)."""
    if array.dtype.kind in ("O", "S", "U"):
        raise InvalidArgumentError(f"class result not available for output '{name}' of type BYTES")
    rows = array.reshape(array.shape[0], -1) if batching and array.ndim else array.reshape(1, -1)
    k = min(k, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            text = f"{_format(row[index])}:{int(index)}"
            if labels is not None and index < len(labels):
                text += f":{labels[index]}"
            result[r, c] = text.encode("utf-8")
    return result if batching else result.reshape(k)


def _format(value: object) -> str:
    if isinstance(value, np.floating):
        return f"{float(value):f}"
    return str(value)
