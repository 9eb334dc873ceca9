"""A load test of an unpromoted version runs on a private serving process of its own: the
registry's serving replica, which serves the promoted version, sees none of its requests."""

from __future__ import annotations

import time

import httpx
import pytest

from repository.demo_models import DEMO_FEATURES, write_onnx_mlp
from tests.console.api.test_end_to_end import create_token, upload_and_wait, wait_for, zipped
from tests.console.browser.conftest import _start, _subprocess_env
from tests.ports import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

ROW = [
    {
        "name": "INPUT0",
        "datatype": "FP32",
        "shape": [1, DEMO_FEATURES],
        "data": [0.25] * DEMO_FEATURES,
    }
]


def promoted_stats(serving_url: str) -> dict:  # type: ignore[type-arg]
    body = httpx.get(f"{serving_url}/v2/models/mlp/stats", timeout=10).json()
    return {s["version"]: s for s in body["model_stats"]}


def test_load_test_of_an_unpromoted_version_leaves_the_promoted_statistics_untouched(
    live_worker, worker_queue, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    client = create_token("tester", "deployer")
    for number in (1, 2):
        folder = write_onnx_mlp(tmp_path / f"v{number}", "mlp", 1, max_batch_size=64)
        assert upload_and_wait(client, "mlp", {"archive": zipped(folder)})["state"] == "ready"
    assert client.post("/api/models/mlp/versions/1/promote/").status_code == 200

    http = free_port()
    serving_url = f"http://127.0.0.1:{http}"
    env = _subprocess_env(
        worker_queue,
        SERVING_REGISTRY_POLL_SECS="0.5",
        SERVING_CACHE_DIR=str(tmp_path / "cache"),
        PORTICO_INFERENCE_AUTH="off",  # statistics are under test here; tokens have their own tests
    )
    replica = _start(
        "serving",
        ["serve", "--http-port", str(http), "--grpc-port", "-1", "--metrics-port", "-1"],
        env,
        tmp_path,
        f"{serving_url}/v2/health/live",
    )
    try:
        deadline = time.monotonic() + 60
        while httpx.get(f"{serving_url}/v2/models/mlp/versions/1/ready").status_code != 200:
            assert time.monotonic() < deadline, replica.output()[-3000:]
            time.sleep(0.3)
        served = httpx.post(f"{serving_url}/v2/models/mlp/infer", json={"inputs": ROW})
        assert served.status_code == 200, served.text
        before = promoted_stats(serving_url)
        assert before["1"]["inference_count"] == 1

        started = client.post(
            "/api/models/mlp/versions/2/loadtests/",
            {"mode": "concurrency", "concurrency": 2, "duration_s": 1.0, "inputs": ROW},
            format="json",
        )
        assert started.status_code == 202, started.json()
        job = wait_for(
            client,
            started.json()["url"],
            lambda b: b["state"] in ("succeeded", "failed", "cancelled"),
        )
        assert job["state"] == "succeeded", (job["error"], live_worker.output()[-3000:])
        assert job["result"]["requests"] > 10 and job["result"]["errors"] == 0
        assert job["result"]["batch_sizes"] and job["result"]["p95_ms"] > 0

        assert promoted_stats(serving_url) == before
    finally:
        replica.stop()
