"""``--grpc-workers 2``: every gRPC test of ``test_grpc`` again through two front-end processes,
and what only front-ends have: the aio client, load spread over both, a front-end killed
mid-call, large messages, and SIGTERM stopping them with the server."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.settings import ServingSettings
from tests.ports import free_ports
from tests.serving.harness import (
    folder_settings,
    frontend_children,
    process_alive,
    rss_mib,
    serving_subprocess,
    settled_rss_mib,
    swap_under_load,
    wait_ready,
    wait_until,
    write_protocol_repository,
)
from tests.serving.protocol.conftest import MAX_REQUEST_BYTES
from tests.serving.protocol.test_grpc import *  # noqa: F403 - the same tests, through front-ends
from tests.serving.protocol.test_grpc import (
    assert_unary_answered,
    error_of,
    fp32_input,
    open_stream_infer,
)
from tests.serving.protocol.test_grpc_http2 import _slow_12kb_request

pytestmark = pytest.mark.embedded

WORKERS = 2
LARGE_CAP_BYTES = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    """The protocol tests' server, with gRPC served by two front-end processes."""
    repo: Path = tmp_path_factory.mktemp("repo")
    write_protocol_repository(repo)
    dm.write_python_sleep(repo, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    settings = folder_settings(repo, max_request_bytes=MAX_REQUEST_BYTES, grpc_workers=WORKERS)
    process = ServingProcess(settings).start()
    yield process
    process.stop()


def frontends(server: ServingProcess) -> list[Any]:
    pool = server.ports.grpc_frontends
    assert pool is not None
    return list(pool.frontends)


def identity_count(client: Any) -> int:
    stats = client.get_inference_statistics("identity").model_stats[0]
    return int(stats.inference_stats.success.count)


def test_two_frontend_processes_listen_apart_from_the_server(server: ServingProcess) -> None:
    running = frontends(server)
    pids = {f.process.pid for f in running}
    assert len(running) == WORKERS and len(pids) == WORKERS and os.getpid() not in pids
    for frontend in running:
        assert frontend.process.poll() is None


def test_requests_over_both_frontends_are_all_counted_once(server: ServingProcess) -> None:
    before_calls = {id(f): f.connection.calls_started for f in frontends(server)}
    with grpcclient.InferenceServerClient(server.grpc_url) as probe:
        before = identity_count(probe)
    x = np.ones((1, 3), dtype=np.float32)
    requests = 0
    # Each new connection lands on one front-end (the kernel spreads SO_REUSEPORT by address).
    for _ in range(40):
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            for _ in range(3):
                client.infer("identity", [fp32_input(x)])
                requests += 1
    with grpcclient.InferenceServerClient(server.grpc_url) as probe:
        assert identity_count(probe) - before == requests
    relayed = [f.connection.calls_started - before_calls[id(f)] for f in frontends(server)]
    assert all(count > 0 for count in relayed), relayed
    assert sum(relayed) >= requests  # plus the statistics calls


async def test_aio_client_infer_metadata_and_stream(server: ServingProcess) -> None:
    client = grpcaio.InferenceServerClient(server.grpc_url)
    try:
        assert await client.is_server_ready()
        assert (await client.get_model_metadata("identity")).name == "identity"
        x = np.arange(6, dtype=np.float32).reshape(1, 6)
        result = await client.infer("identity", [fp32_input(x)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)

        async def requests() -> Any:
            for index in range(5):
                yield {"model_name": "identity", "inputs": [fp32_input(x * index)],
                       "request_id": str(index)}  # fmt: skip

        answers = {}
        async for result, error in client.stream_infer(requests()):
            assert error is None
            answers[result.get_response().id] = result.as_numpy("OUTPUT0")
            if len(answers) == 5:
                break
        np.testing.assert_array_equal(answers["4"], x * 4)
    finally:
        await client.close()


def test_a_frontend_killed_mid_call_fails_that_call_and_comes_back(server: ServingProcess) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    unbatched = np.ones(2, dtype=np.float32)  # the sleep model does not batch
    failures: list[InferenceServerException] = []

    def slow_call() -> None:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            try:
                client.infer(
                    "sleep", [fp32_input(unbatched)], parameters={"execute_delay_ms": 3000}
                )
            except InferenceServerException as exc:
                failures.append(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    wait_until(lambda: any(f.connection.in_flight for f in frontends(server)))
    victim = next(f for f in frontends(server) if f.connection.in_flight)
    old_pid = victim.process.pid
    os.kill(old_pid, signal.SIGKILL)
    caller.join(60)
    assert len(failures) == 1 and failures[0].status() == "StatusCode.UNAVAILABLE"
    wait_until(lambda: victim.process.pid != old_pid and victim.ready.is_set())
    assert victim.process.poll() is None
    for _ in range(20):  # new connections, so both front-ends are used
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("identity", [fp32_input(x)])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    assert server.server is not None and server.server.live


def test_a_stream_longer_than_the_relay_window_is_answered_in_full(server: ServingProcess) -> None:
    from serving.protocol.grpc.relay_wire import STREAM_WINDOW

    answers: queue.Queue[Any] = queue.Queue()
    count = 3 * STREAM_WINDOW + 5  # the window refills as the servicer takes requests
    x = np.ones((1, 3), dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for index in range(count):
            client.async_stream_infer("identity", [fp32_input(x * index)], request_id=str(index))
        received = [answers.get(timeout=60) for _ in range(count)]
        client.stop_stream()
    assert all(error is None for _, error in received)
    assert {result.get_response().id for result, _ in received} == {str(i) for i in range(count)}


def test_a_cancelled_stream_ends_its_relayed_call(server: ServingProcess) -> None:
    x = np.ones(2, dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer("sleep", [fp32_input(x)], parameters={"execute_delay_ms": 2000})
        wait_until(lambda: any(f.connection.in_flight for f in frontends(server)))
        client.stop_stream(cancel_requests=True)
    wait_until(lambda: not any(f.connection.in_flight for f in frontends(server)))


def test_a_stream_waiting_on_a_slow_model_holds_up_no_other_call_on_its_connection(
    server: ServingProcess,
) -> None:
    """A client streams requests to a model slower than it (2 s each) and reads every answer:
    once the server holds the stream back, a unary call on the same channel is still answered at
    once. At h2corn's default windows the stream took its connection's whole receive window, and
    the call waited until the stream's backlog had run."""
    payload, sent = _slow_12kb_request(2000), [0]

    def requests() -> Iterator[bytes]:
        for _ in range(2000):  # 24 MB: far more than the server takes before it holds them back
            sent[0] += 1
            yield payload

    with grpc.insecure_channel(server.grpc_url) as channel:
        answers = open_stream_infer(channel, requests())
        errors: list[str] = []
        reader = threading.Thread(target=_read_until_cancelled, args=(answers, errors))
        reader.start()
        try:
            wait_until(lambda: _unchanged_for_a_second(sent))  # held back: no room for a second
            assert_unary_answered(channel)
        finally:
            answers.cancel()
            reader.join(10)
    assert errors == []


def _read_until_cancelled(answers: Any, errors: list[str]) -> None:
    """Read every answer of ``answers`` as it comes, keeping their errors, until it is cancelled."""
    with contextlib.suppress(grpc.RpcError):
        for answer in answers:
            if answer.error_message:
                errors.append(answer.error_message)


def _unchanged_for_a_second(counter: list[int]) -> bool:
    before = counter[0]
    time.sleep(1.0)  # NOTE: a settling pause, not a timing threshold: the count stops or grows
    return counter[0] == before


def test_unknown_methods_and_undecodable_messages_get_grpc_answers(server: ServingProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        for method, body, code in (
            ("/inference.GRPCInferenceService/Nope", b"", grpc.StatusCode.UNIMPLEMENTED),
            ("/inference.GRPCInferenceService/ModelInfer", b"\xff\xff", grpc.StatusCode.INTERNAL),
        ):
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(method)(body)
            assert info.value.code() == code
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_model_ready("identity")


@pytest.fixture(scope="module")
def large_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("large")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    settings = folder_settings(repo, max_request_bytes=LARGE_CAP_BYTES, grpc_workers=WORKERS)
    with ServingProcess(settings) as process:
        yield process


def test_messages_past_4_mib_cross_the_relay_and_the_cap_holds(
    large_server: ServingProcess,
) -> None:
    with grpcclient.InferenceServerClient(large_server.grpc_url) as client:
        x = np.random.default_rng(1).random((1, 1_500_000), dtype=np.float32)  # 6 MB
        result = client.infer("identity", [fp32_input(x)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
        too_big = np.ones((1, 2_200_000), dtype=np.float32)  # 8.8 MB
        error = error_of(lambda: client.infer("identity", [fp32_input(too_big)]))
        assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_live()


def test_a_swap_under_load_across_frontends_fails_no_call(tmp_path: Path) -> None:
    """Poll mode picks up version 2 while unary clients and one long stream keep both
    front-ends busy; every call and every streamed request succeeds, and the answers move from
    version 1 to version 2 (the stream's too: it is not tied to the version it began on)."""
    dm.write_onnx_identity(tmp_path, "identity", 1, dims=(-1,), max_batch_size=8)
    settings = folder_settings(
        tmp_path, grpc_workers=WORKERS, model_control_mode="poll", repository_poll_s=0.5
    )
    x = np.ones((1, 4), dtype=np.float32)
    with ServingProcess(settings) as process:
        failures: list[BaseException] = []
        versions: set[str] = set()
        streamed: list[str] = []
        stop = threading.Event()

        def unary_load() -> None:
            while not stop.is_set():
                try:
                    with grpcclient.InferenceServerClient(process.grpc_url) as client:
                        for _ in range(5):
                            answer = client.infer("identity", [fp32_input(x)]).get_response()
                            versions.add(answer.model_version)
                except BaseException as exc:  # noqa: BLE001 - every failure counts
                    failures.append(exc)

        def stream_load() -> None:
            answers: queue.Queue[Any] = queue.Queue()
            with grpcclient.InferenceServerClient(process.grpc_url) as client:
                client.start_stream(callback=lambda result, error: answers.put((result, error)))
                try:
                    while not stop.is_set():
                        client.async_stream_infer("identity", [fp32_input(x)])
                        result, error = answers.get(timeout=30)
                        if error is not None:
                            failures.append(error)
                        else:
                            streamed.append(result.get_response().model_version)
                finally:
                    client.stop_stream()

        loads = [unary_load] * 3 + [stream_load]
        swap_under_load(tmp_path, loads, stop, lambda: "2" in versions and "2" in streamed)
    assert failures == []
    assert versions == {"1", "2"}
    assert streamed[0] == "1" and streamed[-1] == "2"


def test_sigterm_drains_a_relayed_call_and_stops_the_frontends(tmp_path: Path) -> None:
    dm.write_python_sleep(tmp_path, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    http_port, grpc_port = free_ports(2)
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", "-1",
            "--grpc-workers", "2", "--drain-grace-secs", "2"]  # fmt: skip
    with serving_subprocess(args) as process:
        wait_ready(f"127.0.0.1:{http_port}", process=process)
        children = frontend_children(process.pid, "serving.protocol.grpc.frontend")
        assert len(children) == 2
        results: list[Any] = []
        connected = threading.Event()

        def call() -> None:
            with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
                assert client.is_server_live()
                connected.set()
                x = np.ones(2, dtype=np.float32)
                results.append(client.infer("sleep", [fp32_input(x)],
                                            parameters={"execute_delay_ms": 4000}))  # fmt: skip

        caller = threading.Thread(target=call)
        caller.start()
        assert connected.wait(60)
        # The call goes out now and arrives within the 2 s grace; it still runs when the
        # front-ends stop accepting, so the drain has to wait for it through the relay.
        process.send_signal(signal.SIGTERM)
        caller.join(60)
        assert process.wait(timeout=60) == 0
    assert len(results) == 1
    wait_until(lambda: not any(process_alive(pid) for pid in children), 30.0)


@pytest.mark.parametrize("transport", ["h2corn", "h2"])
def test_a_frontend_reads_no_faster_than_the_server_takes_the_calls(
    tmp_path: Path, transport: str
) -> None:
    """With the serving process stopped (SIGSTOP), 16 calls of 16 MiB each over two connections
    fill the front-end's socket to it and then wait in HTTP/2's flow control, not in the
    front-end's memory; once it runs again every call is answered."""
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    http_port, grpc_port = free_ports(2)
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", str(grpc_port),
            "--metrics-port", "-1", "--grpc-workers", "1", "--http-workers", "0",
            "--grpc-transport", transport]  # fmt: skip
    x = np.arange(4 << 20, dtype=np.float32).reshape(1, -1)
    with serving_subprocess(args) as process:
        wait_ready(f"127.0.0.1:{http_port}", process=process)
        (frontend,) = frontend_children(process.pid, "serving.protocol.grpc.frontend")
        clients = [grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") for _ in range(2)]
        assert clients[0].is_server_ready()
        before = rss_mib(frontend)
        answers: list[Any] = []

        def call(client: Any) -> None:
            try:
                result = client.infer("identity", [fp32_input(x)], client_timeout=120)
                answers.append(np.array_equal(result.as_numpy("OUTPUT0"), x))
            except InferenceServerException as exc:  # NOTE: its text, for the failure message
                answers.append(f"{exc.status()}: {exc.message()}")

        callers = [threading.Thread(target=call, args=(clients[i % 2],)) for i in range(16)]
        process.send_signal(signal.SIGSTOP)
        try:
            for caller in callers:
                caller.start()
            grown = settled_rss_mib(frontend) - before
        finally:
            process.send_signal(signal.SIGCONT)
        for caller in callers:
            caller.join(120)
        for client in clients:
            client.close()
    # Without the back-pressure the front-end took in all 256 MiB (about 550 MiB of memory).
    assert grown < 200, f"the front-end grew {grown:.0f} MiB while the server was stopped"
    assert answers == [True] * 16


def test_front_ends_refuse_grpc_tls_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gRPC over TLS is served in-process only"):
        ServingSettings(model_repository=tmp_path, grpc_workers=2, grpc_use_ssl=True,
                        grpc_server_cert=tmp_path / "c",
                        grpc_server_key=tmp_path / "k")  # fmt: skip
    with pytest.raises(ValueError, match="--grpc-workers: must not be negative"):
        ServingSettings(model_repository=tmp_path, grpc_workers=-1)
