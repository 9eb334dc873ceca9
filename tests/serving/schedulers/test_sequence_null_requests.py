"""Padding in the sequence batcher, seen by real Python models through tritonclient.

A direct-strategy batch pads empty slots with Triton's null request. Models in the wild often key
their state by ``request.correlation_id()`` without reading READY, and decoupled models often
answer every request they get: neither may be able to reach a real sequence through a padding slot.
"""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import folder_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

# A running total per correlation id; READY is never read.
TOTALS = textwrap.dedent("""\
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.totals = {}

        def execute(self, requests):
            responses = []
            for request in requests:
                key = request.correlation_id()
                value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().sum())
                self.totals[key] = self.totals.get(key, 0) + value
                out = np.array([[self.totals[key]]], dtype=np.int32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
            return responses
""")

# Decoupled: one response for every request it is given (IN, or -1 where READY is 0), then the
# final flag.
ECHO = textwrap.dedent("""\
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
                out = pb_utils.Tensor("OUT", np.where(ready > 0, value, -1).astype(np.int32))
                request.get_response_sender().send(
                    pb_utils.InferenceResponse([out]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
""")


def sequence_config(strategy: str, *, decoupled: bool = False) -> str:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return f"""
backend: "python" max_batch_size: 2
input {{ name: "IN" data_type: TYPE_INT32 dims: [1] }}
output {{ name: "OUT" data_type: TYPE_INT32 dims: [1] }}
instance_group {{ count: 1 kind: KIND_CPU }}
sequence_batching {{
  {strategy}
  max_sequence_idle_microseconds: 60000000
  control_input {{ name: "READY"
    control {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] }} }}
}}
{policy}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("sequence_null")
    dm.write_python_model(repo, "totals_direct", TOTALS, sequence_config("direct {}"))
    oldest = sequence_config("oldest { max_candidate_sequences: 2 }")
    dm.write_python_model(repo, "totals_oldest", TOTALS, oldest)
    echo = sequence_config("direct {}", decoupled=True)
    dm.write_python_model(repo, "echo_direct", ECHO, echo)
    process = ServingProcess(folder_settings(repo)).start()
    yield process
    process.stop()


def tensor(value: int) -> grpcclient.InferInput:
    data = grpcclient.InferInput("IN", [1, 1], "INT32")
    data.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return data


@pytest.mark.parametrize("model", ["totals_direct", "totals_oldest"])
def test_a_model_keyed_by_correlation_id_keeps_each_sequence_own_state(
    server: ServingProcess, model: str
) -> None:
    totals: dict[int, list[int]] = {1: [], 2: []}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for step in range(3):  # one request at a time, the two sequences taking turns
            for corrid, value in ((1, 1), (2, 10)):
                result = client.infer(
                    model, [tensor(value)], sequence_id=corrid, sequence_start=step == 0,
                    sequence_end=step == 2,
                )  # fmt: skip
                totals[corrid].append(int(result.as_numpy("OUT")[0, 0]))
        stats = client.get_inference_statistics(model, as_json=True)
    assert totals == {1: [1, 2, 3], 2: [10, 20, 30]}
    executions = int(stats["model_stats"][0]["execution_count"])
    inferences = int(stats["model_stats"][0]["inference_count"])
    assert inferences == 6
    if model == "totals_oldest":
        assert executions == 6  # never padded: each batch holds exactly the ready requests


def test_a_decoupled_model_answering_padding_slots_reaches_no_real_stream(
    server: ServingProcess,
) -> None:
    answers: queue.SimpleQueue[tuple[str, list[int], str]] = queue.SimpleQueue()

    def collect(result: Any, error: Any) -> None:
        if error is not None:
            answers.put(("", [], error.message()))
            return
        answers.put((result.get_response().id, result.as_numpy("OUT").ravel().tolist(), ""))

    received: list[tuple[str, list[int], str]] = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=collect)
        plan = [("a1", 1, 1, True), ("b1", 2, 20, True), ("b2", 2, 21, False),
                ("b3", 2, 22, False), ("a2", 1, 2, False)]  # fmt: skip
        for rid, corrid, value, start in plan:
            client.async_stream_infer(
                "echo_direct", [tensor(value)], request_id=rid, sequence_id=corrid,
                sequence_start=start,
            )  # fmt: skip
            received.append(answers.get(timeout=60))  # one at a time: b's requests get padded
        client.stop_stream()
    while not answers.empty():
        received.append(answers.get())
    assert received == [("a1", [1], ""), ("b1", [20], ""), ("b2", [21], ""), ("b3", [22], ""),
                        ("a2", [2], "")]  # fmt: skip
