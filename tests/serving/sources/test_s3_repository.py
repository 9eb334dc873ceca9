"""Folder mode on an ``s3://`` repository, as tritonserver serves one: a real S3-protocol server on
loopback, the models written to the bucket, inference through tritonclient."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repository import demo_models as dm
from serving.main import ServingProcess, StartupError
from tests.ports import free_ports
from tests.s3_server import S3Server
from tests.serving.harness import folder_settings, identity_input, serving_subprocess, wait_ready
from tests.serving.sources.test_registry import wait_for

pytestmark = pytest.mark.embedded


def s3_settings(url: str, **overrides: Any) -> Any:
    return folder_settings(None, model_repository_url=url, **overrides)  # type: ignore[arg-type]


def infer_identity(client: Any, model: str = "identity") -> str:
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    result = client.infer(model, [identity_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    return str(result.get_response()["model_version"])


def delete_prefix(server: S3Server, bucket: str, prefix: str) -> None:
    client = server.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    for item in listed:
        client.delete_object(Bucket=bucket, Key=item["Key"])


def test_serve_command_serves_an_s3_repository_on_a_host_port_endpoint(
    aws_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = aws_env.new_bucket()
    dm.write_onnx_identity(tmp_path / "repo", "identity", dims=(-1,), max_batch_size=8)
    dm.write_onnx_add_sub(tmp_path / "repo", "simple", dims=(16,), max_batch_size=8)
    aws_env.put_tree(bucket, "triton/models", tmp_path / "repo")
    # The endpoint comes from the URL alone (tritonserver's s3://host:port/bucket/path form).
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    url = f"s3://127.0.0.1:{aws_env.port}/{bucket}/triton/models"
    http_port, grpc_port = free_ports(2)
    args = ["-m", "serving", "--model-repository", url, "--host", "127.0.0.1", "--http-port",
            str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", "-1"]  # fmt: skip
    with serving_subprocess(args) as process:
        wait_ready(f"127.0.0.1:{http_port}", process=process)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        wait_for(http.is_server_ready)
        assert infer_identity(http) == "1"
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        # HTTP answers first: the gRPC listener opens just after it.
        wait_for(lambda: _grpc_ready(grpc))
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = grpc.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        http.close()
        grpc.close()


def test_poll_mode_follows_models_added_changed_and_removed_in_the_bucket(
    aws_env: S3Server, tmp_path: Path
) -> None:
    bucket = aws_env.new_bucket()
    dm.write_onnx_identity(tmp_path / "v1", "identity", version=1, dims=(-1,), max_batch_size=8)
    aws_env.put_tree(bucket, "repo", tmp_path / "v1")
    settings = s3_settings(f"s3://{bucket}/repo", model_control_mode="poll", repository_poll_s=0.2)
    with ServingProcess(settings) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert infer_identity(client) == "1"

        dm.write_onnx_identity(tmp_path / "v2", "identity", version=2, dims=(-1,), max_batch_size=8)
        aws_env.put_tree(bucket, "repo", tmp_path / "v2")
        wait_for(lambda: infer_identity(client) == "2")

        dm.write_onnx_identity(tmp_path / "more", "second", dims=(-1,), max_batch_size=8)
        aws_env.put_tree(bucket, "repo", tmp_path / "more")
        wait_for(lambda: client.is_model_ready("second"))
        assert infer_identity(client, "second") == "1"

        delete_prefix(aws_env, bucket, "repo/second/")
        wait_for(lambda: not client.is_model_ready("second"))
        assert infer_identity(client) == "2"
        client.close()


def test_explicit_mode_loads_what_the_bucket_holds_at_load_time(
    aws_env: S3Server, tmp_path: Path
) -> None:
    bucket = aws_env.new_bucket()
    settings = s3_settings(f"s3://{bucket}/repo", model_control_mode="explicit")
    with ServingProcess(settings) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        dm.write_onnx_identity(tmp_path / "v1", "identity", version=1, dims=(-1,), max_batch_size=8)
        aws_env.put_tree(bucket, "repo", tmp_path / "v1")
        client.load_model("identity")
        assert infer_identity(client) == "1"
        dm.write_onnx_identity(tmp_path / "v2", "identity", version=2, dims=(-1,), max_batch_size=8)
        aws_env.put_tree(bucket, "repo", tmp_path / "v2")
        assert infer_identity(client) == "1"  # nothing changes until the next load
        client.load_model("identity")
        assert infer_identity(client) == "2"
        client.close()


def test_a_repository_the_key_cannot_read_stops_start_with_the_reason(
    aws_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = aws_env.new_bucket()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StartupError, match=f"s3://{bucket}/repo/: SignatureDoesNotMatch"):
        ServingProcess(s3_settings(f"s3://{bucket}/repo")).start()


def test_the_local_copy_is_removed_when_the_server_stops(aws_env: S3Server, tmp_path: Path) -> None:
    from serving.sources.directory import DirectorySource

    bucket = aws_env.new_bucket()
    dm.write_onnx_identity(tmp_path / "repo", "identity", dims=(-1,), max_batch_size=8)
    aws_env.put_tree(bucket, "repo", tmp_path / "repo")
    settings = s3_settings(f"s3://{bucket}/repo")
    source = DirectorySource(settings)
    assert source.mirror is not None
    with ServingProcess(settings, source) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert infer_identity(client) == "1"
        client.close()
        assert (source.mirror.local / "identity" / "1" / "model.onnx").is_file()
    assert not source.mirror.local.exists()


def _grpc_ready(client: grpcclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_server_ready())
    except Exception:  # noqa: BLE001 - not listening yet
        return False
