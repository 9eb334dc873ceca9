"""A gRPC front-end process: the shared gRPC port's calls, relayed as raw bytes to the server.

``python -m serving.protocol.grpc.frontend --fd N --address HOST:PORT --max-message-bytes B
[--transport h2corn|h2|grpcio]``. It binds with ``SO_REUSEPORT`` beside its siblings and listens
with the serving process's own gRPC transport (the HTTP/2 listener of ``http2_server``, h2corn's
of ``asgi_server``, or grpc.aio), serves every method with a generic handler that never decodes
a message, and relays each call over the Unix socket ``N`` (framing: ``relay_wire``) to the
serving process, which runs the servicer, the edge checks and the access check and answers with
the status and the response bytes. It holds no token, key or model; it stops accepting on SIGTERM,
lets its calls finish (``--grace-s``) and exits, and exits at once when the serving process's end of
the socket closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import uvloop

from serving.protocol.grpc import relay_wire as wire
from serving.protocol.grpc.asgi_server import H2cornGrpcServer
from serving.protocol.grpc.http2_server import Http2GrpcServer

logger = logging.getLogger("serving.grpc.frontend")

# Methods relayed as streams (the wire does not tell a unary call from a stream; the method does).
STREAM_METHODS = frozenset(
    ("/inference.GRPCInferenceService/ModelStreamInfer", "/grpc.health.v1.Health/Watch")
)
MAX_CACHED_METHODS = 64
_STATUS = {code.value[0]: code for code in grpc.StatusCode}


class Relay(asyncio.Protocol):
    """The front-end's end of the socket: frames out are coalesced into one write per loop turn;
    frames in are routed to the call they answer."""

    def __init__(self, lost: asyncio.Event) -> None:
        self._transport: asyncio.Transport | None = None
        self._writer = wire.FrameWriter()
        self.send = self._writer.send
        self._calls: dict[int, asyncio.Queue[tuple[int, bytes]]] = {}  # streams
        self._credits: dict[int, asyncio.Semaphore] = {}  # requests a stream may still send
        self._unary: dict[int, asyncio.Future[tuple[bytes, bytes]]] = {}  # (body, status)
        self._bodies: dict[int, bytes] = {}
        self._ids = itertools.count(1)
        self._reader = wire.FrameReader(self._on_frame)
        self._lost = lost
        self.caught_up = self._writer.caught_up  # no call reads on while the server is behind
        self.on_behind: Callable[[bool], None] | None = None  # the same, for a push listener

    def pause_writing(self) -> None:
        self._writer.pause()
        if self.on_behind is not None:
            self.on_behind(True)

    def resume_writing(self) -> None:
        self._writer.resume()
        if self.on_behind is not None:
            self.on_behind(False)

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._writer.hold_back(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = self._writer.transport = None
        self.resume_writing()
        for queue in self._calls.values():  # every open call ends UNAVAILABLE
            queue.put_nowait((wire.STATUS, b""))
        for waiter in self._unary.values():
            if not waiter.done():
                waiter.set_result((b"", b""))
        self._lost.set()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def _on_frame(self, call: int, kind: int, payload: bytes) -> None:
        waiter = self._unary.get(call)
        if waiter is not None:
            if kind == wire.MESSAGE:
                self._bodies[call] = payload
            elif kind == wire.STATUS and not waiter.done():
                waiter.set_result((self._bodies.pop(call, b""), payload))
            return
        if kind == wire.CREDIT:
            credits = self._credits.get(call)
            if credits is not None:
                credits.release()
            return
        queue = self._calls.get(call)
        if queue is not None:  # a call cancelled meanwhile has no queue: its answer is dropped
            queue.put_nowait((kind, payload))

    def open(self) -> tuple[int, asyncio.Queue[tuple[int, bytes]]]:
        call = next(self._ids)
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
        self._calls[call] = queue
        self._credits[call] = asyncio.Semaphore(wire.STREAM_WINDOW)
        return call, queue

    def credits(self, call: int) -> asyncio.Semaphore:
        return self._credits[call]

    def open_unary(self) -> tuple[int, asyncio.Future[tuple[bytes, bytes]]]:
        call = next(self._ids)
        waiter: asyncio.Future[tuple[bytes, bytes]] = asyncio.get_running_loop().create_future()
        self._unary[call] = waiter
        if self._transport is None:
            waiter.set_result((b"", b""))
        return call, waiter

    def close(self, call: int) -> None:
        self._calls.pop(call, None)
        self._credits.pop(call, None)
        self._unary.pop(call, None)
        self._bodies.pop(call, None)

    @property
    def connected(self) -> bool:
        return self._transport is not None


def _header(method: str, context: Any) -> bytes:
    metadata = tuple((m.key, m.value) for m in context.invocation_metadata() or ())
    return wire.encode_header(method, metadata, context.peer(), context.time_remaining())


async def _finish(context: Any, payload: bytes) -> None:
    """Apply a ``STATUS`` frame: OK returns; anything else aborts the call with it."""
    if not payload:  # the serving process went away
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the server's front-end lost its server")
    code, details, trailing = wire.decode_status(payload)
    if trailing:
        context.set_trailing_metadata(trailing)
    if code != grpc.StatusCode.OK.value[0]:
        await context.abort(_STATUS.get(code, grpc.StatusCode.UNKNOWN), details)


class RelayHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method: raw bytes in, raw bytes out, through the relay."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        # NOTE: grpc asks on every call; one handler per method serves them all (a bounded
        # number: a client chooses method names, the server answers unknown ones).
        handler = self._handlers.get(details.method)
        if handler is None:
            handler = self._relaying(details.method)
            if len(self._handlers) < MAX_CACHED_METHODS:
                self._handlers[details.method] = handler
        return handler

    def _relaying(self, method: str) -> grpc.RpcMethodHandler:
        relay = self.relay
        if method in STREAM_METHODS:

            async def stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
                async for answer in _relay_stream(relay, method, requests, context):
                    yield answer

            return grpc.stream_stream_rpc_method_handler(stream)

        async def unary(request: bytes, context: Any) -> bytes:
            call, waiter = relay.open_unary()
            try:
                header = _header(method, context)
                relay.send(wire.frame(call, wire.UNARY, wire.unary_payload(header, request)))
                body, status = await waiter
                await _finish(context, status)
                return body
            except asyncio.CancelledError:
                if relay.connected:
                    relay.send(wire.frame(call, wire.CANCEL))
                raise
            finally:
                relay.close(call)

        return grpc.unary_unary_rpc_method_handler(unary)


async def _relay_stream(
    relay: Relay, method: str, requests: AsyncIterator[bytes], context: Any
) -> AsyncIterator[bytes]:
    call, queue = relay.open()
    credits = relay.credits(call)
    relay.send(wire.frame(call, wire.OPEN, _header(method, context)))

    async def pump() -> None:
        async for message in requests:
            await credits.acquire()  # NOTE: meanwhile the client's messages wait in gRPC
            relay.send(wire.frame(call, wire.MESSAGE, message))
        relay.send(wire.frame(call, wire.END))

    pumping = asyncio.create_task(pump())
    finished = False
    try:
        while True:
            kind, payload = await queue.get()
            if kind == wire.MESSAGE:
                yield payload  # resumes once the client's side took it (gRPC's flow control)
                relay.send(wire.frame(call, wire.DELIVERED))
            elif kind == wire.STATUS:
                finished = True
                await _finish(context, payload)
                return
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pumping
        if not finished and relay.connected:
            relay.send(wire.frame(call, wire.CANCEL))
        relay.close(call)


async def serve(
    fd: int, address: str, max_message_bytes: int, grace_s: float, transport: str = "h2corn",
    send_timeout_s: float = 60.0,
) -> None:  # fmt: skip
    loop = asyncio.get_running_loop()
    lost, stop = asyncio.Event(), asyncio.Event()
    sock = socket.socket(fileno=fd)
    relay = Relay(lost)
    await loop.create_unix_connection(lambda: relay, sock=sock)
    handlers = (RelayHandler(relay),)
    listener: Any
    if transport != "grpcio":
        register = lambda target: target.add_generic_rpc_handlers(handlers)  # noqa: E731
        if transport == "h2corn":
            listener = H2cornGrpcServer(
                register, max_message_bytes=max_message_bytes, grace_s=grace_s,
                send_timeout_s=send_timeout_s, read_gate=relay.caught_up,
            )  # fmt: skip
        else:
            listener = Http2GrpcServer(
                register, max_message_bytes=max_message_bytes, send_timeout_s=send_timeout_s
            )
            relay.on_behind = listener.hold_reads
        host, port = address.rsplit(":", 1)
        try:
            await listener.start(host.strip("[]"), int(port), reuse_port=True)
        except OSError as exc:
            raise SystemExit(f"cannot listen on {address}: {exc}") from None
    else:
        listener = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 1),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes),
            ]
        )
        listener.add_generic_rpc_handlers(handlers)
        if listener.add_insecure_port(address) == 0:
            raise SystemExit(f"cannot listen on {address}")
        await listener.start()
    relay.send(wire.frame(0, wire.READY))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    grace = 0 if lost.is_set() else grace_s
    if transport != "grpcio":
        await listener.stop(grace)
    else:
        await listener.stop(grace=grace)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.protocol.grpc.frontend")
    parser.add_argument("--fd", type=int, required=True, help="the relay socket's descriptor")
    parser.add_argument("--address", required=True, help="HOST:PORT to listen on (SO_REUSEPORT)")
    parser.add_argument("--max-message-bytes", type=int, required=True)
    parser.add_argument("--grace-s", type=float, default=30.0)
    parser.add_argument("--send-timeout-s", type=float, default=60.0)
    parser.add_argument("--transport", choices=("h2corn", "h2", "grpcio"), default="h2corn")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvloop.run(serve(
        args.fd, args.address, args.max_message_bytes, args.grace_s, args.transport,
        args.send_timeout_s,
    ))  # fmt: skip


if __name__ == "__main__":
    main()
