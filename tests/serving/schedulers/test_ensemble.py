"""Ensembles on a real InferenceServer: dataflow, parallel branches, failures, validation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

from serving.core.model_spec import ModelSpec
from serving.core.server import InferenceServer, VersionPlan
from serving.core.types import InferRequest
from serving.errors import ServingError
from serving.schedulers.ensemble import EnsembleScheduler
from serving.settings import ServingSettings
from tests.serving.schedulers.fakes import FunctionInstance, make_spec

pytestmark = pytest.mark.embedded

Fn = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def unary(name: str, *, dims: str = "[4]", dtype: str = "TYPE_FP32") -> str:
    return (
        f'name: "{name}" backend: "python" max_batch_size: 8 '
        f'input {{ name: "X" data_type: {dtype} dims: {dims} }} '
        f'output {{ name: "Y" data_type: {dtype} dims: {dims} }}'
    )


SUM = (
    'name: "sum" backend: "python" max_batch_size: 8 '
    'input { name: "A" data_type: TYPE_FP32 dims: [4] } '
    'input { name: "B" data_type: TYPE_FP32 dims: [4] } '
    'output { name: "S" data_type: TYPE_FP32 dims: [4] }'
)

DIAMOND = """
name: "ens" platform: "ensemble" max_batch_size: 8
input { name: "IN" data_type: TYPE_FP32 dims: [4] }
output { name: "OUT" data_type: TYPE_FP32 dims: [4] }
ensemble_scheduling {
  step { model_name: "sum" model_version: -1
         input_map { key: "A" value: "plus" } input_map { key: "B" value: "twice" }
         output_map { key: "S" value: "OUT" } }
  step { model_name: "add_one" model_version: -1
         input_map { key: "X" value: "IN" } output_map { key: "Y" value: "plus" } }
  step { model_name: "double" model_version: 1
         input_map { key: "X" value: "IN" } output_map { key: "Y" value: "twice" } }
}
"""


class Models:
    """The composing models' behaviour and delay, looked up by the instance factory."""

    def __init__(self) -> None:
        self.fns: dict[str, Fn] = {
            "add_one": lambda i: {"Y": i["X"] + 1},
            "double": lambda i: {"Y": i["X"] * 2},
            "sum": lambda i: {"S": i["A"] + i["B"]},
        }
        self.delay_s: dict[str, float] = {}

    def instances(self, spec: ModelSpec) -> list[FunctionInstance]:
        if spec.config.platform == "ensemble":
            return []
        return [FunctionInstance(spec, self.fns[spec.name], delay_s=self.delay_s.get(spec.name, 0))]


async def server_with(models: Models, *configs: str) -> InferenceServer:
    server = InferenceServer(
        ServingSettings(model_repository=None, exit_timeout_s=2),
        instance_factory=models.instances,
        warmup=lambda spec, instances: None,
    )
    for text in configs:
        spec = make_spec(text)
        await server.apply_model(spec.name, [VersionPlan(spec)])
    return server


def ens_request(value: float = 1.0) -> InferRequest:
    data = np.full((2, 4), value, dtype=np.float32)
    return InferRequest(model_name="ens", inputs={"IN": data}, id="e1")


async def test_ensemble_runs_steps_as_dataflow_and_returns_its_outputs() -> None:
    server = await server_with(Models(), unary("add_one"), unary("double"), SUM, DIAMOND)
    response = await server.infer(ens_request(3.0))
    assert response.id == "e1" and list(response.outputs) == ["OUT"]
    assert np.array_equal(response.outputs["OUT"], np.full((2, 4), 10.0, dtype=np.float32))
    stats = {m: server.resolve(m, None).statistics for m in ("ens", "add_one", "double", "sum")}
    assert stats["ens"].success.count == 1
    assert all(stats[m].success.count == 1 for m in ("add_one", "double", "sum"))
    assert stats["add_one"].inference_count == 2  # each step went through its own scheduler
    await server.shutdown()


async def test_independent_steps_run_in_parallel() -> None:
    # Each branch waits for the other: run one after the other, the first would wait out the
    # barrier's timeout and fail the request.
    models = Models()
    meet = threading.Barrier(2, timeout=10)
    for name in ("add_one", "double"):
        models.fns[name] = lambda i, fn=models.fns[name]: (meet.wait(), fn(i))[1]
    server = await server_with(models, unary("add_one"), unary("double"), SUM, DIAMOND)
    response = await server.infer(ens_request())
    assert np.array_equal(response.outputs["OUT"], np.full((2, 4), 4.0, dtype=np.float32))
    await server.shutdown()


async def test_step_error_fails_the_request_naming_the_ensemble_and_step() -> None:
    models = Models()

    def fail(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise ServingError("doubling is broken")

    models.fns["double"] = fail
    server = await server_with(models, unary("add_one"), unary("double"), SUM, DIAMOND)
    with pytest.raises(ServingError) as info:
        await server.infer(ens_request())
    assert info.value.message == ("in ensemble 'ens', step 2 (model 'double'): doubling is broken")
    assert server.resolve("ens", None).statistics.failures_by_reason["OTHER"] == 1
    assert server.resolve("sum", None).statistics.success.count == 0  # never reached
    await server.shutdown()


async def test_ensemble_load_fails_when_a_composing_model_is_not_loaded() -> None:
    server = await server_with(Models(), unary("add_one"), SUM)
    with pytest.raises(ServingError) as info:
        await server_with_more(server, DIAMOND)
    message = info.value.message
    assert "failed to load 'ens'" in message
    assert "ensemble_scheduling.step[2]: composing model 'double' is not loaded" in message
    await server.shutdown()


async def server_with_more(server: InferenceServer, text: str) -> None:
    spec = make_spec(text)
    await server.apply_model(spec.name, [VersionPlan(spec)])


async def test_ensemble_load_fails_on_mismatched_types_and_shapes() -> None:
    server = await server_with(
        Models(), unary("add_one", dtype="TYPE_INT32"), unary("double", dims="[5]"), SUM
    )
    with pytest.raises(ServingError) as info:
        await server_with_more(server, DIAMOND)
    message = info.value.message
    assert "tensor 'IN' is TYPE_INT32 in model 'add_one' but TYPE_FP32" in message
    expected = "tensor 'twice' has shape [-1, 4] in model 'sum' but [-1, 5] in model 'double'"
    assert expected in message
    await server.shutdown()


async def test_max_inflight_requests_bounds_each_step() -> None:
    models = Models()
    models.delay_s = {"add_one": 0.3, "double": 0.3}
    limited = DIAMOND.replace(
        "ensemble_scheduling {", "ensemble_scheduling { max_inflight_requests: 1"
    )
    server = await server_with(models, unary("add_one"), unary("double"), SUM, limited)
    scheduler = server.resolve("ens", None).scheduler
    assert isinstance(scheduler, EnsembleScheduler)
    tasks = [asyncio.create_task(server.infer(ens_request(float(i)))) for i in range(3)]
    await asyncio.sleep(0.1)
    assert scheduler.queue_depth == 4  # two requests wait at each of the two first steps
    responses = await asyncio.gather(*tasks)
    assert [float(r.outputs["OUT"][0, 0]) for r in responses] == [1.0, 4.0, 7.0]
    await server.shutdown()
