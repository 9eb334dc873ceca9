"""The server's request check: what a signature remembers of accepted inputs lets no bad
request through, and its errors stay Triton's."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from serving.core.signature import MAX_ACCEPTED_INPUTS, ModelSignature, check_request
from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

pytestmark = pytest.mark.embedded


def signature() -> ModelSignature:
    config = text_format.Parse(
        'name: "m" max_batch_size: 4 input { name: "X" data_type: TYPE_FP32 dims: [-1] } '
        'input { name: "Y" data_type: TYPE_INT32 dims: [1] } '
        'output { name: "Z" data_type: TYPE_FP32 dims: [-1] }',
        model_config_pb2.ModelConfig(),
    )
    return ModelSignature.from_config(config)


def check(sig: ModelSignature, **inputs: np.ndarray) -> None:
    check_request(InferRequest(model_name="m", inputs=inputs), sig, "m")


def x(rows: int, width: int = 3) -> np.ndarray:
    return np.zeros((rows, width), np.float32)


def y(rows: int) -> np.ndarray:
    return np.zeros((rows, 1), np.int32)


def test_inputs_accepted_apart_are_still_refused_together_when_their_batches_differ() -> None:
    sig = signature()
    check(sig, X=x(1), Y=y(1))
    check(sig, X=x(2), Y=y(2))
    check(sig, X=x(1), Y=y(1))  # the remembered path
    with pytest.raises(InvalidArgumentError, match="input 'Y' batch size does not match"):
        check(sig, X=x(1), Y=y(2))


def test_after_accepting_an_input_its_bad_variants_are_still_refused() -> None:
    sig = signature()
    check(sig, X=x(1), Y=y(1))
    with pytest.raises(InvalidArgumentError, match="batch-size must be <= 4"):
        check(sig, X=x(5), Y=y(5))
    with pytest.raises(InvalidArgumentError, match="data-type is 'FP64'"):
        check(sig, X=np.zeros((1, 3)), Y=y(1))
    with pytest.raises(InvalidArgumentError, match="unexpected shape for input 'Y'"):
        check(sig, X=x(1), Y=np.zeros((1, 2), np.int32))
    with pytest.raises(InvalidArgumentError, match="unexpected inference input 'W'"):
        check(sig, X=x(1), Y=y(1), W=y(1))
    with pytest.raises(InvalidArgumentError, match="missing required input"):
        check(sig, X=x(1))


def test_what_it_remembers_is_bounded() -> None:
    sig = signature()
    for width in range(1, MAX_ACCEPTED_INPUTS * 2):  # a variable dim: a new shape each time
        check(sig, X=x(1, width), Y=y(1))
        assert len(sig.accepted_inputs) <= MAX_ACCEPTED_INPUTS
    with pytest.raises(InvalidArgumentError, match="unexpected shape for input 'X'"):
        check(sig, X=np.zeros((1, 2, 2), np.float32), Y=y(1))
