"""Per-model Prometheus metrics: Triton's names and labels, values matching what was sent."""

from __future__ import annotations

import asyncio
import re
import threading

import numpy as np
import pytest

from serving.core.model_spec import ModelSpec
from serving.core.server import InferenceServer, VersionPlan
from serving.core.types import InferRequest
from serving.errors import ServingError
from serving.observability.metrics import CONTENT_TYPE, render_metrics
from serving.settings import ServingSettings
from tests.serving.schedulers.fakes import RecordingInstance, make_spec

pytestmark = pytest.mark.embedded

BATCHED = """
name: "batched" backend: "python" max_batch_size: 8
input { name: "IN" data_type: TYPE_FP32 dims: [4] }
output { name: "OUT" data_type: TYPE_FP32 dims: [4] }
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [4] }
metric_tags { key: "team" value: "vision" }
"""
PLAIN = """
name: "plain" backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_FP32 dims: [4] }
output { name: "OUT" data_type: TYPE_FP32 dims: [4] }
"""
SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def samples(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for line in text.decode().splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        found[(match["name"], labels)] = float(match["value"])
    return found


def value(found: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return found[(name, frozenset(labels.items()))]


class Fleet:
    def __init__(self) -> None:
        self.instances: dict[str, RecordingInstance] = {}

    def create(self, spec: ModelSpec) -> list[RecordingInstance]:
        def fail(request: InferRequest) -> ServingError | None:
            return ServingError("negative") if float(request.inputs["IN"].flat[0]) < 0 else None

        instance = RecordingInstance(spec, fail_request=fail)
        self.instances[spec.name] = instance
        return [instance]


async def loaded(fleet: Fleet, *configs: str) -> InferenceServer:
    server = InferenceServer(
        ServingSettings(model_repository=None, exit_timeout_s=2),
        instance_factory=fleet.create,
        warmup=lambda spec, instances: None,
    )
    for text in configs:
        spec = make_spec(text)
        await server.apply_model(spec.name, [VersionPlan(spec)])
    return server


def req(model: str, value: float = 1.0, batch: int = 1) -> InferRequest:
    shape = (batch, 4) if model == "batched" else (4,)
    return InferRequest(model_name=model, inputs={"IN": np.full(shape, value, np.float32)})


async def test_series_exist_zeroed_from_load_and_vanish_on_unload() -> None:
    server = await loaded(Fleet(), BATCHED, PLAIN)
    found = samples(render_metrics(server))
    plain = {"model": "plain", "version": "1"}
    batched = {"model": "batched", "version": "1", "_team": "vision"}
    assert value(found, "nv_inference_request_success", **plain) == 0
    assert value(found, "nv_inference_request_success", **batched) == 0
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert value(found, "nv_inference_request_failure", **plain, reason=reason) == 0
    assert value(found, "nv_inference_pending_request_count", **plain) == 0
    assert value(found, "nv_model_load_duration_secs", **plain) >= 0
    assert value(found, "portico_batch_releases_total", **batched, reason="queue_delay") == 0
    unbatched = frozenset({**plain, "reason": "queue_delay"}.items())
    assert ("portico_batch_releases_total", unbatched) not in found
    await server.unload_model("plain")
    text = render_metrics(server).decode()
    assert 'model="plain"' not in text and 'model="batched"' in text
    await server.shutdown()
    assert 'model="batched"' not in render_metrics(server).decode()


async def test_metric_values_match_what_was_sent() -> None:
    fleet = Fleet()
    server = await loaded(fleet, BATCHED, PLAIN)
    # Four batch-1 requests reach the preferred size together; one batch-2 request and a
    # failing one are released by the queue delay.
    await asyncio.gather(*(server.infer(req("batched")) for _ in range(4)))
    results = await asyncio.gather(
        server.infer(req("batched", batch=2)),
        server.infer(req("batched", value=-1.0)),
        return_exceptions=True,
    )
    assert isinstance(results[1], ServingError)
    for _ in range(3):
        await server.infer(req("plain"))
    found = samples(render_metrics(server))
    batched = {"model": "batched", "version": "1", "_team": "vision"}
    plain = {"model": "plain", "version": "1"}
    assert value(found, "nv_inference_request_success", **batched) == 5
    assert value(found, "nv_inference_request_failure", **batched, reason="BACKEND") == 1
    assert value(found, "nv_inference_count", **batched) == 6  # 4 + 2, the failure excluded
    assert value(found, "nv_inference_exec_count", **batched) == 2
    assert value(found, "nv_inference_request_success", **plain) == 3
    assert value(found, "nv_inference_exec_count", **plain) == 3
    assert value(found, "portico_batch_releases_total", **batched, reason="preferred_size") == 1
    assert value(found, "portico_batch_releases_total", **batched, reason="queue_delay") == 1
    assert value(found, "portico_batch_executions_total", **batched, batch_size="4") == 1
    assert value(found, "portico_batch_executions_total", **batched, batch_size="3") == 1
    assert value(found, "portico_inference_request_duration_us_count", **plain) == 3
    assert value(found, "portico_inference_request_duration_us_bucket", **plain, le="+Inf") == 3
    queue_us = value(found, "nv_inference_queue_duration_us", **batched)
    assert queue_us >= 90_000  # two requests waited for the 100 ms delay
    assert value(found, "nv_inference_request_duration_us", **batched) >= queue_us
    assert value(found, "nv_inference_compute_infer_duration_us", **plain) > 0
    stats = server.resolve("batched", None).statistics
    assert value(found, "nv_inference_queue_duration_us", **batched) == stats.queue.ns / 1000
    await server.shutdown()


async def test_pending_request_count_is_live() -> None:
    fleet = Fleet()
    server = await loaded(fleet, PLAIN)
    instance = fleet.instances["plain"]
    instance.gate = threading.Event()
    tasks = [asyncio.create_task(server.infer(req("plain"))) for _ in range(3)]
    await asyncio.sleep(0.05)
    found = samples(render_metrics(server))
    assert value(found, "nv_inference_pending_request_count", model="plain", version="1") == 2
    instance.gate.set()
    await asyncio.gather(*tasks)
    found = samples(render_metrics(server))
    assert value(found, "nv_inference_pending_request_count", model="plain", version="1") == 0
    await server.shutdown()


async def test_counters_keep_triton_names_without_total_suffix() -> None:
    assert CONTENT_TYPE.startswith("text/plain")
    server = await loaded(Fleet(), PLAIN)
    text = render_metrics(server).decode()
    assert "# TYPE nv_inference_request_success counter" in text
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    assert "# TYPE portico_inference_queue_duration_us histogram" in text
    assert "nv_inference_request_success_total" not in text
    assert "nv_inference_count_total" not in text
    await server.shutdown()


async def test_metrics_port_serves_model_and_system_metrics_in_triton_format() -> None:
    from serving.protocol.http.metrics_app import MetricsApp

    server = await loaded(Fleet(), PLAIN)
    await server.infer(req("plain"))
    sent: list[dict] = []  # type: ignore[type-arg]

    async def send(message: dict) -> None:  # type: ignore[type-arg]
        sent.append(message)

    scope = {"type": "http", "path": "/metrics", "method": "GET"}
    await MetricsApp(server)(scope, None, send)
    assert sent[0]["status"] == 200
    text = sent[1]["body"].decode()
    assert 'nv_inference_request_success{model="plain",version="1"} 1.0' in text
    assert "# TYPE nv_inference_exec_count counter" in text
    assert "# TYPE nv_cpu_utilization gauge" in text
    await server.shutdown()


def test_text_format_keeps_client_library_families_as_they_are() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge

    from serving.observability.metrics import generate_text

    registry = CollectorRegistry()
    Counter("portico_things", "Things", ["who"], registry=registry).labels('a "b"\n').inc(2)
    Gauge("portico_level", "Level", registry=registry).set(float("inf"))
    text = generate_text(registry).decode()
    assert "# TYPE portico_things_total counter" in text
    assert 'portico_things_total{who="a \\"b\\"\\n"} 2.0' in text
    assert "portico_things_created" not in text
    assert "portico_level +Inf" in text
