"""The backends' request check: what it remembers of accepted inputs lets no bad one through."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from serving.backends.tensors import MAX_ACCEPTED_TENSORS, RequestChecker
from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

pytestmark = pytest.mark.embedded

CONFIG = text_format.Parse(
    'name: "m" max_batch_size: 8 input { name: "X" data_type: TYPE_FP32 dims: [-1, 4] } '
    'input { name: "Y" data_type: TYPE_INT64 dims: [1] }',
    model_config_pb2.ModelConfig(),
)


def request(**inputs: np.ndarray) -> InferRequest:
    return InferRequest(model_name="m", inputs=inputs)


def good(rows: int = 1, width: int = 3) -> dict[str, np.ndarray]:
    return {"X": np.zeros((rows, width, 4), np.float32), "Y": np.zeros((rows, 1), np.int64)}


def test_after_accepting_an_input_its_bad_variants_are_still_refused() -> None:
    checker = RequestChecker(CONFIG)
    checker.check(request(**good()))
    checker.check(request(**good()))  # the remembered path
    with pytest.raises(InvalidArgumentError, match="data-type is 'FP64'"):
        checker.check(request(X=np.zeros((1, 3, 4), np.float64), Y=good()["Y"]))
    with pytest.raises(InvalidArgumentError, match="unexpected shape for input 'X'"):
        checker.check(request(X=np.zeros((1, 3, 5), np.float32), Y=good()["Y"]))
    with pytest.raises(InvalidArgumentError, match="unexpected inference input 'Z'"):
        checker.check(request(**good(), Z=good()["Y"]))
    with pytest.raises(InvalidArgumentError, match=r"missing required input\(s\) \['Y'\]"):
        checker.check(request(X=good()["X"]))


def test_what_it_remembers_is_bounded_and_starting_again_keeps_it_correct() -> None:
    checker = RequestChecker(CONFIG)
    for width in range(1, MAX_ACCEPTED_TENSORS * 2):  # a variable dim: a new shape each time
        checker.check(request(**good(width=width)))
        assert len(checker._accepted) <= MAX_ACCEPTED_TENSORS
    with pytest.raises(InvalidArgumentError, match="unexpected shape for input 'X'"):
        checker.check(request(X=np.zeros((1, 2, 3), np.float32), Y=good()["Y"]))
