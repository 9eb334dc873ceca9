"""``inference.GRPCInferenceService`` driven by the real ``tritonclient.grpc`` client and stub."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from serving.main import ServingProcess
from serving.protocol.grpc.infer_wire import ZERO_COPY_FROM

pytestmark = pytest.mark.embedded


@pytest.fixture
def client(server: ServingProcess) -> Any:
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


@pytest.fixture
def stub(server: ServingProcess) -> Any:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def fp32_input(x: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


def error_of(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def test_health_and_metadata(client: Any) -> None:
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta.name == "triton" and "binary_tensor_data" in meta.extensions
    assert "system_shared_memory" not in meta.extensions
    model = client.get_model_metadata("simple")
    assert model.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs][0] == (
        "INPUT0", "INT32", [-1, 16])  # fmt: skip
    assert list(client.get_model_metadata("versioned").versions) == ["1", "2"]
    assert client.is_model_ready("versioned", "1")
    assert not client.is_model_ready("versioned", "5")


def test_model_config_is_a_real_model_config(client: Any) -> None:
    config = client.get_model_config("simple").config
    assert config.name == "simple" and config.max_batch_size == 8
    assert list(config.input[0].dims) == [16]


def test_infer_raw_in_raw_out(client: Any) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.infer("identity", [fp32_input(x)], request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    response = result.get_response()
    assert response.id == "r1" and response.model_version == "1"
    assert len(response.raw_output_contents) == 1


def test_infer_bytes_and_requested_outputs(client: Any) -> None:
    x = np.array([[b"a", b"bc", b""]], dtype=object)
    tensor = grpcclient.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(x)
    result = client.infer("identity_bytes", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == x.tolist()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for t in inputs:
        t.set_data_from_numpy(a)
    result = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    assert result.as_numpy("OUTPUT1") is None


def test_typed_contents_are_accepted(stub: Any) -> None:
    request = service_pb2.ModelInferRequest(model_name="identity_int64")
    tensor = request.inputs.add(name="INPUT0", datatype="INT64", shape=[4])
    tensor.contents.int64_contents.extend([1, -2, 3, 2**40])
    response = stub.ModelInfer(request)
    out = np.frombuffer(response.raw_output_contents[0], dtype=np.int64)
    assert out.tolist() == [1, -2, 3, 2**40]
    request = service_pb2.ModelInferRequest(model_name="identity_bytes")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 2])
    tensor.contents.bytes_contents.extend([b"x", b"yz"])
    assert stub.ModelInfer(request).raw_output_contents[0] == b"\x01\x00\x00\x00x\x02\x00\x00\x00yz"


def test_raw_and_typed_contents_together_are_rejected(stub: Any) -> None:
    request = service_pb2.ModelInferRequest(model_name="identity_int64")
    tensor = request.inputs.add(name="INPUT0", datatype="INT64", shape=[4])
    tensor.contents.int64_contents.extend([1, 2, 3, 4])
    request.raw_input_contents.append(np.zeros(4, np.int64).tobytes())
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("call", "code", "text"),
    [
        (lambda c, x: c.infer("nope", [fp32_input(x)]), "StatusCode.INVALID_ARGUMENT",
         "Request for unknown model: 'nope' is not found"),
        (lambda c, x: c.infer("versioned", [fp32_input(x)], model_version="4"),
         "StatusCode.NOT_FOUND", "'versioned' version 4 is not found"),
        (lambda c, x: c.infer("versioned", [fp32_input(x)], model_version="v1"),
         "StatusCode.INVALID_ARGUMENT", "failed to get model version from specified version"),
        (lambda c, x: c.infer("versioned", [fp32_input(x)], model_version="\u00b9"),
         "StatusCode.INVALID_ARGUMENT", "failed to get model version from specified version"),
        (lambda c, x: c.infer("identity_fp64", [fp32_input(x)]), "StatusCode.INVALID_ARGUMENT",
         "data-type is 'FP32', but model 'identity_fp64' expects 'FP64'"),
        (lambda c, x: c.infer("identity", [fp32_input(np.ones((9, 1), np.float32))]),
         "StatusCode.INVALID_ARGUMENT", "batch-size must be <= 8"),
        (lambda c, x: c.get_model_metadata("nope"), "StatusCode.INVALID_ARGUMENT", "'nope'"),
        (lambda c, x: c.load_model("simple"), "StatusCode.UNAVAILABLE",
         "explicit model load / unload is not allowed"),
        (lambda c, x: c.get_system_shared_memory_status(), "StatusCode.UNIMPLEMENTED",
         "'systemsharedmemory' is not supported by this server"),
        (lambda c, x: c.get_trace_settings(), "StatusCode.UNIMPLEMENTED",
         "'trace' is not supported by this server"),
    ],
)  # fmt: skip
def test_errors_map_to_grpc_status(client: Any, call: Any, code: str, text: str) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    error = error_of(lambda: call(client, x))
    assert error.status() == code
    assert text in error.message()
    result = client.infer("identity", [fp32_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_stream_infer_answers_in_band_and_stays_open(client: Any) -> None:
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        x = np.ones((1, 3), dtype=np.float32)
        client.async_stream_infer("identity", [fp32_input(x)], request_id="1")
        client.async_stream_infer("nope", [fp32_input(x)], request_id="2")
        client.async_stream_infer("identity", [fp32_input(x * 2)], request_id="3")
        answers = [results.get(timeout=10) for _ in range(3)]
    finally:
        client.stop_stream()
    ok = {r.get_response().id: r.as_numpy("OUTPUT0") for r, e in answers if e is None}
    errors = [e for _, e in answers if e is not None]
    assert set(ok) == {"1", "3"}
    np.testing.assert_array_equal(ok["3"], x * 2)
    assert len(errors) == 1 and "unknown model: 'nope'" in errors[0].message()


def test_a_stream_whose_client_never_reads_is_held_back(server: ServingProcess) -> None:
    """A client that sends and never reads its answers: gRPC's flow control must stop it once
    the server holds a bounded number of answers, so that no process (a front-end included)
    piles up every answer it would have read; and once the client reads, it gets every answer
    (held back, not cut off: a stream's queue of untaken messages is bounded in bytes as well as
    in number, below the connection's own bound)."""
    sent = 1200
    with (
        grpc.insecure_channel(server.grpc_url) as channel,
        stream_left_unread(server, channel, sent=sent, elements=32 * 1024) as ran,  # 256 KiB
    ):
        assert ran < sent // 2, f"the server ran {ran} of {sent} requests nobody read"
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_model_ready("identity_fp64")


# h2corn 2.0.0 queues every call's writes on one connection in 64 places (its writer's
# semaphore), and a queued answer keeps its place until the client's window for that call lets it
# out: a stream whose client reads nothing fills them all, and the answers of the connection's
# other calls wait behind until the client reads or h2corn's 60 s response-stall timer resets the
# stream. Nothing an application sees tells it how far h2corn has written, so it cannot be
# bounded from here; docs/serving.md ("The h2corn transport") says what to do about it.
H2CORN_SHARED_WRITER = (
    "h2corn 2.0.0 holds a connection's writes in one bounded queue, which a stream whose client "
    "reads nothing fills: the connection's other calls are not answered until it reads"
)


def test_a_stream_whose_client_stops_reading_holds_up_no_other_call_on_its_connection(
    server: ServingProcess, request: pytest.FixtureRequest
) -> None:
    """A client's calls share one HTTP/2 connection (grpc shares it between its channels too), so
    one stream the client does not read must hold back only itself: a unary call on the same
    connection is answered at once, and the stream's answers all arrive once the client reads."""
    if server.settings.grpc_transport == "h2corn":  # in-process and behind front-ends
        request.applymarker(
            pytest.mark.xfail(reason=H2CORN_SHARED_WRITER, raises=grpc.RpcError, strict=True)
        )
    with (
        grpc.insecure_channel(server.grpc_url) as channel,
        stream_left_unread(server, channel, sent=400, elements=8 * 1024),  # 64 KiB each way
    ):
        assert_unary_answered(channel)


@contextlib.contextmanager
def stream_left_unread(
    server: ServingProcess, channel: grpc.Channel, *, sent: int, elements: int
) -> Iterator[int]:
    """A ``ModelStreamInfer`` stream on ``channel`` that sends ``sent`` FP64 requests of
    ``elements`` each, as gRPC lets them go, and reads nothing until the server has stopped
    taking them (yields how many it ran); after the body, every answer must arrive, none an
    error."""
    ran_before = _successes(server, "identity_fp64")
    request = service_pb2.ModelInferRequest(model_name="identity_fp64")
    request.inputs.add(name="INPUT0", datatype="FP64", shape=[elements])
    request.raw_input_contents.append(np.ones(elements).tobytes())
    answers = open_stream_infer(channel, iter([request.SerializeToString()] * sent))
    try:
        ran, still = -1, _successes(server, "identity_fp64") - ran_before
        for _ in range(60):  # until the server stops taking requests
            if ran == still:
                break
            ran, still = still, _settled_successes(server, "identity_fp64") - ran_before
        assert ran == still, "the server kept taking requests for a minute"
        yield ran
        read = list(answers)
    finally:
        answers.cancel()
    assert [answer.error_message for answer in read if answer.error_message] == []
    assert len(read) == sent


def open_stream_infer(channel: grpc.Channel, requests: Iterator[bytes]) -> Any:
    """A ``ModelStreamInfer`` call on ``channel`` sending ``requests`` (serialized) as gRPC lets
    them go; iterating it reads the answers, ``cancel()`` ends it."""
    return channel.stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer",
        request_serializer=lambda message: message,
        response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
    )(requests)


def assert_unary_answered(channel: grpc.Channel) -> None:
    single = service_pb2.ModelInferRequest(model_name="identity")
    single.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    single.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    infer = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=lambda message: message,
        response_deserializer=service_pb2.ModelInferResponse.FromString,
    )
    answer = infer(single.SerializeToString(), timeout=5)
    assert answer.raw_output_contents[0] == single.raw_input_contents[0]


def _successes(server: ServingProcess, model: str) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(model).model_stats[0]
    return int(stats.inference_stats.success.count)


def _settled_successes(server: ServingProcess, model: str) -> int:
    time.sleep(1.0)  # NOTE: a settling pause, not a timing threshold: the count stops or grows
    return _successes(server, model)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_calls_and_streams_are_answered(client: Any, algorithm: str) -> None:
    x = np.arange(1000, dtype=np.float32).reshape(1, -1)
    answer = client.infer("identity", [fp32_input(x)], compression_algorithm=algorithm)
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), x)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: results.put((result, error)),
        compression_algorithm=algorithm,
    )
    try:
        client.async_stream_infer("identity", [fp32_input(x * 2)])
        result, error = results.get(timeout=10)
    finally:
        client.stop_stream()
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)


def test_statistics_and_index(client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    client.infer("identity", [fp32_input(x)])
    stats = client.get_inference_statistics("identity").model_stats
    assert stats[0].name == "identity" and stats[0].inference_stats.success.count >= 1
    assert len(client.get_inference_statistics().model_stats) >= 10
    index = {(m.name, m.version): m.state for m in client.get_model_repository_index().models}
    assert index[("versioned", "2")] == "READY"


def test_health_service_check(server: ServingProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_messages_up_to_the_http_max_input_size_are_accepted_and_larger_ones_refused(
    client: Any,
) -> None:
    x = np.ones((1, 200_000), dtype=np.float32)  # 800 kB, under the server's 1 MiB cap
    assert client.infer("identity", [fp32_input(x)]).as_numpy("OUTPUT0").shape == (1, 200_000)
    x = np.ones((1, 300_000), dtype=np.float32)  # 1.2 MB
    error = error_of(lambda: client.infer("identity", [fp32_input(x)]))
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"


def test_large_requests_are_read_in_place_with_every_input_intact(
    server: ServingProcess, client: Any
) -> None:
    """Past ``ZERO_COPY_FROM`` a request's tensors are read where they arrived (``infer_wire``):
    each input keeps its own bytes, in order, whatever the order of the message's fields; a
    large answer is written from its output's memory, unary and on a stream."""
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 7, dtype=np.int32)
    heading = service_pb2.ModelInferRequest(model_name="simple", id="big")
    heading.parameters["note"].string_param = "x" * ZERO_COPY_FROM  # a large message
    for name in ("INPUT0", "INPUT1"):
        heading.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    contents = service_pb2.ModelInferRequest(raw_input_contents=[a.tobytes(), b.tobytes()])
    infer = "/inference.GRPCInferenceService/ModelInfer"
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            infer, response_deserializer=service_pb2.ModelInferResponse.FromString
        )
        # Serialized messages concatenated are one message: here the contents come first.
        for wire in (heading.SerializeToString() + contents.SerializeToString(),
                     contents.SerializeToString() + heading.SerializeToString()):  # fmt: skip
            response = call(wire)
            assert response.id == "big"
            outputs = {o.name: i for i, o in enumerate(response.outputs)}
            total = np.frombuffer(response.raw_output_contents[outputs["OUTPUT0"]], np.int32)
            difference = np.frombuffer(response.raw_output_contents[outputs["OUTPUT1"]], np.int32)
            assert total.tolist() == (a + b).ravel().tolist()
            assert difference.tolist() == (a - b).ravel().tolist()
    text = np.array([[b"%d" % i * 9 for i in range(20_000)]], dtype=object)  # 390 kB of BYTES
    tensor = grpcclient.InferInput("INPUT0", list(text.shape), "BYTES")
    tensor.set_data_from_numpy(text)
    assert client.infer("identity_bytes", [tensor]).as_numpy("OUTPUT0").tolist() == text.tolist()
    x = np.arange(100_000, dtype=np.float32).reshape(1, -1)  # 400 kB, and as large an answer
    np.testing.assert_array_equal(client.infer("identity", [fp32_input(x)]).as_numpy("OUTPUT0"), x)
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for scale in (1, 2):
            client.async_stream_infer("identity", [fp32_input(x * scale)], request_id=str(scale))
        for _ in range(2):  # NOTE: a stream's requests run at once: answers come as they finish
            result, error = answers.get(timeout=30)
            assert error is None
            answer = result.get_response()  # written in place, framed as the stream's answer
            assert answer.model_name == "identity"
            assert answer.parameters["triton_final_response"].bool_param
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * int(answer.id))
    finally:
        client.stop_stream()


def test_perf_analyzer_frontend_parameter_is_accepted(stub: Any) -> None:
    request = service_pb2.ModelInferRequest(model_name="identity_int64")
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    tensor = request.inputs.add(name="INPUT0", datatype="INT64", shape=[4])
    request.raw_input_contents.append(np.arange(4, dtype=np.int64).tobytes())
    del tensor
    response = stub.ModelInfer(request)
    assert np.frombuffer(response.raw_output_contents[0], np.int64).tolist() == [0, 1, 2, 3]
    request.parameters["triton_other"].bool_param = True
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
