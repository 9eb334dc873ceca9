"""What the fault drills run on loopback: a TCP proxy that can be stopped and started, a bounded
load of inference requests, and real serving processes.

``LoopbackProxy`` is the load balancer in front of replicas and the "network" in front of
PostgreSQL and Redis. It balances connections round-robin over the upstreams whose health check
passes (when given a path: an active check, as Kubernetes' readiness probe or a load balancer's),
and tries the next upstream when one refuses a connection (nginx's ``proxy_next_upstream error``).
When every check has failed it tries them all, as nginx does when it has marked every server
failed: on a starved machine a live replica's check can time out for a moment.
It never retries a request once it reached an upstream: what was in flight on a replica that dies
fails, as it would behind nginx for a POST. ``stop()`` closes its listener and drops every
connection, so what stands behind it looks down; ``start()`` brings it back on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HEALTH_INTERVAL_S = 0.2


class LoopbackProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstreams`` (ports on 127.0.0.1)."""

    def __init__(self, upstreams: list[int], *, health_path: str = "") -> None:
        self.upstreams = list(upstreams)
        self.health_path = health_path
        self.port = 0
        self.active: Counter[int] = Counter()  # connections open to each upstream now
        self.served: Counter[int] = Counter()  # connections each upstream ever took
        self.spans: list[tuple[int, float, list[float]]] = []  # (upstream, opened, [closed])
        # Connections an upstream took and closed without sending a byte back: (upstream, closed).
        self.unanswered: list[tuple[int, float]] = []
        self.unchecked: list[float] = []  # when a connection came while no check passed
        self.abandoned: list[float] = []  # when no upstream took a connection (the proxy's fault)
        self._healthy = set(upstreams) if not health_path else set()
        self._next = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._checks: asyncio.Future[None] | None = None
        self._checking = True
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        if health_path:
            self._call(self._start_health_checks())

    def start(self) -> LoopbackProxy:
        self._call(self._listen())
        return self

    def stop(self) -> None:
        """Close the listener and drop every open connection."""
        self._call(self._close())

    def close(self) -> None:
        self.stop()
        self._call(self._stop_health_checks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def healthy(self) -> set[int]:
        return set(self._healthy)

    def open_between(self, port: int, start: float, end: float) -> int:
        """Connections to ``port`` that were open at some time from ``start`` to ``end``
        (``time.monotonic()``)."""
        spans = [(opened, closed) for p, opened, closed in list(self.spans) if p == port]
        return sum(
            1 for opened, closed in spans if opened <= end and (not closed or closed[0] >= start)
        )

    def unanswered_since(self, port: int, start: float) -> int:
        """Connections ``port`` took and closed without a byte of answer, from ``start`` on."""
        return sum(1 for p, closed in list(self.unanswered) if p == port and closed >= start)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _connect(
        self,
    ) -> tuple[int, float, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """An upstream's connection, and when it was chosen (``time.monotonic()``)."""
        # NOTE: a span starts when the upstream is chosen, not once connected: a health check
        # may drop that upstream while the connect is awaited, and a drill that counts what was
        # routed to a dead replica before it was dropped must count this connection too.
        chosen_at = time.monotonic()
        healthy = [p for p in self.upstreams if p in self._healthy]
        if not healthy:
            self.unchecked.append(time.monotonic())
        # NOTE: the healthy upstreams in turn, then the others: as nginx does, an upstream whose
        # last check failed (a slow answer on a starved machine) is still tried before the
        # request is given up, so only a replica that refused or dropped it fails it.
        order = [healthy[(self._next + i) % len(healthy)] for i in range(len(healthy))]
        order += [p for p in self.upstreams if p not in order]
        for port in order:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue  # refused: the next upstream (nothing was sent yet)
            if port in healthy:
                self._next = (healthy.index(port) + 1) % len(healthy)
            return port, chosen_at, reader, writer
        self.abandoned.append(time.monotonic())
        return None

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._writers.add(client_w)
        upstream = await self._connect()
        if upstream is None:
            self._writers.discard(client_w)
            client_w.transport.abort()
            return
        port, chosen_at, up_r, up_w = upstream
        self._writers.add(up_w)
        self.active[port] += 1
        self.served[port] += 1
        closed: list[float] = []
        self.spans.append((port, chosen_at, closed))
        answered: list[bool] = []
        pipes = [asyncio.ensure_future(_pipe(client_r, up_w)),
                 asyncio.ensure_future(_pipe(up_r, client_w, answered))]  # fmt: skip
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.append(time.monotonic())
            if not answered:
                self.unanswered.append((port, closed[0]))
            self.active[port] -= 1
            for pipe in pipes:
                pipe.cancel()
            for writer in (up_w, client_w):
                self._writers.discard(writer)
                writer.close()

    async def _start_health_checks(self) -> None:
        self._checks = asyncio.ensure_future(self._check_forever())

    async def _stop_health_checks(self) -> None:
        self._checking = False
        if self._checks is not None:
            self._checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checks

    async def _check_forever(self) -> None:
        # NOTE: a flag as well as the cancel: on Python 3.11 a cancel that lands as an awaited
        # step completes can be swallowed, and the loop would then run on (and close() hang).
        while self._checking:
            for port in self.upstreams:
                if await _http_ok(port, self.health_path):
                    self._healthy.add(port)
                else:
                    self._healthy.discard(port)
            await asyncio.sleep(HEALTH_INTERVAL_S)


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, moved: list[bool] | None = None
) -> None:
    """Copy ``reader`` to ``writer`` until either ends; ``moved`` gets True once bytes passed."""
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            if moved is not None and not moved:
                moved.append(True)
            writer.write(data)
            await writer.drain()


async def _http_ok(port: int, path: str) -> bool:
    # NOTE: asyncio.timeout, not wait_for: wait_for on Python 3.11 may swallow a cancel.
    try:
        async with asyncio.timeout(1.0):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        async with asyncio.timeout(1.0):
            status = await reader.readline()
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        writer.close()


# --- load -----------------------------------------------------------------------------------


def fp32_request(values: list[float]) -> bytes:
    """A KServe v2 JSON request: one FP32 ``INPUT0`` of shape [1, len(values)]."""
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, len(values)], "data": values}
    return json.dumps({"inputs": [tensor]}).encode()


IDENTITY_REQUEST = fp32_request([1, 2, 3, 4])


def infer(
    port: int, model: str = "identity", body: bytes = IDENTITY_REQUEST, *, token: str = ""
) -> dict[str, Any]:
    """One KServe v2 JSON inference on its own connection (with ``token``, as a bearer); the
    response, or an error raised."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": "application/json", "Connection": "close"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        connection.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")
        return dict(json.loads(payload))
    finally:
        connection.close()


class Load:
    """``clients`` threads sending inference requests to ``port`` until stopped; every request on
    a new connection, so the proxy balances each one."""

    def __init__(
        self,
        port: int,
        *,
        clients: int = 3,
        model: str = "identity",
        body: bytes = IDENTITY_REQUEST,
    ) -> None:
        self.port, self.model, self.body = port, model, body
        self.ok = 0
        self.failures: list[str] = []
        self.failed_at: list[float] = []  # time.monotonic() of each failure
        self.versions: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                answer = infer(self.port, self.model, self.body)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and kept
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    self.failed_at.append(time.monotonic())
                continue
            with self._lock:
                self.ok += 1
                self.versions[str(answer.get("model_version"))] += 1

    def wait_for_requests(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until ``count`` more requests succeeded."""
        target = self.ok + count
        deadline = time.monotonic() + timeout_s
        while self.ok < target:
            assert time.monotonic() < deadline, f"load stalled at {self.ok} requests"
            time.sleep(0.05)


# --- serving processes ----------------------------------------------------------------------


def serve(
    args: list[str], log: Path, *, base_env: dict[str, str] | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """``manage.py serve ARGS`` as a real process, its output in ``log``; its environment is
    ``base_env`` (this process's by default) plus ``env``."""
    inherited = os.environ if base_env is None else base_env
    environment = {**inherited, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "serve", *args],
                                cwd=ROOT, env=environment, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def http_status(port: int, path: str) -> int:
    """The status of ``GET path`` (0 when nothing answers)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def wait_until(
    predicate: Any, what: str, timeout_s: float = 60.0, log: Path | None = None
) -> float:
    """Seconds until ``predicate()`` held."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
            raise AssertionError(f"{what}: not within {timeout_s}s\n{tail}")
        time.sleep(0.1)
    return time.monotonic() - started


@contextlib.contextmanager
def stopped_at_exit(*processes: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
