"""The server core's lifecycle rules, with the real schedulers over tiny in-test instances."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serving.backends.base import ExecuteResult, InstancePlacement, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.server import InferenceServer, VersionPlan
from serving.core.types import InferRequest, InferResponse
from serving.errors import InvalidArgumentError, NotFoundError, ServingError, UnavailableError
from serving.settings import ServingSettings

pytestmark = pytest.mark.embedded


class EchoInstance(ModelInstance):
    """Returns its input as OUTPUT0 after ``delay_s``; fails to load when the version is 13."""

    delay_s = 0.0
    unloaded: list[tuple[str, int]] = []

    def load(self) -> None:
        if self.spec.version == 13:
            raise UnavailableError("version 13 never loads")

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        time.sleep(self.delay_s)
        return [
            InferResponse(self.spec.name, self.spec.version, {"OUTPUT0": r.inputs["INPUT0"]})
            for r in requests
        ]

    def unload(self) -> None:
        EchoInstance.unloaded.append((self.spec.name, self.spec.version))


def spec(version: int, name: str = "echo") -> ModelSpec:
    config = mc.ModelConfig(name=name, backend="echo", max_batch_size=4)
    config.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[-1])
    config.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[-1])
    return ModelSpec(
        name, version, config, Path("/nonexistent"), Path("/nonexistent") / str(version)
    )


def echo_instances(model: ModelSpec) -> list[ModelInstance]:
    instance = EchoInstance(model, InstancePlacement("echo", "KIND_CPU"))
    instance.load()
    return [instance]


def make_server(**settings: object) -> InferenceServer:
    values: dict[str, object] = {"model_repository": Path("."), "exit_timeout_s": 5.0}
    values.update(settings)
    return InferenceServer(
        ServingSettings(**values),  # type: ignore[arg-type]
        instance_factory=echo_instances,
        warmup=lambda s, i: None,
    )


def request(version: int | None = None, name: str = "echo") -> InferRequest:
    return InferRequest(name, {"INPUT0": np.ones((1, 2), np.float32)}, model_version=version)


@pytest.fixture(autouse=True)
def fast_instances() -> None:
    EchoInstance.delay_s = 0.0
    EchoInstance.unloaded = []


async def test_default_version_is_highest_ready_unless_pinned() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1)), VersionPlan(spec(2))])
    assert (await server.infer(request())).model_version == 2
    assert (await server.infer(request(1))).model_version == 1
    await server.apply_model(
        "echo", [VersionPlan(spec(1)), VersionPlan(spec(2))], default_version=1
    )
    assert (await server.infer(request())).model_version == 1
    await server.shutdown()


async def test_swap_lets_in_flight_requests_on_the_old_version_finish() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1), "a")])
    EchoInstance.delay_s = 0.3
    in_flight = asyncio.create_task(server.infer(request()))
    await asyncio.sleep(0.05)
    await server.apply_model("echo", [VersionPlan(spec(2), "b")])
    assert (await in_flight).model_version == 1  # answered, not dropped
    assert ("echo", 1) in EchoInstance.unloaded
    assert (await server.infer(request())).model_version == 2
    assert server.index()[0] == {"name": "echo", "version": "1", "state": "UNAVAILABLE",
                                 "reason": "unloaded"}  # fmt: skip
    with pytest.raises(UnavailableError, match="version 1 is not at ready state"):
        await server.infer(request(1))
    await server.shutdown()


async def test_same_version_with_new_fingerprint_is_reloaded_next_to_the_old() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1), "a")])
    old = server.models["echo"].versions[1]
    await server.apply_model("echo", [VersionPlan(spec(1), "a")])
    assert server.models["echo"].versions[1] is old  # unchanged: kept
    await server.apply_model("echo", [VersionPlan(spec(1), "b")])
    assert server.models["echo"].versions[1] is not old
    assert EchoInstance.unloaded == [("echo", 1)]
    await server.shutdown()


async def test_failed_load_changes_nothing_and_is_reported_per_version() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1))])
    with pytest.raises(InvalidArgumentError) as info:
        await server.apply_model("echo", [VersionPlan(spec(13)), VersionPlan(spec(14))])
    assert info.value.message == (
        "failed to load 'echo', version 13 is at UNAVAILABLE state: version 13 never loads;"
    )
    assert ("echo", 14) in EchoInstance.unloaded  # all-or-nothing: the good one was released
    assert (await server.infer(request())).model_version == 1
    rows = {row["version"]: row for row in server.index()}
    assert rows["13"]["state"] == "UNAVAILABLE" and rows["13"]["reason"] == "version 13 never loads"
    assert "14" not in rows
    assert not server.ready  # strict readiness: a known version is not READY
    await server.shutdown()


async def test_readiness_rules() -> None:
    strict = make_server()
    assert strict.ready  # no models at all
    await strict.apply_model("echo", [VersionPlan(spec(1))])
    assert strict.ready and strict.model_ready("echo", None)
    await strict.unload_model("echo")
    assert strict.ready  # unloaded on purpose does not count
    assert not strict.model_ready("echo", None)
    with pytest.raises(NotFoundError, match="has no available versions"):
        await strict.infer(request())
    strict.record_model_failure("broken", "config.pbtxt: bad")
    assert not strict.ready
    assert {"name": "broken", "state": "UNAVAILABLE", "reason": "config.pbtxt: bad"} in (
        strict.index()
    )
    lenient = make_server(strict_readiness=False)
    lenient.record_model_failure("broken", "config.pbtxt: bad")
    assert lenient.ready
    strict.shutting_down = True
    assert not strict.ready and not strict.live


async def test_request_checks_use_triton_texts() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1))])
    with pytest.raises(
        InvalidArgumentError, match="Request for unknown model: 'nope' is not found"
    ):
        await server.infer(request(name="nope"))
    with pytest.raises(NotFoundError, match="'echo' version 7 is not found"):
        await server.infer(request(7))
    bad = InferRequest("echo", {"INPUT0": np.ones((5, 2), np.float32)})
    with pytest.raises(InvalidArgumentError, match="batch-size must be <= 4 for 'echo'"):
        await server.infer(bad)
    bad = InferRequest("echo", {"INPUT0": np.ones((1, 2), np.int32)})
    with pytest.raises(ServingError, match="data-type is 'INT32', but model 'echo' expects 'FP32'"):
        await server.infer(bad)
    stats = server.statistics("echo")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 2
    await server.shutdown()


async def test_concurrent_requests_during_repeated_swaps_all_succeed() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(1))])
    EchoInstance.delay_s = 0.002
    failures: list[BaseException] = []
    done = asyncio.Event()

    async def client() -> None:
        while not done.is_set():
            try:
                await server.infer(request())
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

    clients = [asyncio.create_task(client()) for _ in range(4)]
    for version in range(2, 7):
        await server.apply_model("echo", [VersionPlan(spec(version))])
    done.set()
    await asyncio.gather(*clients)
    assert failures == []
    await server.shutdown()


async def test_load_version_keeps_the_others_and_unload_takes_one_version() -> None:
    server = make_server()
    await server.load_version(spec(1))
    await server.load_version(spec(2))
    assert [lv.version for lv in server.models["echo"].ready_versions()] == [1, 2]
    await server.load_version(spec(1), make_default=True)
    assert (await server.infer(request())).model_version == 1
    await server.unload("echo", 1)
    assert (await server.infer(request())).model_version == 2
    await server.unload("echo")
    assert server.models["echo"].ready_versions() == []


async def test_loaded_versions_lists_serving_versions_in_order() -> None:
    server = make_server()
    await server.apply_model("echo", [VersionPlan(spec(2)), VersionPlan(spec(1))])
    await server.apply_model("zeta", [VersionPlan(spec(1, "zeta"))])
    assert [(lv.name, lv.version) for lv in server.loaded_versions()] == [
        ("echo", 1), ("echo", 2), ("zeta", 1)]  # fmt: skip
    await server.unload("echo", 1)
    assert [(lv.name, lv.version) for lv in server.loaded_versions()][0] == ("echo", 2)
    await server.shutdown()
