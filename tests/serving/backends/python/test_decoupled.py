"""Decoupled Python models: any number of responses per request over gRPC ModelStreamInfer."""

from __future__ import annotations

import json
import queue
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.check import main as check_main
from serving.main import ServingProcess
from tests.serving.harness import folder_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

# Like Triton's repeat example: IN = [n] gets n responses OUT = [n*10 + i], then the final flag
# alone. Parameters: "fail" sends an error response; "raise" fails execute; "crash" kills the
# model's process; "until_cancelled" sends from a thread until the client goes away, and "report"
# answers 1 once the model has seen that; "defer" keeps the sender and returns; a later request
# with "release" answers the deferred one from a thread the model starts, after the deferred
# request's execute has long returned.
REPEAT = textwrap.dedent("""\
    import json
    import os
    import threading
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    def repeat(sender, n):
        for i in range(n):
            out = pb_utils.Tensor("OUT", np.array([n * 10 + i], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=FINAL)


    class TritonPythonModel:
        def initialize(self, args):
            self.deferred = []
            self.saw_cancel = threading.Event()

        def until_cancelled(self, sender):
            while not sender.is_cancelled():
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([7], dtype=np.int32))]))
                time.sleep(0.01)
            self.saw_cancel.set()
            sender.send(flags=FINAL)

        def execute(self, requests):
            for request in requests:
                params = json.loads(request.parameters())
                n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
                sender = request.get_response_sender()
                if params.get("crash"):
                    os._exit(3)
                if params.get("until_cancelled"):
                    threading.Thread(target=self.until_cancelled, args=(sender,)).start()
                    continue
                if params.get("report"):
                    seen = self.saw_cancel.wait(60)
                    out = pb_utils.Tensor("OUT", np.array([int(seen)], dtype=np.int32))
                    sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
                    continue
                if params.get("raise"):
                    raise pb_utils.TritonModelException("repeat blew up")
                if params.get("fail"):
                    sender.send(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("repeat refused")), flags=FINAL)
                elif params.get("defer"):
                    self.deferred.append((sender, n))
                elif params.get("release"):
                    jobs = self.deferred + [(sender, n)]
                    self.deferred = []
                    threading.Thread(target=lambda: [repeat(*job) for job in jobs]).start()
                else:
                    repeat(sender, n)
            return None
""")

REPEAT_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
instance_group { kind: KIND_CPU }
model_transaction_policy { decoupled: true }
"""

# Collects a decoupled model's responses through BLS: ``exec(decoupled=True)`` or, with the
# parameter "async", ``await async_exec(decoupled=True)``; OUT is every value received.
COLLECT = textwrap.dedent("""\
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            return [await self.collect(request) for request in requests]

        async def collect(self, request):
            params = json.loads(request.parameters())
            bls = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"], parameters=params)
            if params.get("async"):
                responses = await bls.async_exec(decoupled=True)
            else:
                responses = bls.exec(decoupled=True)
            values = []
            for response in responses:
                if response.has_error():
                    return pb_utils.InferenceResponse(error=response.error())
                values.extend(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy())
            return pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array(values, dtype=np.int32))])
""")

COLLECT_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [-1] }
instance_group { kind: KIND_CPU }
"""

Answer = tuple[str, list[int], bool, str]  # request id, OUT, triton_final_response, error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("decoupled")
    dm.write_python_model(repo, "repeat", REPEAT, REPEAT_CONFIG)
    dm.write_python_model(repo, "repeat_crash", REPEAT, REPEAT_CONFIG)  # only the crash test's
    dm.write_python_model(repo, "repeat_cancel", REPEAT, REPEAT_CONFIG)  # only the cancel test's
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    dm.write_python_model(repo, "collect", COLLECT, COLLECT_CONFIG)
    process = ServingProcess(folder_settings(repo)).start()
    yield process
    process.stop()


def stream(server: ServingProcess, requests: list[dict[str, Any]]) -> list[Answer]:
    """Send ``requests`` on one stream, close it, and return every answer in arrival order."""
    answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()

    def collect(result: Any, error: Any) -> None:
        if error is not None:
            answers.put(("", [], False, error.message()))
            return
        response = result.get_response()
        out = result.as_numpy("OUT")
        final = response.parameters["triton_final_response"].bool_param
        answers.put((response.id, [] if out is None else out.tolist(), final, ""))

    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=collect)
        for request in requests:
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([request.pop("n")], dtype=np.int32))
            client.async_stream_infer(request.pop("model", "repeat"), [tensor], **request)
        client.stop_stream()  # returns once the server has answered every request
    result = []
    while not answers.empty():
        result.append(answers.get())
    return result


def test_n_responses_for_input_n_then_the_final_flag_alone(server: ServingProcess) -> None:
    answers = stream(server, [{"n": 3, "request_id": "r", "enable_empty_final_response": True}])
    assert answers == [
        ("r", [30], False, ""),
        ("r", [31], False, ""),
        ("r", [32], False, ""),
        ("r", [], True, ""),
    ]


def test_the_flag_only_final_response_is_sent_only_when_asked(server: ServingProcess) -> None:
    answers = stream(server, [{"n": 2, "request_id": "r"}])
    assert answers == [("r", [20], False, ""), ("r", [21], False, "")]


def test_zero_responses_is_only_the_final_flag(server: ServingProcess) -> None:
    answers = stream(
        server,
        [
            {"n": 0, "request_id": "silent"},
            {"n": 0, "request_id": "flagged", "enable_empty_final_response": True},
        ],
    )
    assert answers == [("flagged", [], True, "")]


def test_interleaved_requests_on_one_stream_each_keep_their_order(
    server: ServingProcess,
) -> None:
    sizes = {"a": 4, "b": 1, "c": 3, "d": 2}
    requests = [
        {"n": n, "request_id": rid, "enable_empty_final_response": True} for rid, n in sizes.items()
    ]
    answers = stream(server, requests)
    for rid, n in sizes.items():
        mine = [a for a in answers if a[0] == rid]
        assert mine == [(rid, [n * 10 + i], False, "") for i in range(n)] + [(rid, [], True, "")]
    assert len(answers) == sum(sizes.values()) + len(sizes)


def test_responses_sent_from_a_thread_after_execute_returned(server: ServingProcess) -> None:
    requests = [
        {"n": 2, "request_id": "early", "parameters": {"defer": True},
         "enable_empty_final_response": True},
        {"n": 1, "request_id": "late", "parameters": {"release": True},
         "enable_empty_final_response": True},
    ]  # fmt: skip
    answers = stream(server, requests)
    assert [a for a in answers if a[0] == "early"] == [
        ("early", [20], False, ""),
        ("early", [21], False, ""),
        ("early", [], True, ""),
    ]
    assert [a for a in answers if a[0] == "late"] == [
        ("late", [10], False, ""),
        ("late", [], True, ""),
    ]


def test_an_error_sent_by_the_model_reaches_the_stream(server: ServingProcess) -> None:
    answers = stream(server, [{"n": 1, "request_id": "x", "parameters": {"fail": True}}])
    assert answers == [("", [], False, "repeat refused")]


def test_an_execute_that_raises_ends_the_request_and_the_stream_goes_on(
    server: ServingProcess,
) -> None:
    answers = stream(
        server,
        [
            {"n": 1, "request_id": "x", "parameters": {"raise": True}},
            {"n": 1, "request_id": "y"},
        ],
    )
    assert len(answers) == 2
    # The two run at once, so either may end first; the client reports an error without its id.
    failed = [answer for answer in answers if answer[3]]
    assert len(failed) == 1 and "repeat blew up" in failed[0][3]
    assert [answer for answer in answers if not answer[3]] == [("y", [10], False, "")]


def test_a_crash_ends_the_open_streams_with_an_error(server: ServingProcess) -> None:
    answers = stream(
        server,
        [
            {"n": 2, "request_id": "open", "parameters": {"defer": True}, "model": "repeat_crash"},
            {"n": 1, "request_id": "fatal", "parameters": {"crash": True}, "model": "repeat_crash"},
        ],
    )
    assert len(answers) == 2
    # Both end with UNAVAILABLE naming the exit, whichever notices the crash first.
    assert all("exited with code 3" in error for *_, error in answers)


def test_the_model_sees_its_client_go_away(server: ServingProcess) -> None:
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        client.async_stream_infer("repeat_cancel", [tensor], parameters={"until_cancelled": True})
        result, error = answers.get(timeout=60)  # the model is streaming
        assert error is None and result.as_numpy("OUT").tolist() == [7]
        client.stop_stream(cancel_requests=True)
    report = stream(server, [{"n": 1, "request_id": "r", "model": "repeat_cancel",
                              "parameters": {"report": True}}])  # fmt: skip
    assert report == [("r", [1], True, "")]


def test_a_model_that_is_not_decoupled_answers_once_marked_final(server: ServingProcess) -> None:
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        client.async_stream_infer("simple", inputs, request_id="s")
        client.stop_stream()
    result, error = answers.get_nowait()
    assert error is None and answers.empty()
    assert result.get_response().parameters["triton_final_response"].bool_param
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2))


def test_unary_endpoints_refuse_a_decoupled_model(server: ServingProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        http.infer("repeat", [tensor])
    http.close()
    assert info.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        gtensor = grpcclient.InferInput("IN", [1], "INT32")
        gtensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("repeat", [gtensor])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def collect(server: ServingProcess, n: int, parameters: dict[str, Any]) -> list[int]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
        out = client.infer("collect", [tensor], parameters=parameters).as_numpy("OUT")
        return [] if out is None else out.tolist()
    finally:
        client.close()


@pytest.mark.parametrize("mode", [{}, {"async": True}], ids=["exec", "async_exec"])
def test_bls_with_decoupled_true_gets_every_response(
    server: ServingProcess, mode: dict[str, Any]
) -> None:
    assert collect(server, 3, mode) == [30, 31, 32]
    assert collect(server, 0, mode) == []


def test_bls_with_decoupled_true_sees_the_error_the_model_sent(server: ServingProcess) -> None:
    with pytest.raises(InferenceServerException, match="repeat refused"):
        collect(server, 1, {"fail": True})


def test_a_decoupled_model_passes_the_candidate_check_with_its_generated_warm_up(
    tmp_path: Path,
) -> None:
    model_dir = dm.write_python_model(tmp_path, "repeat", REPEAT, REPEAT_CONFIG)
    report_file = tmp_path / "report.json"
    code = check_main(
        ["--model-dir", str(model_dir), "--version-dir", str(model_dir / "1"),
         "--report", str(report_file)]
    )  # fmt: skip
    report = json.loads(report_file.read_text())
    assert code == 0, report
    warmup = next(step for step in report["steps"] if step["name"] == "warmup")
    assert warmup["message"] == "1 warm-up request(s) from a generated request"
