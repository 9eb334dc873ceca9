"""A client that hangs up before its answer: a still-queued request never runs and counts as
cancelled, and the request executing next to it is unharmed."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from tests.serving.harness import serving

pytestmark = pytest.mark.embedded


def _sleep_input(value: float) -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    return tensor


def test_disconnected_client_request_is_dropped_from_the_queue(tmp_path: Path) -> None:
    config = dm.python_sleep_config("slow", max_batch_size=1, dims=(4,), execute_delay_ms=0)
    dm.write_python_model(tmp_path, "slow", dm.PYTHON_SLEEP, config)
    with serving(tmp_path) as process:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{process.ports.http}",
                                                  concurrency=2)  # fmt: skip
        busy = client.async_infer("slow", [_sleep_input(0)], parameters={"execute_delay_ms": 800})
        time.sleep(0.2)  # the busy request holds the only instance
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]}).encode()  # fmt: skip
        with socket.create_connection(("127.0.0.1", process.ports.http)) as hung_up:
            hung_up.sendall(
                b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: test\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            time.sleep(0.2)  # queued behind the busy one
        result = busy.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.zeros((1, 4), np.float32))
        time.sleep(0.5)  # past the time the dropped request would have run
        stats = client.get_inference_statistics("slow")["model_stats"][0]
        assert stats["execution_count"] == 1
        assert stats["inference_stats"]["fail"]["count"] == 1
        client.close()
