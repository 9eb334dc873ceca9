"""A client that hangs up before its answer: a still-queued request never runs and counts as
cancelled, and the request executing next to it is unharmed."""

from __future__ import annotations

import functools
import json
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import gevent
import numpy as np
import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, serving

pytestmark = pytest.mark.embedded


def _sleep_input(value: float) -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    return tensor


@pytest.mark.parametrize("http_workers", HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def test_disconnected_client_request_is_dropped_from_the_queue(
    tmp_path: Path, http_workers: int
) -> None:
    config = dm.python_sleep_config("slow", max_batch_size=1, dims=(4,), execute_delay_ms=0)
    dm.write_python_model(tmp_path, "slow", dm.PYTHON_SLEEP, config)
    with serving(tmp_path, http_workers=http_workers) as process:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{process.ports.http}",
                                                  concurrency=2)  # fmt: skip
        queued = functools.partial(_queue_depth, process.ports.metrics)
        # NOTE: both are slow: the two connections may deliver them in either order, and a quick
        # one running first would leave the queue holding one request too briefly to be seen.
        # 3 s each: on a loaded machine the second may reach the queue well after the first.
        slow = {"execute_delay_ms": 3000}
        busy = client.async_infer("slow", [_sleep_input(0)], parameters=slow)
        filler = client.async_infer("slow", [_sleep_input(0)], parameters=slow)
        # One of the two holds the only instance, the other waits: the queue is known to be busy.
        _wait_until(lambda: queued() == 1)
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]}).encode()  # fmt: skip
        with socket.create_connection(("127.0.0.1", process.ports.http)) as hung_up:
            hung_up.sendall(
                b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: test\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            _wait_until(lambda: queued() == 2)  # queued behind the other two
        for result in (busy.get_result(), filler.get_result()):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.zeros((1, 4), np.float32))
        _wait_until(lambda: queued() == 0)
        stats = client.get_inference_statistics("slow")["model_stats"][0]
        assert stats["execution_count"] == 2
        assert stats["inference_stats"]["fail"]["count"] == 1
        client.close()


def _queue_depth(metrics_port: int, model: str = "slow") -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return -1


def _wait_until(predicate: Callable[[], bool], deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {deadline_s} s"
        # NOTE: gevent's sleep, not time's: tritonclient's HTTP client sends async_infer from a
        # greenlet, which runs only while this thread waits in gevent (a CI run saw the queue
        # stay empty for 60 s: the requests had not gone out).
        gevent.sleep(0.01)
