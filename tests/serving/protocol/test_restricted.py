"""Triton's restricted APIs through tritonclient: a restricted group answers only requests that
carry its header (HTTP 403 / gRPC UNAVAILABLE with Triton's message), other groups stay open, and
explicit model control on a non-loopback address refuses to start unprotected."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
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
from serving.settings import ServingSettings
from tests.serving.harness import (
    HTTP_WORKER_IDS,
    HTTP_WORKERS,
    folder_settings,
    identity_input,
    serving_subprocess,
)

pytestmark = pytest.mark.embedded

ADMIN = "model-repository,model-config,statistics:Admin-Key=s3cret"
INFER = "inference:infer-key=ok"
HTTP_INFER = {"infer-key": "ok"}
HTTP_ADMIN = {"Admin-Key": "s3cret"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "ok"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "s3cret"}


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    settings = folder_settings(
        repo, model_control_mode="explicit", load_models=("identity",),
        http_restricted_apis=(ADMIN, INFER), grpc_restricted_protocols=(ADMIN, INFER),
        http_workers=request.param,
    )  # fmt: skip
    with ServingProcess(settings) as process:
        yield process


@pytest.fixture
def http(server: ServingProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServingProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def x() -> np.ndarray[Any, Any]:
    return np.arange(4, dtype=np.float32).reshape(1, 4)


def grpc_input() -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(x())
    return tensor


def test_http_restricted_inference_needs_its_header(http: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        http.infer("identity", [identity_input(x())])
    assert info.value.status() == "403"
    assert info.value.message() == "This API is restricted, expecting header 'infer-key'"
    with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
        http.infer("identity", [identity_input(x())], headers={"infer-key": "wrong"})
    result = http.infer("identity", [identity_input(x())], headers=HTTP_INFER)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x())


def test_http_restricted_model_control_needs_the_admin_header(
    http: httpclient.InferenceServerClient,
) -> None:
    for call in (
        lambda h: http.load_model("identity", headers=h),
        lambda h: http.get_model_repository_index(headers=h),
        lambda h: http.get_model_config("identity", headers=h),
        lambda h: http.get_inference_statistics("identity", headers=h),
    ):
        with pytest.raises(InferenceServerException) as info:
            call(HTTP_INFER)
        assert info.value.status() == "403"
        assert info.value.message() == "This API is restricted, expecting header 'Admin-Key'"
        call(HTTP_ADMIN)


def test_http_unrestricted_groups_stay_open(http: httpclient.InferenceServerClient) -> None:
    assert http.is_server_live() and http.is_server_ready()
    assert http.is_model_ready("identity")
    assert http.get_server_metadata()["name"] == "triton"
    assert http.get_model_metadata("identity")["name"] == "identity"


def test_http_restriction_is_checked_before_the_method(server: ServingProcess) -> None:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index")  # a GET
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 403
    info.value.close()


def test_grpc_restricted_inference_needs_its_header(grpc: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("identity", [grpc_input()])
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert info.value.message() == (
        "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
    )
    result = grpc.infer("identity", [grpc_input()], headers=GRPC_INFER)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x())


def test_grpc_restricted_stream_needs_its_header(grpc: grpcclient.InferenceServerClient) -> None:
    answers: list[Any] = []
    grpc.start_stream(lambda result, error: answers.append((result, error)))
    with contextlib.suppress(InferenceServerException):  # the refused stream may close first
        grpc.async_stream_infer("identity", [grpc_input()])
    grpc.stop_stream()
    assert len(answers) == 1 and answers[0][1] is not None
    assert "expecting header 'triton-grpc-protocol-infer-key'" in str(answers[0][1])
    answers.clear()
    grpc.start_stream(lambda result, error: answers.append((result, error)), headers=GRPC_INFER)
    grpc.async_stream_infer("identity", [grpc_input()])
    grpc.stop_stream()
    assert len(answers) == 1 and answers[0][1] is None


def test_grpc_restricted_model_control_needs_the_admin_header(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    for call in (
        lambda h: grpc.load_model("identity", headers=h),
        lambda h: grpc.get_model_repository_index(headers=h),
        lambda h: grpc.get_model_config("identity", headers=h),
        lambda h: grpc.get_inference_statistics("identity", headers=h),
    ):
        with pytest.raises(InferenceServerException) as info:
            call(GRPC_INFER)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert info.value.message() == (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
        )
        call(GRPC_ADMIN)


def test_grpc_unrestricted_groups_stay_open(grpc: grpcclient.InferenceServerClient) -> None:
    assert grpc.is_server_live() and grpc.is_server_ready()
    assert grpc.is_model_ready("identity")
    assert grpc.get_model_metadata("identity").name == "identity"


def test_unknown_api_or_malformed_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown API 'inferences'"):
        ServingSettings(http_restricted_apis=("inferences:k=v",))
    with pytest.raises(ValueError, match="expected '<api>"):
        ServingSettings(grpc_restricted_protocols=("inference",))
    with pytest.raises(ValueError, match="'health' is given more than once"):
        ServingSettings(http_restricted_apis=("health:a=b", "health,metadata:c=d"))


def test_explicit_mode_on_a_public_address_needs_model_repository_restricted(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="non-loopback address '0.0.0.0'"):
        ServingSettings(model_repository=tmp_path, model_control_mode="explicit")
    with pytest.raises(ValueError, match="non-loopback"):  # gRPC is still open
        ServingSettings(model_repository=tmp_path, model_control_mode="explicit",
                        http_restricted_apis=(ADMIN,))  # fmt: skip
    ServingSettings(model_repository=tmp_path, model_control_mode="explicit",
                    http_restricted_apis=(ADMIN,), grpc_port=-1)  # fmt: skip
    ServingSettings(model_repository=tmp_path, model_control_mode="explicit",
                    http_restricted_apis=(ADMIN,), grpc_restricted_protocols=(ADMIN,))  # fmt: skip
    ServingSettings(model_repository=tmp_path, model_control_mode="explicit", host="::1")


def test_serve_refuses_to_start_with_open_model_control_on_a_public_address(
    tmp_path: Path,
) -> None:
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--model-control-mode",
            "explicit", "--host", "0.0.0.0", "--http-port", "-1",
            "--metrics-port", "-1"]  # fmt: skip
    with serving_subprocess(args) as process:
        assert process.wait(timeout=60) != 0
        assert process.stdout is not None
        output = process.stdout.read()
    assert "restrict the model-repository API on every enabled protocol" in output
