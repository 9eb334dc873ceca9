"""Data and checks shared by the ported client examples."""

from __future__ import annotations

from typing import Any

import numpy as np

SEQUENCE_VALUES = [11, 7, 5, 3, 2, 0, 1]


def simple_data() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The examples' data for ``simple``: INPUT0 = 0..15, INPUT1 = all ones, shape [1, 16]."""
    input0 = np.expand_dims(np.arange(start=0, stop=16, dtype=np.int32), axis=0)
    input1 = np.ones(shape=(1, 16), dtype=np.int32)
    return input0, input1


def assert_add_sub(
    input0: np.ndarray[Any, Any],
    input1: np.ndarray[Any, Any],
    output0: np.ndarray[Any, Any] | None,
    output1: np.ndarray[Any, Any] | None,
) -> None:
    """The check every ``simple`` example does: OUTPUT0 = sum, OUTPUT1 = difference."""
    assert output0 is not None and output1 is not None
    np.testing.assert_array_equal(output0, input0 + input1)
    np.testing.assert_array_equal(output1, input0 - input1)


def sequence_expected(first: int, values: list[int], *, corrid: int | None = None) -> list[int]:
    """What the sequence examples expect back for ``[first] + values``.

    ``simple_sequence``: the START request returns ``first + 1`` and every later request echoes
    its own value. ``simple_dyna_sequence`` (``corrid`` given): the END request adds the
    correlation id.
    """
    expected = [first + 1] + list(values)
    if corrid is not None:
        expected[-1] += corrid
    return expected
