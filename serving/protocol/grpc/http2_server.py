"""The gRPC listener on the loop's own transport (``--grpc-transport h2``; the default is
h2corn's, ``asgi_server``): a TCP (or TLS, ALPN ``h2``) server whose connections are
``GrpcHttp2Connection``s, serving the same handlers as grpc.aio would (``register_services``,
behind the edge interceptor).

``stop(grace_s)`` is grpc.aio's graceful stop: no new connections, a GOAWAY on each open one so
its clients open no new calls here, the calls already running finish within the grace, and what
is left after it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from serving.core.request_bytes import RequestBytesBudget
from serving.protocol.grpc.arriving import ArrivingMessages
from serving.protocol.grpc.calls import Dispatcher
from serving.protocol.grpc.http2_connection import GrpcHttp2Connection, HeldBytes


class Http2GrpcServer:
    """Listens for gRPC clients and serves every call on this process's loop."""

    def __init__(
        self,
        register: Callable[[Any], None],
        *,
        interceptors: Sequence[Any] = (),
        max_message_bytes: int,
        send_timeout_s: float = 60.0,
        tls: ssl.SSLContext | None = None,
        request_bytes: RequestBytesBudget | None = None,
    ) -> None:
        self._dispatcher = Dispatcher(register, interceptors)
        self._max_message_bytes = max_message_bytes
        self._send_timeout_s = send_timeout_s
        self._tls = tls
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[GrpcHttp2Connection] = set()
        self.held = HeldBytes(max_message_bytes)  # request bytes all connections' calls hold
        # The replica's request-bytes budget, for unary calls' messages while they arrive and
        # for answers while they wait for their clients' windows.
        self.arriving = ArrivingMessages.of(request_bytes)
        self._answers = request_bytes if self.arriving is not None else None
        self._reads_held = False

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen on ``host:port`` (port 0: a free one); returns the bound port. ``reuse_port``:
        share the port with sibling front-end processes (``SO_REUSEPORT``)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connection, host or None, port, ssl=self._tls, reuse_address=True,
            reuse_port=reuse_port or None, backlog=2048,
        )  # fmt: skip
        return int(self._server.sockets[0].getsockname()[1])

    def _connection(self) -> GrpcHttp2Connection:
        return GrpcHttp2Connection(
            self._dispatcher,
            max_message_bytes=self._max_message_bytes,
            send_timeout_s=self._send_timeout_s,
            on_open=self._opened,
            on_close=self.connections.discard,
            listener_held=self.held,
            arriving=self.arriving,
            answers=self._answers,
        )

    def _opened(self, connection: GrpcHttp2Connection) -> None:
        self.connections.add(connection)
        if self._reads_held:
            connection.hold_reads(True)

    def hold_reads(self, held: bool) -> None:
        """Read nothing more from any client while ``held``: a front-end's serving process is
        behind (``relay_frames.HIGH_WATER``), so its clients' bytes wait in their flow control."""
        self._reads_held = held
        for connection in self.connections:
            connection.hold_reads(held)

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.close()
        open_now = list(self.connections)
        for connection in open_now:
            connection.begin_close()
        if open_now:
            idle = [asyncio.ensure_future(c.wait_idle()) for c in open_now]
            _, late = await asyncio.wait(idle, timeout=grace_s)
            for waiter in late:
                waiter.cancel()
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
