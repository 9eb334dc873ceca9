"""The gRPC port served by h2corn (``--grpc-transport h2corn``, the default; ``asgi_server``):
HTTP/2 in native code, the calls on the loop through ASGI. ``test_grpc.py``'s inference tests run
on it as the default; here run the loop listener's own tests whose rules are gRPC's rather than
its HTTP/2 library's:
framing, compression, limits, deadlines, resets and the graceful stop; then what this transport
answers for itself: the request bytes all calls may hold, and what h2corn does about clients that
reset or ping without end."""

from __future__ import annotations

import functools
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from h2.errors import ErrorCodes

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import folder_settings, write_protocol_repository
from tests.serving.protocol.conftest import MAX_REQUEST_BYTES
from tests.serving.protocol.h2_client import RawGrpc, grpc_message
from tests.serving.protocol.test_grpc import (
    assert_unary_answered,
    fp32_input,
    stream_left_unread,
)
from tests.serving.protocol.test_grpc_http2 import (  # noqa: F401 - run again, over h2corn
    INFER,
    LIVE,
    _port,
    _sleep_request,
    test_a_call_that_stopped_reading_leaves_the_connections_window_to_the_others,
    test_a_gzip_compressed_request_is_answered,
    test_a_message_cut_short_by_the_end_of_the_stream_is_internal,
    test_a_message_over_the_limit_is_refused_before_it_arrives,
    test_a_request_that_is_not_grpc_gets_http_415,
    test_a_stream_reset_by_the_client_leaves_the_connection_serving,
    test_a_stream_waiting_on_a_slow_model_leaves_the_connections_window_to_the_others,
    test_an_answer_larger_than_the_clients_window_arrives_whole,
    test_an_unknown_compression_is_unimplemented,
    test_calls_together_hold_no_more_than_their_request_budget,
    test_http1_on_the_grpc_port_is_closed_and_serving_goes_on,
    test_many_calls_at_once_on_one_connection_each_get_their_own_answer,
    test_metadata_past_the_limit_fails_the_call_and_serving_goes_on,
    test_stop_lets_a_running_call_finish_and_then_refuses_new_ones,
    test_the_server_ends_a_call_past_its_grpc_timeout,
    test_two_messages_to_a_unary_method_end_the_call_internal,
    test_two_streams_waiting_on_a_slow_model_leave_the_connections_window_to_the_others,
)
from tests.serving.protocol.test_http_disconnect import _queue_depth, _wait_until

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_protocol_repository(repo)
    settings = folder_settings(repo, max_request_bytes=MAX_REQUEST_BYTES, grpc_transport="h2corn")
    process = ServingProcess(settings).start()
    yield process
    process.stop()


@pytest.fixture
def slow_server(tmp_path: Path) -> Any:
    dm.write_python_sleep(tmp_path, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    settings = folder_settings(tmp_path, drain_grace_s=0.0, grpc_transport="h2corn")
    process = ServingProcess(settings).start()
    yield process
    process.stop()


@pytest.mark.parametrize("how", ["reset", "leave"])
def test_a_unary_call_whose_client_resets_it_or_leaves_never_runs(
    slow_server: ServingProcess, how: str
) -> None:
    # One instance: one call runs for 5 s, the other waits behind it, and its client resets
    # it (RST_STREAM) or closes its connection while it waits. It is dropped from the queue and
    # counted failed, never run; the first is answered.
    with grpcclient.InferenceServerClient(slow_server.grpc_url) as client:
        before = client.get_inference_statistics("sleep", as_json=True)["model_stats"][0]
        queued = functools.partial(_queue_depth, slow_server.ports.metrics, "sleep")
        with RawGrpc("127.0.0.1", _port(slow_server)) as raw:
            first = raw.open(INFER)
            raw.send(first, grpc_message(_sleep_request(5000)), end=True)
            # NOTE: the second call is sent only once the first runs (it has arrived, then left
            # the queue for the idle instance), so the one call seen queued below is the second.
            # "1 queued" alone could be the first on its way to the instance, and a second
            # that arrived after the client left would run.
            scheduler = slow_server.server.resolve("sleep", None).scheduler
            assert scheduler is not None
            _wait_until(lambda: (scheduler.in_flight, scheduler.queue_depth) == (1, 0))
            with RawGrpc("127.0.0.1", _port(slow_server)) as other:
                second = other.open(INFER)
                other.send(second, grpc_message(_sleep_request(10)), end=True)
                _wait_until(lambda: queued() == 1)  # waiting behind the first
                if how == "reset":
                    other.reset(second)
            # the client has closed its connection: the call is dropped while the first runs
            _wait_until(lambda: queued() == 0)
            assert raw.wait(first).grpc_status == 0
        after = client.get_inference_statistics("sleep", as_json=True)["model_stats"][0]
    assert int(after["execution_count"]) - int(before.get("execution_count", 0)) == 1
    failed = [int(s["inference_stats"]["fail"].get("count", 0)) for s in (before, after)]
    assert failed[1] == failed[0] + 1


def test_h2corn_ends_a_client_that_resets_calls_without_end(server: ServingProcess) -> None:
    # HTTP/2 "rapid reset" (CVE-2023-44487): calls opened and reset at once, never more than
    # one open. h2corn ends such a connection ENHANCE_YOUR_CALM; the server serves on.
    with RawGrpc("127.0.0.1", _port(server)) as raw:
        for _ in range(20):  # a client that resets a few calls is served on
            raw.reset(raw.open(INFER))
        assert raw.call(LIVE, [grpc_message(b"")]).grpc_status == 0
    with RawGrpc("127.0.0.1", _port(server)) as raw:
        try:
            for _ in range(50):
                raw.open_and_reset(INFER, 100)
        except (BrokenPipeError, ConnectionResetError):
            pass  # ended while we sent: the GOAWAY may still be read
        assert raw.wait_for_goaway() in (ErrorCodes.ENHANCE_YOUR_CALM, None)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live()


def test_h2corn_ends_a_client_that_pings_without_reading(server: ServingProcess) -> None:
    ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"
    flood, sent, ended = ping * 4_000, 0, False
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        sock.settimeout(2)
        try:
            while sent < 64 << 20:
                sock.sendall(flood)
                sent += len(flood)
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            ended = True  # closed, or no longer read: either way the flood went nowhere
        assert ended, f"the server read {sent >> 20} MiB of PINGs whose answers nobody read"
    with grpcclient.InferenceServerClient(server.grpc_url) as client:  # others are served
        assert client.is_server_live()


def test_a_stream_left_unread_holds_up_no_call_on_a_connection_of_its_own(
    server: ServingProcess,
) -> None:
    # The way round h2corn's shared writer that docs/serving.md gives: a stream that may go unread
    # on a channel with its own connection (grpc's local subchannel pool); the process's other
    # calls, on another channel, are answered at once.
    own = [("grpc.use_local_subchannel_pool", 1)]
    with (
        grpc.insecure_channel(server.grpc_url, options=own) as streaming,
        grpc.insecure_channel(server.grpc_url, options=own) as other,
        stream_left_unread(server, streaming, sent=400, elements=8 * 1024),
    ):
        assert_unary_answered(other)


def test_front_end_processes_serve_on_h2corn_too(tmp_path: Path) -> None:
    write_protocol_repository(tmp_path)
    settings = folder_settings(tmp_path, grpc_workers=2, grpc_transport="h2corn")
    process = ServingProcess(settings).start()
    try:
        pool = process.ports.grpc_frontends
        assert pool is not None and len(pool.frontends) == 2
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            for index in range(20):
                x = np.full((1, 4), index, dtype=np.float32)
                result = client.infer("identity", [fp32_input(x)])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
            stats = client.get_inference_statistics("identity").model_stats[0]
            assert stats.inference_stats.success.count == 20
    finally:
        process.stop()


def test_serve_listens_for_grpc_with_h2corn_by_default(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # h2corn announces each listener it opens on the process's standard error (its banner).
    write_protocol_repository(tmp_path)
    with ServingProcess(folder_settings(tmp_path)) as process:
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            assert client.is_server_live()
        port = process.ports.grpc
    assert f"Listening on http://127.0.0.1:{port}" in capfd.readouterr().err
