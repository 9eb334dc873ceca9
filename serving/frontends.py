"""``serve --workers N``: N front-end processes per protocol on its port, one serving process.

Each front-end (``serving.protocol.grpc.frontend``, ``serving.protocol.http.frontend``) listens
on its protocol's port with ``SO_REUSEPORT`` and relays what its clients send over its own Unix
socket pair; this process runs every call and request (``serving.protocol.grpc.relay``,
``serving.protocol.http.relay``), so there is one scheduler and one queue per model, and
statistics, metrics, the registry source and the access table stay one per replica. The port is
held here by a bound, never listening socket, so a front-end that restarts gets the same port
back. Front-ends start contained like model
processes (``launch``: allow-listed environment, no secrets, death with the server), are
restarted when one dies (at most ``MAX_RESTARTS`` within ``RESTART_WINDOW_S``, then its slot
stays empty and an error says so), and get SIGTERM on shutdown, then SIGKILL past the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from serving.backends.python import launch

logger = logging.getLogger("serving.frontends")

READY_TIMEOUT_S = 60.0
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


class FrontendStartError(RuntimeError):
    """A front-end did not listen in time (or exited before it did)."""


class Frontend:
    """One front-end slot: its process, its socket, its restarts."""

    def __init__(self, pool: FrontendPool, index: int) -> None:
        self.pool, self.index = pool, index
        self.process: subprocess.Popen[bytes] | None = None
        self.connection: Any = None  # this process's end of the socket (pool.connect)
        self.ready = asyncio.Event()
        self.gone = asyncio.Event()
        self.restarts: deque[float] = deque()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ready, self.gone = asyncio.Event(), asyncio.Event()
        try:
            command = [sys.executable, "-m", self.pool.module, "--fd", str(theirs.fileno()),
                       *self.pool.arguments]  # fmt: skip
            self.process = await loop.run_in_executor(
                None, lambda: launch.launch(command, pass_fds=(theirs.fileno(),))
            )
        finally:
            theirs.close()
        connection = self.pool.connect(self.ready.set, self._lost)
        self.connection = connection
        await loop.create_unix_connection(lambda: connection, sock=ours)
        await self._wait_ready()

    async def _wait_ready(self) -> None:
        ready = asyncio.ensure_future(self.ready.wait())
        gone = asyncio.ensure_future(self.gone.wait())
        await asyncio.wait([ready, gone], timeout=READY_TIMEOUT_S, return_when="FIRST_COMPLETED")
        ready.cancel()
        gone.cancel()
        if not self.ready.is_set():
            self.kill()
            raise FrontendStartError(
                f"{self.pool.protocol} front-end {self.index} did not listen on "
                f"{self.pool.address} within {READY_TIMEOUT_S:.0f} s"
            )

    def _lost(self) -> None:
        self.gone.set()
        if self.ready.is_set() and not self.pool.stopping:
            self.pool.spawn(self._restart())

    async def _restart(self) -> None:
        code = await self._reap(timeout_s=5.0)
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > RESTART_WINDOW_S:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_RESTARTS:
            logger.error(
                "%s front-end %d %s; not restarted: %d restarts within %.0f s",
                self.pool.protocol, self.index, code, MAX_RESTARTS, RESTART_WINDOW_S,
            )  # fmt: skip
            return
        self.restarts.append(now)
        logger.warning("%s front-end %d %s; restarting it", self.pool.protocol, self.index, code)
        try:
            await self.start()
        except (FrontendStartError, OSError) as exc:
            logger.error(
                "%s front-end %d could not restart: %s", self.pool.protocol, self.index, exc
            )

    async def _reap(self, timeout_s: float) -> str:
        """Wait for the process to end (SIGKILL past ``timeout_s``); how it ended."""
        process = self.process
        if process is None:
            return "exited"
        loop = asyncio.get_running_loop()
        try:
            code = await asyncio.wait_for(loop.run_in_executor(None, process.wait), timeout_s)
        except TimeoutError:
            self.kill()
            code = await loop.run_in_executor(None, process.wait)
        return launch.exit_description(code)

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.process is not None:
            launch.kill(self.process)
        if self.connection is not None:
            self.connection.close()


class FrontendPool:
    """The N front-ends of one protocol of one serving process, and the port they share.

    ``module`` is the front-end's ``python -m`` module, started with ``--fd`` (its end of the
    socket) and ``arguments``; ``connect(on_ready, on_lost)`` makes this process's end of a
    front-end's socket (an ``asyncio.Protocol`` with ``close``)."""

    def __init__(
        self, protocol: str, count: int, host: str, port: int, *, module: str,
        arguments: Callable[[str, int], list[str]],
        connect: Callable[[Callable[[], None], Callable[[], None]], Any], grace_s: float,
    ) -> None:  # fmt: skip
        self.protocol, self.module, self.connect = protocol, module, connect
        self.grace_s = grace_s
        self.stopping = False
        self._reservation = _reserve(host, port)
        self.port = int(self._reservation.getsockname()[1])
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.arguments = arguments(host, self.port)
        self.frontends = [Frontend(self, index) for index in range(count)]
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            await asyncio.gather(*(frontend.start() for frontend in self.frontends))
        except BaseException:
            await self.stop(grace_s=0.0)
            raise
        pids = ", ".join(str(f.process.pid) for f in self.frontends if f.process is not None)
        logger.info("%s front-ends listening on %s (pids %s)", self.protocol, self.address, pids)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM: each stops accepting and finishes its calls; SIGKILL past ``grace_s``."""
        self.stopping = True
        for task in list(self._tasks):
            task.cancel()
        for frontend in self.frontends:
            frontend.terminate()
        await asyncio.gather(
            *(frontend._reap(timeout_s=grace_s + 1.0) for frontend in self.frontends),
            return_exceptions=True,
        )
        for frontend in self.frontends:
            if frontend.connection is not None:
                frontend.connection.close()
        self._reservation.close()


def _reserve(host: str, port: int) -> socket.socket:
    """Bind (never listen on) the port with SO_REUSEPORT: the front-ends join it, and it stays
    this replica's while one restarts.

    NOTE: SO_REUSEPORT lets any socket of the same user with the option join a port, so a port
    that another server's front-ends already listen on would be shared with it, splitting its
    traffic, where an in-process listener fails with "address in use". A plain bind first
    (which any listener, sharing or not, refuses) makes the port's owner fail the same way."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        probe.bind((host, port))
        port = int(probe.getsockname()[1])
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
