"""The serving process as operators run it: ``manage.py serve`` / ``python -m serving`` in a real
subprocess, the start-up table, readiness, and SIGTERM draining to exit code 0."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from serving.core.server import InferenceServer
from serving.settings import ServingSettings, settings_from_env
from tests.ports import free_port, free_ports
from tests.serving.harness import identity_input, serving_subprocess, wait_ready

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("entry", [["manage.py", "serve"], ["-m", "serving"]])
def test_serve_folder_then_sigterm_exits_zero(tmp_path: Path, entry: list[str]) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    dm.write_onnx_add_sub(tmp_path, "simple")
    http_port, grpc_port, metrics_port = free_ports(3)
    args = [*entry, "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", str(grpc_port),
            "--metrics-port", str(metrics_port), "--strict-readiness", "true"]  # fmt: skip
    with serving_subprocess(args) as process:
        url = f"127.0.0.1:{http_port}"
        wait_ready(url, process=process)
        client = httpclient.InferenceServerClient(url)
        assert client.is_server_ready()
        x = np.ones((1, 2), dtype=np.float32)
        np.testing.assert_array_equal(
            client.infer("identity", [identity_input(x)]).as_numpy("OUTPUT0"), x
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert process.stdout is not None
        log = process.stdout.read()
    assert "Model" in log and "Version" in log and "Status" in log
    assert "identity" in log and "READY" in log


def test_startup_failure_exits_non_zero(tmp_path: Path) -> None:
    dm.write_corrupt_onnx(tmp_path, "broken")
    port = str(free_port())
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", port, "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
    with serving_subprocess(args) as process:
        assert process.wait(timeout=60) == 1
        assert process.stdout is not None
        log = process.stdout.read()
    assert "failed to load all models" in log and "broken" in log


def test_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    dm.write_python_sleep(tmp_path, "sleep", execute_delay_ms=1000)
    http_port = free_port()
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
    with serving_subprocess(args) as process:
        url = f"127.0.0.1:{http_port}"
        wait_ready(url, process=process)
        client = httpclient.InferenceServerClient(url)
        meta = client.get_model_metadata("sleep")
        results: list[object] = []

        def call() -> None:
            inputs = []
            for tensor in meta["inputs"]:
                shape = [1 if d < 0 else d for d in tensor["shape"]]
                value = httpclient.InferInput(tensor["name"], shape, tensor["datatype"])
                value.set_data_from_numpy(np.full(shape, 0.5, dtype=np.float32))
                inputs.append(value)
            results.append(httpclient.InferenceServerClient(url).infer("sleep", inputs))

        worker = threading.Thread(target=call)
        worker.start()
        threading.Event().wait(0.2)
        process.send_signal(signal.SIGTERM)
        worker.join(timeout=60)
        assert process.wait(timeout=60) == 0
    assert len(results) == 1


def test_settings_from_env_and_flags() -> None:
    settings = settings_from_env(
        {
            "SERVING_HTTP_PORT": "9000",
            "SERVING_STRICT_READINESS": "false",
            "REDIS_URL": "redis://x",
        },
        grpc_port=9001,
        http_port=None,
    )
    assert (settings.http_port, settings.grpc_port, settings.strict_readiness) == (
        9000,
        9001,
        False,
    )
    assert settings.redis_url == "redis://x" and settings.registry_mode
    with pytest.raises(ValueError, match="--model-control-mode"):
        ServingSettings(model_control_mode="sometimes")
    with pytest.raises(ValueError, match="only allowed with --model-control-mode=explicit"):
        ServingSettings(load_models=("a",))
    with pytest.raises(ValueError, match="must be the only"):
        ServingSettings(model_control_mode="explicit", load_models=("*", "a"))


def test_model_repository_is_a_folder_or_an_s3_url_from_flag_or_environment() -> None:
    from_env = settings_from_env({"SERVING_MODEL_REPOSITORY": "s3://host:9000/bucket/models"})
    assert from_env.model_repository_url == "s3://host:9000/bucket/models"
    assert from_env.model_repository is None and not from_env.registry_mode
    from_flag = settings_from_env({}, model_repository="/srv/models")
    assert from_flag.model_repository == Path("/srv/models") and not from_flag.model_repository_url
    with pytest.raises(ValueError, match="'gs://' is not supported"):
        settings_from_env({}, model_repository="gs://bucket/models")
    with pytest.raises(ValueError, match="--model-repository: 's3:///models': no bucket name"):
        settings_from_env({"SERVING_MODEL_REPOSITORY": "s3:///models"})


def test_port_in_use_exits_non_zero_with_a_message(tmp_path: Path) -> None:
    import socket

    dm.write_onnx_identity(tmp_path, "identity")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
                "--http-port", port, "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
        with serving_subprocess(args) as process:
            assert process.wait(timeout=60) == 1
            assert process.stdout is not None
            assert "cannot start serving" in process.stdout.read()


def test_ready_only_once_every_listener_accepts(tmp_path: Path) -> None:
    """HTTP binds before gRPC; a probe that sees ready over HTTP must find gRPC accepting too,
    or a load balancer following the HTTP probe routes gRPC clients to a closed port."""
    dm.write_onnx_identity(tmp_path, "identity")
    http_port, grpc_port = free_ports(2)
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", str(grpc_port),
            "--metrics-port", "-1"]  # fmt: skip
    with serving_subprocess(args) as process:
        deadline = time.monotonic() + 60
        while not _http_ready(http_port):
            assert process.poll() is None, "server exited"
            assert time.monotonic() < deadline, "never ready"
        # No wait_for_ready: the channel must connect at once, as a balancer's first request would.
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=1.0)


def test_readiness_is_false_while_the_listeners_open() -> None:
    server = InferenceServer(ServingSettings())
    assert server.ready
    server.opening = True
    assert not server.ready and server.live


def _http_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
