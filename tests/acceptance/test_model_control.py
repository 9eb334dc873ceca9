"""``simple_{http,grpc}_model_control.py`` (and the aio variants) against a server in explicit mode.

The examples count the repository index, load ``simple``, expect a malformed config override to
fail with ``failed to load``, reload with ``{"max_batch_size":"16"}`` and read it back from the
config endpoint, unload, and expect ``load_model("wrong_model_name")`` to fail.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpclient_aio
from tritonclient.utils import InferenceServerException

from tests.acceptance.example_repository import (
    write_client_examples_repository,
    write_simple_ensemble,
)
from tests.acceptance.expectations import assert_add_sub, simple_data
from tests.acceptance.server import ServerProcess, run_server

pytestmark = pytest.mark.embedded

MODEL = "simple"
MODELS_IN_REPOSITORY = 5
ENSEMBLE = "ensemble_add_sub_int32_int32_int32"
INVALID_OVERRIDE = '"parameters": {"config": {{"max_batch_size": "16"}}}'
VALID_OVERRIDE = '{"max_batch_size":"16"}'


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model-control")
    write_client_examples_repository(path)
    write_simple_ensemble(path, ENSEMBLE)
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with run_server(repo, "--model-control-mode=explicit") as running:
        yield running


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(url=server.http)
    yield client
    client.unload_model(MODEL)
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(url=server.grpc)
    yield client
    client.unload_model(MODEL)
    client.close()


def test_explicit_mode_starts_with_nothing_loaded(
    http: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    index = http.get_model_repository_index()
    assert len(index) == MODELS_IN_REPOSITORY
    assert {entry["name"] for entry in index} == {"simple", "simple_string", "simple_identity",
                                                   "add_sub", ENSEMBLE}  # fmt: skip
    request = urllib.request.Request(
        f"http://{server.http}/v2/repository/index", data=b'{"ready": true}', method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read()) == []
    assert not http.is_model_ready(MODEL)


def test_http_model_control(http: httpclient.InferenceServerClient) -> None:
    assert http.is_server_live()
    assert len(http.get_model_repository_index()) == MODELS_IN_REPOSITORY

    http.load_model(MODEL)
    assert http.is_model_ready(MODEL)

    http.load_model(MODEL, config=VALID_OVERRIDE)
    assert http.get_model_config(MODEL)["max_batch_size"] == 16
    assert http.is_model_ready(MODEL)

    http.unload_model(MODEL)
    assert not http.is_model_ready(MODEL)

    with pytest.raises(InferenceServerException) as caught:
        http.load_model("wrong_model_name")
    assert "failed to load" in caught.value.message()


def test_grpc_model_control(grpc: grpcclient.InferenceServerClient) -> None:
    assert len(grpc.get_model_repository_index().models) == MODELS_IN_REPOSITORY

    grpc.load_model(MODEL)
    assert grpc.is_model_ready(MODEL)

    grpc.load_model(MODEL, config=VALID_OVERRIDE)
    assert grpc.get_model_config(MODEL).config.max_batch_size == 16

    grpc.unload_model(MODEL)
    assert not grpc.is_model_ready(MODEL)

    # A path component longer than NAME_MAX is refused without taking the server down.
    with pytest.raises(InferenceServerException):
        grpc.load_model(MODEL, config="{}", files={"file:" + "A" * 256: b"a"})
    assert grpc.is_server_live()

    with pytest.raises(InferenceServerException) as caught:
        grpc.load_model("wrong_model_name")
    assert "failed to load" in caught.value.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_invalid_config_override_fails_with_failed_to_load(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """The examples send a malformed override and match ``failed to load`` in the error."""
    client: Any = http if protocol == "http" else grpc
    client.load_model(MODEL)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(MODEL, config=INVALID_OVERRIDE)
    assert "failed to load" in caught.value.message()
    assert client.is_model_ready(MODEL)  # the previously loaded version keeps serving


async def test_http_aio_model_control(server: ServerProcess) -> None:
    async with httpclient_aio.InferenceServerClient(url=server.http) as client:
        assert len(await client.get_model_repository_index()) == MODELS_IN_REPOSITORY
        await client.load_model(MODEL)
        assert await client.is_model_ready(MODEL)
        await client.load_model(MODEL, config=VALID_OVERRIDE)
        assert (await client.get_model_config(MODEL))["max_batch_size"] == 16
        await client.unload_model(MODEL)
        assert not await client.is_model_ready(MODEL)
        with pytest.raises(InferenceServerException) as caught:
            await client.load_model("wrong_model_name")
        assert "failed to load" in caught.value.message()


async def test_grpc_aio_model_control(server: ServerProcess) -> None:
    async with grpcclient_aio.InferenceServerClient(url=server.grpc) as client:
        index = await client.get_model_repository_index()
        assert len(index.models) == MODELS_IN_REPOSITORY
        await client.load_model(MODEL)
        assert await client.is_model_ready(MODEL)
        await client.load_model(MODEL, config=VALID_OVERRIDE)
        assert (await client.get_model_config(MODEL)).config.max_batch_size == 16
        await client.unload_model(MODEL)
        assert not await client.is_model_ready(MODEL)
        with pytest.raises(InferenceServerException) as caught:
            await client.load_model("wrong_model_name")
        assert "failed to load" in caught.value.message()


def test_load_with_config_and_file_override_serves_the_new_files(
    http: httpclient.InferenceServerClient, repo: Path
) -> None:
    """``load_model(config=..., files={"file:1/model.onnx": ...})`` (L0_lifecycle file override)."""
    model_bytes = (repo / MODEL / "1" / "model.onnx").read_bytes()
    config = (
        '{"backend":"onnxruntime","max_batch_size":8,'
        '"input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":[16]},'
        '{"name":"INPUT1","data_type":"TYPE_INT32","dims":[16]}],'
        '"output":[{"name":"OUTPUT0","data_type":"TYPE_INT32","dims":[16]},'
        '{"name":"OUTPUT1","data_type":"TYPE_INT32","dims":[16]}]}'
    )
    http.load_model(MODEL, config=config, files={"file:1/model.onnx": model_bytes})
    assert http.is_model_ready(MODEL)
    input0, input1 = simple_data()
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    result = http.infer(MODEL, inputs)
    assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))


def test_unloaded_model_refuses_inference_and_unload_of_unknown_is_a_no_op(
    http: httpclient.InferenceServerClient,
) -> None:
    http.unload_model("never_heard_of_it")
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    for tensor in inputs:
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as caught:
        http.infer(MODEL, inputs)
    assert "Request for unknown model" in caught.value.message()
    entries = [entry for entry in http.get_model_repository_index() if entry["name"] == MODEL]
    assert entries and all(entry.get("state", "UNAVAILABLE") != "READY" for entry in entries)


def test_load_model_flag_loads_only_the_named_models_at_startup(repo: Path) -> None:
    """``--model-control-mode=explicit --load-model=simple``: the rest stays unloaded."""
    with (
        run_server(repo, "--model-control-mode=explicit", "--load-model=simple") as running,
        httpclient.InferenceServerClient(url=running.http) as client,
    ):
        assert client.is_model_ready(MODEL)
        assert not client.is_model_ready("simple_string")
        states = {
            entry["name"]: entry.get("state") for entry in client.get_model_repository_index()
        }
        assert states[MODEL] == "READY"
        assert states["simple_string"] != "READY"


def test_ensemble_load_brings_composing_model_and_unload_dependents_removes_it(
    http: httpclient.InferenceServerClient,
) -> None:
    """L0_lifecycle: loading an ensemble loads ``simple``; ``unload_dependents`` unloads it too."""
    http.load_model(ENSEMBLE)
    assert http.is_model_ready(ENSEMBLE)
    assert http.is_model_ready(MODEL)

    http.unload_model(ENSEMBLE)
    assert not http.is_model_ready(ENSEMBLE)
    assert http.is_model_ready(MODEL)  # composing models stay without unload_dependents

    http.load_model(ENSEMBLE)
    http.unload_model(ENSEMBLE, unload_dependents=True)
    assert not http.is_model_ready(ENSEMBLE)
    assert not http.is_model_ready(MODEL)
