"""Model names are never paths: a name holding '/', '\\', NUL, '.' or '..' (percent-encoded or
not) is refused on every HTTP route and gRPC RPC, repository load/unload and folder overrides
included, with the protocol's INVALID_ARG answer (HTTP 400, gRPC INVALID_ARGUMENT)."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import folder_settings, identity_input

pytestmark = pytest.mark.embedded

INVALID = "invalid model name"
# What an attacker would load: a Python model whose code runs at load time.
OVERRIDE_CONFIG = json.dumps({"name": "x", "backend": "python", "max_batch_size": 0,
                              "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
                              "output": [{"name": "OUT", "data_type": "TYPE_FP32",
                                          "dims": [1]}]})  # fmt: skip
OVERRIDE_FILES = {"file:1/model.py": b"raise SystemExit('must never run')\n"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = tmp_path_factory.mktemp("names") / "repo"
    dm.write_onnx_identity(path, "identity", dims=(-1,), max_batch_size=8)
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServingProcess]:
    settings = folder_settings(repo, model_control_mode="explicit", load_models=("identity",))
    with ServingProcess(settings) as process:
        yield process


def raw_post(server: ServingProcess, path: str, body: dict[str, Any]) -> tuple[int, str]:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body=json.dumps(body),
                           headers={"Content-Type": "application/json"})  # fmt: skip
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}").get("error", "")
    finally:
        connection.close()


def override_body() -> dict[str, Any]:
    files = {k: base64.b64encode(v).decode() for k, v in OVERRIDE_FILES.items()}
    return {"parameters": {"config": OVERRIDE_CONFIG, **files}}


@pytest.mark.parametrize(
    "encoded", ["%2e%2e", "%2E%2E", "..", "%252e%252e", "..%2Fidentity", "%2e%2e%5cx", "a%00b"]
)
def test_http_load_of_a_path_like_name_is_refused_before_any_file_is_written(
    server: ServingProcess, repo: Path, encoded: str
) -> None:
    before = sorted(p.name for p in repo.parent.iterdir())
    status, message = raw_post(server, f"/v2/repository/models/{encoded}/load", override_body())
    assert status == 400 and message.startswith(INVALID), message
    status, message = raw_post(server, f"/v2/repository/models/{encoded}/unload", {})
    assert status == 400 and message.startswith(INVALID), message
    assert sorted(p.name for p in repo.parent.iterdir()) == before


@pytest.mark.parametrize("path", ["/v2/models/%2e%2e/infer", "/v2/models/a%2Fb/infer",
                                  "/v2/models/%2e%2e/versions/1/infer"])  # fmt: skip
def test_http_routes_refuse_path_like_names(server: ServingProcess, path: str) -> None:
    status, message = raw_post(server, path, {"inputs": []})
    assert status == 400 and message.startswith(INVALID), message


def test_tritonclient_http_sees_400_for_path_like_names(server: ServingProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for name in ("..", "%2e%2e"):
            with pytest.raises(InferenceServerException, match=INVALID) as info:
                client.load_model(name, config=OVERRIDE_CONFIG, files=OVERRIDE_FILES)
            assert info.value.status() == "400"
            with pytest.raises(InferenceServerException, match=INVALID):
                client.get_model_metadata(name)
        x = np.ones((1, 2), dtype=np.float32)
        assert client.infer("identity", [identity_input(x)]).as_numpy("OUTPUT0").shape == (1, 2)
    finally:
        client.close()


@pytest.mark.parametrize("name", ["..", "../identity", "a/b", "a\\b", "x\x00", "%2e%2e", "."])
def test_grpc_refuses_path_like_names(server: ServingProcess, repo: Path, name: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    before = sorted(p.name for p in repo.parent.iterdir())
    tensor = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
    try:
        for call in (
            lambda: client.load_model(name, config=OVERRIDE_CONFIG, files=OVERRIDE_FILES),
            lambda: client.unload_model(name),
            lambda: client.infer(name, [tensor]),
            lambda: client.get_model_metadata(name),
            lambda: client.get_model_config(name),
        ):
            with pytest.raises(InferenceServerException, match=INVALID) as info:
                call()
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    finally:
        client.close()
    assert sorted(p.name for p in repo.parent.iterdir()) == before
