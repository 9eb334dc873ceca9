"""``--http-workers 2``: every HTTP test of ``test_http`` again through two front-end processes,
and what only front-ends have: load spread over both and counted once, a body that arrives in
pieces, a client that goes away, a front-end killed mid-request, a model swap under load with no
failed request, and SIGTERM stopping them with the server."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.settings import ServingSettings
from tests.ports import free_port
from tests.serving.harness import (
    folder_settings,
    frontend_children,
    identity_input,
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
from tests.serving.protocol.test_http import *  # noqa: F403 - the same tests, through front-ends
from tests.serving.protocol.test_http import binary_identity_request, finish_and_check, raw

pytestmark = pytest.mark.embedded

WORKERS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    """The protocol tests' server, with HTTP served by two front-end processes."""
    repo: Path = tmp_path_factory.mktemp("repo")
    write_protocol_repository(repo)
    dm.write_python_sleep(repo, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    settings = folder_settings(repo, max_request_bytes=MAX_REQUEST_BYTES, http_workers=WORKERS)
    process = ServingProcess(settings).start()
    yield process
    process.stop()


def frontends(server: ServingProcess) -> list[Any]:
    pool = server.ports.http_frontends
    assert pool is not None
    return list(pool.frontends)


def identity_count(server: ServingProcess) -> int:
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("identity")["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def test_two_frontend_processes_listen_apart_from_the_server(server: ServingProcess) -> None:
    running = frontends(server)
    pids = {f.process.pid for f in running}
    assert len(running) == WORKERS and len(pids) == WORKERS and os.getpid() not in pids
    assert all(f.process.poll() is None for f in running)
    assert server.ports.http == server.ports.http_frontends.port  # type: ignore[union-attr]


def test_requests_over_both_frontends_are_all_counted_once(server: ServingProcess) -> None:
    before_calls = {id(f): f.connection.calls_started for f in frontends(server)}
    before = identity_count(server)
    x = np.ones((1, 3), dtype=np.float32)
    requests = 0
    # Each new connection lands on one front-end (the kernel spreads SO_REUSEPORT by address).
    for _ in range(40):
        client = httpclient.InferenceServerClient(server.http_url)
        for _ in range(3):
            result = client.infer("identity", [identity_input(x)])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
            requests += 1
        client.close()
    assert identity_count(server) - before == requests
    relayed = [f.connection.calls_started - before_calls[id(f)] for f in frontends(server)]
    assert all(count > 0 for count in relayed), relayed
    assert sum(relayed) >= requests  # plus the statistics requests


def test_a_body_sent_in_pieces_is_relayed_whole(server: ServingProcess) -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    body = (
        b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,6],"data":'
        + str(x.ravel().tolist()).encode()
        + b"}]}"
    )
    with socket.create_connection(("127.0.0.1", server.ports.http), timeout=30) as sock:
        head = (
            b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        )
        sock.sendall(head)
        for start in range(0, len(body), 7):  # separate writes, a pause between them
            piece = body[start : start + 7]
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.01)
        sock.sendall(b"0\r\n\r\n")
        answer = _read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"data":[0.0,1.0,2.0,3.0,4.0,5.0]' in answer


def _read_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
            b"content-length")
    )  # fmt: skip
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


def test_an_oversize_body_is_refused_by_the_server_before_it_is_read(
    server: ServingProcess,
) -> None:
    status, headers, body = raw(
        server, "POST", "/v2/models/identity/infer", b"x" * (MAX_REQUEST_BYTES + 1)
    )
    assert status == 413 and headers.get("connection") == "close"
    assert b"exceeds the maximum input size" in body


def test_a_client_that_goes_away_cancels_its_relayed_request(server: ServingProcess) -> None:
    long_body = (
        b'{"parameters":{"execute_delay_ms":10000},'
        b'"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,2]}]}'
    )
    sock = socket.create_connection(("127.0.0.1", server.ports.http), timeout=30)
    sock.sendall(
        b"POST /v2/models/sleep/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(long_body), long_body)
    )
    wait_until(lambda: any(f.connection.in_flight for f in frontends(server)))
    sock.close()
    # Well before the model would have finished its 10 s: the request was cancelled.
    wait_until(lambda: not any(f.connection.in_flight for f in frontends(server)), 8.0)


def test_a_frontend_killed_mid_request_fails_that_request_and_comes_back(
    server: ServingProcess,
) -> None:
    failures: list[BaseException] = []

    def slow_request() -> None:
        # NOTE: http.client, which never retries: tritonclient's HTTP client resends a request
        # whose connection broke, which would hide the failure.
        connection = http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=60)
        body = (
            b'{"parameters":{"execute_delay_ms":3000},'
            b'"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,2]}]}'
        )
        try:
            connection.request("POST", "/v2/models/sleep/infer", body=body)
            connection.getresponse().read()
        except (OSError, http.client.HTTPException) as exc:
            failures.append(exc)

    caller = threading.Thread(target=slow_request)
    caller.start()
    wait_until(lambda: any(f.connection.in_flight for f in frontends(server)))
    victim = next(f for f in frontends(server) if f.connection.in_flight)
    old_pid = victim.process.pid
    os.kill(old_pid, signal.SIGKILL)
    caller.join(60)
    assert len(failures) == 1, failures
    wait_until(lambda: victim.process.pid != old_pid and victim.ready.is_set())
    assert victim.process.poll() is None
    x = np.ones((1, 2), dtype=np.float32)
    for _ in range(20):  # new connections, so both front-ends are used
        client = httpclient.InferenceServerClient(server.http_url)
        np.testing.assert_array_equal(
            client.infer("identity", [identity_input(x)]).as_numpy("OUTPUT0"), x
        )
        client.close()
    assert server.server is not None and server.server.live


def test_a_swap_under_load_across_frontends_fails_no_request(tmp_path: Path) -> None:
    """Poll mode picks up version 2 while four clients keep both front-ends busy; every request
    succeeds, and the answers move from version 1 to version 2."""
    dm.write_onnx_identity(tmp_path, "identity", 1, dims=(-1,), max_batch_size=8)
    settings = folder_settings(
        tmp_path, http_workers=WORKERS, model_control_mode="poll", repository_poll_s=0.5
    )
    with ServingProcess(settings) as process:
        failures: list[BaseException] = []
        versions: set[str] = set()
        stop = threading.Event()

        def load() -> None:
            x = np.ones((1, 4), dtype=np.float32)
            while not stop.is_set():
                client = httpclient.InferenceServerClient(process.http_url)
                try:
                    for _ in range(5):
                        versions.add(client.infer("identity", [identity_input(x)]).get_response()[
                            "model_version"])  # fmt: skip
                except BaseException as exc:  # noqa: BLE001 - every failure counts
                    failures.append(exc)
                finally:
                    client.close()

        swap_under_load(tmp_path, [load] * 4, stop, lambda: "2" in versions)
    assert failures == []
    assert versions == {"1", "2"}


def test_sigterm_drains_a_relayed_request_and_stops_the_frontends(tmp_path: Path) -> None:
    dm.write_python_sleep(tmp_path, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    http_port = free_port()
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", "-1", "--metrics-port", "-1",
            "--http-workers", "2", "--drain-grace-secs", "2"]  # fmt: skip
    with serving_subprocess(args) as process:
        wait_ready(f"127.0.0.1:{http_port}", process=process)
        children = frontend_children(process.pid, "serving.protocol.http.frontend")
        assert len(children) == 2
        results: list[Any] = []
        connected = threading.Event()

        def request() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
            connection.request("GET", "/v2/health/live")
            connection.getresponse().read()
            connected.set()
            body = (
                b'{"parameters":{"execute_delay_ms":4000},'
                b'"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,2]}]}'
            )
            connection.request("POST", "/v2/models/sleep/infer", body=body)
            answer = connection.getresponse()
            results.append((answer.status, answer.read()))

        caller = threading.Thread(target=request)
        caller.start()
        assert connected.wait(60)
        # The request goes out now and arrives within the 2 s grace; it still runs when the
        # front-ends stop accepting, so the drain has to wait for it through the relay.
        process.send_signal(signal.SIGTERM)
        caller.join(60)
        assert process.wait(timeout=60) == 0
    assert len(results) == 1 and results[0][0] == 200, results
    wait_until(lambda: not any(process_alive(pid) for pid in children), 30.0)


def test_a_frontend_reads_no_faster_than_the_server_takes_the_bytes(tmp_path: Path) -> None:
    """With the serving process stopped (SIGSTOP), clients pushing large bodies fill the
    front-end's socket to it and then their own TCP windows, not the front-end's memory; once
    it runs again every body arrives whole and is answered."""
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    http_port = free_port()
    args = ["-m", "serving", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
            "--http-port", str(http_port), "--grpc-port", "-1", "--metrics-port", "-1",
            "--http-workers", "1"]  # fmt: skip
    x = np.arange(4 << 20, dtype=np.float32)  # 16 MiB a request
    request = binary_identity_request(x)
    with serving_subprocess(args) as process:
        wait_ready(f"127.0.0.1:{http_port}", process=process)
        (frontend,) = frontend_children(process.pid, "serving.protocol.http.frontend")
        before = rss_mib(frontend)
        process.send_signal(signal.SIGSTOP)
        try:
            clients, sent = [], []
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", http_port), timeout=0.5)
                count = 0
                with contextlib.suppress(TimeoutError):  # nothing taken for 0.5 s: it waits
                    while count < len(request):
                        count += sock.send(request[count : count + (256 << 10)])
                clients.append(sock)
                sent.append(count)
            grown = settled_rss_mib(frontend) - before
        finally:
            process.send_signal(signal.SIGCONT)
        # Without the back-pressure the front-end held all 128 MiB the clients sent.
        assert grown < 64, f"the front-end grew {grown:.0f} MiB while the server was stopped"
        assert sum(sent) < len(request) * len(clients)
        finish_and_check(clients, [request[count:] for count in sent], x)


def test_frontends_refuse_https_and_negative_counts_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HTTPS is served in-process only"):
        ServingSettings(model_repository=tmp_path, http_workers=2,
                        http_ssl_cert=tmp_path / "c", http_ssl_key=tmp_path / "k")  # fmt: skip
    with pytest.raises(ValueError, match="--http-workers: must not be negative"):
        ServingSettings(model_repository=tmp_path, http_workers=-1)


def test_workers_sets_both_protocols_unless_one_is_given() -> None:
    import argparse

    from serving.cli import add_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def parsed(*argv: str) -> tuple[int, int]:
        options = vars(parser.parse_args(["--model-repository", "/tmp", *argv]))
        settings = settings_from_args(options)
        return settings.grpc_workers, settings.http_workers

    assert parsed("--workers", "3") == (3, 3)
    assert parsed("--workers", "3", "--http-workers", "0") == (3, 0)
    assert parsed() == (0, 0)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_port_another_servers_frontends_listen_on_is_refused_not_shared(
    tmp_path: Path, protocol: str
) -> None:
    """SO_REUSEPORT would let a second server's front-ends join the first one's port and split
    its traffic; the second server fails to start instead, as an in-process listener would."""
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    port = free_port()
    ports = {"http_port": port, "grpc_port": 0} if protocol == "http" else {"grpc_port": port}
    both = {"http_workers": 1, "grpc_workers": 1}
    with ServingProcess(folder_settings(tmp_path, **ports, **both)) as first:
        with pytest.raises(OSError, match="in use"):
            ServingProcess(folder_settings(tmp_path, **ports, **both)).start()
        # The first keeps its port and serves.
        url = first.http_url if protocol == "http" else first.grpc_url
        assert url.endswith(f":{port}")
        x = np.ones((1, 2), dtype=np.float32)
        client = httpclient.InferenceServerClient(first.http_url)
        np.testing.assert_array_equal(
            client.infer("identity", [identity_input(x)]).as_numpy("OUTPUT0"), x
        )


def test_a_frontend_that_keeps_dying_stops_being_restarted_and_the_others_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from serving import frontends as pools

    monkeypatch.setattr(pools, "MAX_RESTARTS", 1)  # the budget: one restart per minute
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    with ServingProcess(folder_settings(tmp_path, http_workers=WORKERS)) as process:
        victim = frontends(process)[0]
        first = victim.process.pid
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: victim.process.pid != first and victim.ready.is_set())
        second = victim.process.pid
        os.kill(second, signal.SIGKILL)
        wait_until(lambda: "not restarted: 1 restarts within 60 s" in caplog.text)
        assert victim.process.pid == second and victim.process.poll() is not None
        x = np.ones((1, 2), dtype=np.float32)
        for _ in range(10):  # new connections all reach the front-end that is left
            client = httpclient.InferenceServerClient(process.http_url)
            np.testing.assert_array_equal(
                client.infer("identity", [identity_input(x)]).as_numpy("OUTPUT0"), x
            )
            client.close()
