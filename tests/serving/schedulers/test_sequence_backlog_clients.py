"""The sequence backlog seen from real clients: one who hangs up while waiting leaves nothing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from tests.serving.harness import serving, wait_until
from tests.serving.schedulers.test_sequence_null_requests import TOTALS

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

ONE_SLOT = """
backend: "python" max_batch_size: 1
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
instance_group { count: 1 kind: KIND_CPU }
sequence_batching { max_sequence_idle_microseconds: 60000000 }
"""


def infer(client: httpclient.InferenceServerClient, corrid: int, **flags: bool) -> int:
    tensor = httpclient.InferInput("IN", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    result = client.infer("one_slot", [tensor], sequence_id=corrid, **flags)
    return int(result.as_numpy("OUT")[0, 0])


def failures(client: httpclient.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("one_slot")["model_stats"][0]
    return int(stats["inference_stats"]["fail"]["count"])


def test_a_client_that_hangs_up_in_the_backlog_leaves_the_slot_free(tmp_path: Path) -> None:
    dm.write_python_model(tmp_path, "one_slot", TOTALS, ONE_SLOT)
    with serving(tmp_path) as process:
        client = httpclient.InferenceServerClient(process.http_url, network_timeout=60)
        try:
            assert infer(client, 1, sequence_start=True) == 1  # holds the only slot
            body = json.dumps({
                "parameters": {"sequence_id": 2, "sequence_start": True},
                "inputs": [{"name": "IN", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
            }).encode()  # fmt: skip
            with socket.create_connection(("127.0.0.1", process.ports.http)) as hung_up:
                hung_up.sendall(
                    b"POST /v2/models/one_slot/infer HTTP/1.1\r\nHost: test\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % len(body)
                    + body
                )
                # The START reaches the backlog, then its client hangs up.
                scheduler = process.server.resolve("one_slot", None).scheduler
                wait_until(lambda: scheduler is not None and scheduler.backlog_length == 1)
            wait_until(lambda: failures(client) > 0)  # counted as cancelled once noticed
            assert infer(client, 1, sequence_end=True) == 2  # frees the slot
            # Before the fix the slot went to the abandoned sequence and this START waited for
            # ever behind it.
            assert infer(client, 3, sequence_start=True, sequence_end=True) == 1
        finally:
            client.close()
