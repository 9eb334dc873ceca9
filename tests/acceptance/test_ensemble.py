"""``L0_simple_ensemble``: an ensemble over ``simple`` answers like ``simple`` and counts in both
models' statistics (the composing step is an ordinary request to ``simple``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from tests.acceptance.example_repository import write_simple_ensemble
from tests.acceptance.expectations import assert_add_sub, simple_data
from tests.acceptance.server import ServerProcess, run_server

pytestmark = pytest.mark.embedded

ENSEMBLE = "ensemble_add_sub_int32_int32_int32"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ensemble")
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    write_simple_ensemble(repo, ENSEMBLE)
    with run_server(repo) as running:
        yield running


def test_ensemble_is_ready_with_ensemble_platform(http: httpclient.InferenceServerClient) -> None:
    assert http.is_model_ready(ENSEMBLE)
    assert http.get_model_metadata(ENSEMBLE)["platform"] == "ensemble"
    assert http.is_server_ready()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_add_sub(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    input0, input1 = simple_data()
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    result = client.infer(ENSEMBLE, inputs, outputs=outputs, request_id="ens-1")
    assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))


def test_ensemble_request_counts_in_ensemble_and_composing_statistics(
    http: httpclient.InferenceServerClient,
) -> None:
    def success(model: str) -> int:
        stats = http.get_inference_statistics(model_name=model)["model_stats"][0]
        return int(stats["inference_stats"]["success"]["count"])

    before = {model: success(model) for model in (ENSEMBLE, "simple")}
    input0, input1 = simple_data()
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    http.infer(ENSEMBLE, inputs)
    assert success(ENSEMBLE) - before[ENSEMBLE] == 1
    assert success("simple") - before["simple"] == 1


def test_ensemble_missing_input_is_refused(http: httpclient.InferenceServerClient) -> None:
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(simple_data()[0])
    with pytest.raises(InferenceServerException) as caught:
        http.infer(ENSEMBLE, inputs)
    assert "INPUT1" in caught.value.message()
