"""Inference tokens with ``--workers 2`` (two gRPC and two HTTP front-ends): the front-ends hold
no token table, so every check runs in the serving process on the relayed metadata and headers;
the tests of ``test_inference_auth`` again through the front-ends, and a stream refused without
a token."""

from __future__ import annotations

import contextlib
import dataclasses
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from serving.main import ServingProcess
from tests.serving.access.test_inference_auth import (  # noqa: F401 - the same tests
    X,
    grpc_bearer,
    models,
    settings,
    test_async_clients_send_the_token_the_same_way,
    test_health_answers_without_a_token_and_nothing_else_does,
    test_invoker_calls_its_models_only,
    test_unknown_token_is_unauthenticated,
    token,
)

pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def replica(tmp_path: Path, models: None) -> Iterator[ServingProcess]:  # noqa: F811
    relayed = dataclasses.replace(settings(tmp_path, "replica-a"), grpc_workers=2, http_workers=2)
    with ServingProcess(relayed) as server:
        yield server


def stream_answers(replica: ServingProcess, headers: dict[str, str] | None) -> list[Any]:
    answers: queue.Queue[Any] = queue.Queue()
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(X)
    with grpcclient.InferenceServerClient(replica.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)),
                            headers=headers)  # fmt: skip
        # A refused stream may end before the request is queued; the refusal still reaches the
        # callback, which is what the test reads.
        with contextlib.suppress(InferenceServerException):
            client.async_stream_infer("fraud", [tensor])
        first = answers.get(timeout=60)
        client.stop_stream()
    return [first]


def test_a_stream_needs_a_token_and_runs_with_one(replica: ServingProcess) -> None:
    [(result, error)] = stream_answers(replica, None)
    assert result is None and "UNAUTHENTICATED" in str(error.status())
    _, key = token(known_to=replica, models=["fraud"])
    [(result, error)] = stream_answers(replica, grpc_bearer(key))
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X)
