"""``DirectorySource``: Triton's model control modes on a real folder, through tritonclient."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess, StartupError
from tests.serving.harness import folder_settings, identity_input, serving

pytestmark = pytest.mark.embedded


def infer_identity(client: Any, model: str = "identity", version: str = "") -> Any:
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    result = client.infer(model, [identity_input(x)], model_version=version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    return result.get_response()


def wait_for(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_none_mode_serves_every_model_and_refuses_control(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    dm.write_onnx_add_sub(tmp_path, "simple")
    with serving(tmp_path) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("identity") and client.is_model_ready("simple")
        with pytest.raises(InferenceServerException, match="not allowed"):
            client.unload_model("identity")


def test_version_policy_latest_serves_highest(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity", version=1)
    dm.write_onnx_identity(tmp_path, "identity", version=3)
    with serving(tmp_path) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_metadata("identity")["versions"] == ["3"]
        assert infer_identity(client)["model_version"] == "3"


def test_explicit_mode_loads_only_named_models_then_load_and_unload(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    dm.write_onnx_add_sub(tmp_path, "simple")
    with serving(tmp_path, model_control_mode="explicit", load_models=("identity",)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["simple"] == {"name": "simple"}
        assert index["identity"]["state"] == "READY"
        client.load_model("simple")
        assert client.is_model_ready("simple")
        client.unload_model("identity")
        assert not client.is_model_ready("identity")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["identity"]["state"] == "UNAVAILABLE"
        assert index["identity"]["reason"] == "unloaded"
        with pytest.raises(InferenceServerException, match="has no available versions"):
            infer_identity(client)
        assert client.is_server_ready()  # unloaded on purpose does not count
        client.unload_model("never-heard-of")  # a no-op success
        with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
            client.load_model("missing")
        client.load_model("identity")
        infer_identity(client)


def test_explicit_load_with_config_and_file_overrides(tmp_path: Path) -> None:
    source_repo = tmp_path / "source"
    dm.write_onnx_identity(source_repo, "identity", dims=(-1,), max_batch_size=8)
    repo = tmp_path / "repo"
    repo.mkdir()
    with serving(repo, model_control_mode="explicit") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        onnx_bytes = (source_repo / "identity" / "1" / "model.onnx").read_bytes()
        config = json.dumps({"name": "custom", "platform": "onnxruntime_onnx",
                             "max_batch_size": 8,
                             "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                             "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32",
                                         "dims": [-1]}]})  # fmt: skip
        client.load_model("custom", config=config, files={"file:1/model.onnx": onnx_bytes})
        assert client.is_model_ready("custom")
        infer_identity(client, "custom")
        count = client.get_inference_statistics("custom")["model_stats"][0]["inference_count"]
        assert count == 1
        client.load_model("custom", config=config, files={"file:1/model.onnx": onnx_bytes})
        stats = client.get_inference_statistics("custom")["model_stats"][0]
        assert stats["inference_count"] == 0  # an override always reloads: a fresh version
        infer_identity(client, "custom")
        with pytest.raises(InferenceServerException, match="'config' parameter is required"):
            client.load_model("custom", files={"file:1/model.onnx": onnx_bytes})
        with pytest.raises(InferenceServerException, match="Invalid config override"):
            client.load_model("custom", config='{"bogus_field": 1}', files={
                "file:1/model.onnx": onnx_bytes})  # fmt: skip
        infer_identity(client, "custom")


def test_explicit_load_failure_is_400_and_keeps_the_old_version(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    with serving(tmp_path, model_control_mode="explicit", load_models=("*",)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        infer_identity(client)
        (tmp_path / "identity" / "2").mkdir()
        (tmp_path / "identity" / "2" / "model.onnx").write_bytes(b"not an onnx file")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("identity")
        assert info.value.status() == "400"
        assert "failed to load 'identity'" in info.value.message()
        assert "version 2 is at UNAVAILABLE state" in info.value.message()
        assert infer_identity(client)["model_version"] == "1"
        index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
        assert index[("identity", "2")]["state"] == "UNAVAILABLE"
        assert index[("identity", "2")]["reason"]


def test_startup_failure_exits_unless_told_otherwise(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    dm.write_corrupt_onnx(tmp_path, "broken")
    with pytest.raises(StartupError, match="failed to load all models"):
        ServingProcess(folder_settings(tmp_path)).start()
    with serving(tmp_path, exit_on_error=False) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        infer_identity(client)
        assert client.is_server_live()
        assert not client.is_server_ready()  # strict readiness: a model is not READY
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
    with serving(tmp_path, exit_on_error=False, strict_readiness=False) as server:
        assert httpclient.InferenceServerClient(server.http_url).is_server_ready()


def test_poll_mode_hot_swaps_a_new_version_without_failed_requests(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity", version=1)
    with serving(tmp_path, model_control_mode="poll", repository_poll_s=0.2) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        versions_seen: list[str] = []
        failures: list[BaseException] = []
        stop = threading.Event()

        def loop() -> None:
            loop_client = httpclient.InferenceServerClient(server.http_url)
            while not stop.is_set():
                try:
                    versions_seen.append(infer_identity(loop_client)["model_version"])
                except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                    failures.append(exc)

        worker = threading.Thread(target=loop)
        worker.start()
        try:
            wait_for(lambda: len(versions_seen) > 20)
            staging = tmp_path / ".staging"
            dm.write_onnx_identity(staging, "identity", version=2)
            shutil.move(str(staging / "identity" / "2"), str(tmp_path / "identity" / "2"))
            wait_for(lambda: versions_seen[-1:] == ["2"])
            count = len(versions_seen)
            wait_for(lambda: len(versions_seen) > count + 20)
        finally:
            stop.set()
            worker.join()
        assert failures == []
        assert versions_seen[0] == "1" and versions_seen[-1] == "2"
        first_two = versions_seen.index("2")
        assert "1" not in versions_seen[first_two:]  # routing flipped once, atomically
        index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
        assert index[("identity", "1")]["reason"] == "unloaded"


def test_poll_mode_failed_new_version_keeps_old_serving_then_model_removal(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity", version=1)
    dm.write_onnx_add_sub(tmp_path, "simple")
    with serving(tmp_path, model_control_mode="poll", repository_poll_s=0.2,
                 exit_on_error=False) as server:  # fmt: skip
        client = httpclient.InferenceServerClient(server.http_url)
        bad = tmp_path / "identity" / "2"
        bad.mkdir()
        (bad / "model.onnx").write_bytes(b"garbage")

        def failed() -> bool:
            index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
            return index.get(("identity", "2"), {}).get("state") == "UNAVAILABLE"

        wait_for(failed)
        assert infer_identity(client)["model_version"] == "1"
        shutil.rmtree(tmp_path / "simple")
        wait_for(lambda: not client.is_model_ready("simple"))
        dm.write_onnx_add_sub(tmp_path, "added")
        wait_for(lambda: _ready(client, "added"))


def _ready(client: Any, name: str) -> bool:
    try:
        return bool(client.is_model_ready(name))
    except InferenceServerException:
        return False


def test_file_override_paths_cannot_escape(tmp_path: Path) -> None:
    with serving(tmp_path, model_control_mode="explicit") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        config = json.dumps({"name": "x", "backend": "onnxruntime"})
        with pytest.raises(InferenceServerException, match="outside"):
            client.load_model("x", config=config, files={"file:../../evil": b"x"})


def test_grpc_repository_load_and_unload_in_explicit_mode(tmp_path: Path) -> None:
    import grpc
    import tritonclient.grpc as grpcclient

    dm.write_onnx_identity(tmp_path, "identity")
    with (
        serving(tmp_path, model_control_mode="explicit") as server,
        grpcclient.InferenceServerClient(server.grpc_url) as client,
    ):
        assert not _ready(client, "identity")
        client.load_model("identity")
        assert client.is_model_ready("identity")
        index = {m.name: m.state for m in client.get_model_repository_index().models}
        assert index["identity"] == "READY"
        client.unload_model("identity")
        assert not client.is_model_ready("identity")
        with pytest.raises(grpc.RpcError) as info:
            client._client_stub.RepositoryModelLoad(_load_request("identity", "bogus"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Unrecognized load parameter 'bogus'" in info.value.details()


def _load_request(name: str, parameter: str) -> Any:
    from tritonclient.grpc import service_pb2

    request = service_pb2.RepositoryModelLoadRequest(model_name=name)
    request.parameters[parameter].string_param = "x"
    return request


def test_poll_mode_reloads_a_changed_config_and_unloads_a_removed_version(tmp_path: Path) -> None:
    from tests.serving.harness import set_version_policy

    dm.write_onnx_identity(tmp_path, "identity", version=1)
    model_dir = dm.write_onnx_identity(tmp_path, "identity", version=2)
    set_version_policy(model_dir, "all {}")
    with serving(tmp_path, model_control_mode="poll", repository_poll_s=0.2) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_metadata("identity")["versions"] == ["1", "2"]
        config_path = model_dir / "config.pbtxt"
        config_path.write_text(config_path.read_text().replace("max_batch_size: 8",
                                                               "max_batch_size: 4"))  # fmt: skip
        wait_for(lambda: client.get_model_config("identity")["max_batch_size"] == 4)
        shutil.rmtree(model_dir / "1")
        wait_for(lambda: client.get_model_metadata("identity")["versions"] == ["2"])
        assert infer_identity(client)["model_version"] == "2"


def test_model_config_name_and_disabled_auto_complete(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "identity")
    (model_dir / "configs").mkdir()
    text = (model_dir / "config.pbtxt").read_text()
    (model_dir / "configs" / "small.pbtxt").write_text(text.replace("size: 8", "size: 2"))
    dm.write_onnx_identity(tmp_path, "bare", with_config=False)
    with serving(tmp_path, model_config_name="small") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_config("identity")["max_batch_size"] == 2
        assert client.get_model_metadata("bare")["inputs"][0]["name"] == "INPUT0"  # completed
    with serving(tmp_path, auto_complete_config=False, exit_on_error=False) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_config("identity")["max_batch_size"] == 8
        assert client.get_model_metadata("bare")["inputs"] == []  # nothing read from the model
