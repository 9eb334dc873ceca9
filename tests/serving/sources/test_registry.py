"""``RegistrySource`` against the real registry: promoted versions served, promote and rollback
reaching live traffic without a dropped request, verified artifacts, heartbeats."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.settings import ServingSettings
from tests.serving.harness import identity_input

pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]


def identity_onnx(tmp_path: Path) -> tuple[bytes, str]:
    model_dir = dm.write_onnx_identity(tmp_path / "src", "identity", dims=(-1,), max_batch_size=8)
    return (model_dir / "1" / "model.onnx").read_bytes(), (model_dir / "config.pbtxt").read_text()


def registry_version(name: str, number: int, onnx: bytes, config_text: str) -> Any:
    from repository.blobs import blob_store_file
    from tests.factories import ModelFactory, ModelVersionFactory, VersionFileFactory

    model = ModelFactory(name=name)
    text = config_text.replace('name: "identity"', f'name: "{name}"')
    version = ModelVersionFactory(model=model, number=number, config_text=text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(onnx)
        blob = blob_store_file(path)
    VersionFileFactory(version=version, path="model.onnx", blob=blob)
    return version


def promote(version: Any) -> None:
    from repository.services.promotion import model_version_promote

    retrying(lambda: model_version_promote(version=version, actor=version.uploaded_by))


def retrying(change: Any) -> Any:
    """Run a registry write, retrying while SQLite's test database is locked by the replica's
    reader thread (PostgreSQL never needs this)."""
    from django.db import OperationalError, transaction

    for _ in range(50):
        try:
            with transaction.atomic():
                return change()
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.05)
    return change()


def registry_settings(tmp_path: Path) -> ServingSettings:
    return ServingSettings(
        model_repository=None, host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=-1,
        cache_dir=tmp_path / "cache", registry_poll_s=0.2, heartbeat_interval_s=0.3,
        exit_timeout_s=5.0, cpu_count=1, replica_id="replica-test",
        redis_url=os.environ.get("REDIS_URL", ""), inference_auth="off",
    )  # fmt: skip


def wait_for(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


class ClientLoop:
    """Unversioned requests in a loop on a thread; records each answering version or failure."""

    def __init__(self, url: str, model: str, transport: str = "http") -> None:
        self.url, self.model, self.transport = url, model, transport
        self.versions: list[str] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> ClientLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import tritonclient.grpc as grpcclient

        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        module: Any = grpcclient if self.transport == "grpc" else httpclient
        client = module.InferenceServerClient(self.url)
        tensor = module.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(x)
        while not self._stop.is_set():
            try:
                result = client.infer(self.model, [tensor])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
                response = result.get_response()
                version = response.model_version if self.transport == "grpc" else response[
                    "model_version"]  # fmt: skip
                self.versions.append(version)
            except BaseException as exc:  # noqa: BLE001 - asserted by the test
                self.failures.append(exc)

    def wait_for_version(self, version: str, then_at_least: int = 20) -> None:
        wait_for(lambda: self.versions[-1:] == [version])
        count = len(self.versions)
        wait_for(lambda: len(self.versions) >= count + then_at_least)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_promote_and_rollback_drop_no_request(tmp_path: Path, transport: str) -> None:
    from repository import facade
    from repository.services.promotion import model_rollback

    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    v2 = registry_version("ident", 2, onnx, config)
    promote(v1)
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_metadata("ident")["versions"] == ["1"]
        url = server.grpc_url if transport == "grpc" else server.http_url
        with ClientLoop(url, "ident", transport) as loop:
            loop.wait_for_version("1")
            promote(v2)
            loop.wait_for_version("2")
            rollback_at = len(loop.versions)
            retrying(lambda: model_rollback(model=v1.model, actor=v1.uploaded_by))
            loop.wait_for_version("1")
        assert loop.failures == [], loop.failures[:3]
        first_v2 = loop.versions.index("2")
        assert set(loop.versions[:first_v2]) == {"1"}
        assert set(loop.versions[first_v2:rollback_at]) == {"2"}
        back = loop.versions.index("1", rollback_at)
        assert set(loop.versions[back:]) == {"1"}

        serving_v1 = {"model": "ident", "version": 1, "state": "READY", "reason": ""}

        def heartbeat() -> Any:
            mine = [r for r in facade.live_replicas() if r.replica_id == "replica-test"]
            return mine[0] if mine and serving_v1 in mine[0].versions else None

        wait_for(heartbeat)
        assert heartbeat().http_url.endswith(f":{server.ports.http}")


def test_loadable_version_is_loaded_when_addressed(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    registry_version("ident", 2, onnx, config)
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        x = np.ones((1, 2), dtype=np.float32)
        result = client.infer("ident", [identity_input(x)], model_version="2")
        assert result.get_response()["model_version"] == "2"
        assert client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "1"
        with pytest.raises(InferenceServerException, match="version 3 is not found"):
            client.infer("ident", [identity_input(x)], model_version="3")


def test_previously_promoted_version_loads_again_when_addressed(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    v2 = registry_version("ident", 2, onnx, config)
    promote(v1)
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        x = np.ones((1, 2), dtype=np.float32)
        promote(v2)
        wait_for(
            lambda: (
                client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "2"
            )
        )
        result = client.infer("ident", [identity_input(x)], model_version="1")  # was unloaded
        assert result.get_response()["model_version"] == "1"
        assert client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "2"


def test_corrupt_blob_is_refused_and_the_old_version_keeps_serving(tmp_path: Path) -> None:
    from repository.blobs import blob_name, blob_storage

    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    promote(v1)
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        bad_onnx = onnx + b"\x00"  # a different blob, then damaged in storage
        v2 = retrying(lambda: registry_version("ident", 2, bad_onnx, config))
        sha = v2.files.get().blob_id
        with blob_storage().open(blob_name(sha), "wb") as damaged:
            damaged.write(b"not what was uploaded")
        promote(v2)

        def reported() -> bool:
            index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
            return "corrupt" in index.get(("ident", "2"), {}).get("reason", "")

        wait_for(reported)
        x = np.ones((1, 2), dtype=np.float32)
        assert client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "1"
        assert not (tmp_path / "cache" / "blobs" / sha).exists()


def listening(caplog: pytest.LogCaptureFixture, on: str) -> bool:
    """Whether the replica has said it listens for revisions ``on`` Redis or PostgreSQL."""
    return any(r.getMessage() == f"listening for revisions on {on}" for r in caplog.records)


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis pub/sub")
def test_redis_revision_message_wakes_the_replica_before_the_next_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import dataclasses

    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    v2 = registry_version("ident", 2, onnx, config)
    promote(v1)
    settings = dataclasses.replace(registry_settings(tmp_path), registry_poll_s=120.0)
    with ServingProcess(settings) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        x = np.ones((1, 2), dtype=np.float32)
        wait_for(lambda: listening(caplog, "Redis"), timeout_s=15)  # or it misses v2
        promote(v2)
        wait_for(
            lambda: (
                client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "2"
            ),
            timeout_s=15,
        )


def test_postgres_notify_wakes_the_replica_without_redis(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import dataclasses

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL LISTEN/NOTIFY")
    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    v2 = registry_version("ident", 2, onnx, config)
    promote(v1)
    settings = dataclasses.replace(registry_settings(tmp_path), registry_poll_s=120.0, redis_url="")
    with ServingProcess(settings) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        x = np.ones((1, 2), dtype=np.float32)
        wait_for(lambda: listening(caplog, "PostgreSQL"), timeout_s=15)  # or it misses v2
        promote(v2)
        wait_for(
            lambda: (
                client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "2"
            ),
            timeout_s=15,
        )


def test_imported_demo_ensemble_serves_once_its_composing_models_load(  # type: ignore[no-untyped-def]
    tmp_path: Path, registry_admin
) -> None:
    from django.core.management import call_command

    dm.write_demo_repository(tmp_path / "demo")
    demo, vouch = str(tmp_path / "demo"), registry_admin.username  # its Python code needs one
    retrying(lambda: call_command("import_repository", demo, sync=True, approved_by=vouch))
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("pipeline")
        x = np.random.default_rng(0).random((2, dm.DEMO_FEATURES), dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        through_ensemble = client.infer("pipeline", [tensor]).as_numpy("OUTPUT0")
        normalised = client.infer("preprocess", [tensor]).as_numpy("OUTPUT0")
        step = httpclient.InferInput("INPUT0", list(normalised.shape), "FP32")
        step.set_data_from_numpy(normalised)
        by_hand = client.infer("mlp", [step]).as_numpy("OUTPUT0")
        np.testing.assert_allclose(through_ensemble, by_hand, rtol=1e-5)


def on_demand_settings(tmp_path: Path, **overrides: Any) -> ServingSettings:
    return dataclasses.replace(registry_settings(tmp_path), **overrides)


def version_rows(client: httpclient.InferenceServerClient) -> dict[str, dict[str, Any]]:
    return {m["version"]: m for m in client.get_model_repository_index() if "version" in m}


def test_failed_on_demand_load_does_not_block_later_promotions(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    registry_version("ident", 2, b"not an onnx model", config)
    v3 = registry_version("ident", 3, onnx, config)
    promote(v1)
    with ExitStack() as stack, ServingProcess(registry_settings(tmp_path)) as server:
        client = stack.enter_context(closing(httpclient.InferenceServerClient(server.http_url)))
        x = np.ones((1, 2), dtype=np.float32)
        with pytest.raises(InferenceServerException):
            client.infer("ident", [identity_input(x)], model_version="2")
        promote(v3)
        wait_for(
            lambda: (
                client.infer("ident", [identity_input(x)]).get_response()["model_version"] == "3"
            )
        )


def test_on_demand_versions_are_capped_with_the_least_recently_used_evicted(
    tmp_path: Path,
) -> None:
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    for number in (2, 3, 4):
        registry_version("ident", number, onnx, config)
    settings = on_demand_settings(tmp_path, on_demand_max_versions=2)
    with ExitStack() as stack, ServingProcess(settings) as server:
        client = stack.enter_context(closing(httpclient.InferenceServerClient(server.http_url)))
        x = np.ones((1, 2), dtype=np.float32)
        for number in ("2", "3", "2", "4"):  # 3 is then the least recently used
            result = client.infer("ident", [identity_input(x)], model_version=number)
            assert result.get_response()["model_version"] == number
            time.sleep(0.01)  # distinct last-use times (they are kept in milliseconds)
        rows = version_rows(client)
        assert {v: rows[v]["state"] for v in ("1", "2", "3", "4")} == {
            "1": "READY", "2": "READY", "3": "UNAVAILABLE", "4": "READY",
        }  # fmt: skip
        assert rows["3"]["reason"] == "unloaded"
        result = client.infer("ident", [identity_input(x)], model_version="3")  # loads again
        assert result.get_response()["model_version"] == "3"
        assert version_rows(client)["2"]["state"] == "UNAVAILABLE"


def test_idle_on_demand_version_is_unloaded(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    registry_version("ident", 2, onnx, config)
    settings = on_demand_settings(tmp_path, on_demand_idle_s=0.3)
    with ExitStack() as stack, ServingProcess(settings) as server:
        client = stack.enter_context(closing(httpclient.InferenceServerClient(server.http_url)))
        x = np.ones((1, 2), dtype=np.float32)
        client.infer("ident", [identity_input(x)], model_version="2")
        wait_for(lambda: version_rows(client)["2"]["state"] == "UNAVAILABLE")
        assert version_rows(client)["1"]["state"] == "READY"
        result = client.infer("ident", [identity_input(x)], model_version="2")
        assert result.get_response()["model_version"] == "2"


def test_on_demand_loading_off_refuses_unloaded_versions(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    registry_version("ident", 2, onnx, config)
    settings = on_demand_settings(tmp_path, on_demand_max_versions=0)
    with ExitStack() as stack, ServingProcess(settings) as server:
        client = stack.enter_context(closing(httpclient.InferenceServerClient(server.http_url)))
        x = np.ones((1, 2), dtype=np.float32)
        with pytest.raises(InferenceServerException, match="version 2 is not found"):
            client.infer("ident", [identity_input(x)], model_version="2")
