"""The serving process's end of a gRPC front-end's socket (``serving.protocol.grpc.relay``), fed
frames over a real Unix socket the way a front-end writes them: several to one write."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc

from serving.protocol.grpc import relay_wire as wire
from serving.protocol.grpc.calls import Dispatcher
from serving.protocol.grpc.relay import RelayConnection
from serving.protocol.relay_frames import HEAD

HEADER = wire.encode_header("/test.Echo/Echo", (), "ipv4:127.0.0.1:5", None)


class _Echo(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Answers each request with itself, noting what it ran; a request that starts with
    ``hold`` waits until it is cancelled."""

    def __init__(self) -> None:
        self.ran: list[bytes] = []
        self.cancelled: list[bytes] = []

    def service(self, details: Any) -> grpc.RpcMethodHandler:
        async def echo(request: bytes, context: Any) -> bytes:
            self.ran.append(request)
            try:
                await (asyncio.Event().wait() if request.startswith(b"hold") else asyncio.sleep(0))
            except asyncio.CancelledError:
                self.cancelled.append(request)
                raise
            return request

        return grpc.unary_unary_rpc_method_handler(echo)


@contextlib.asynccontextmanager
async def _relay(echo: _Echo) -> AsyncIterator[tuple[RelayConnection, Any, Any]]:
    """A ``RelayConnection`` on one end of a socket pair; the test writes as a front-end."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dispatcher = Dispatcher(lambda target: target.add_generic_rpc_handlers((echo,)))
    connection = RelayConnection(dispatcher, on_ready=lambda: None, on_lost=lambda: None)
    await asyncio.get_running_loop().create_unix_connection(lambda: connection, sock=ours)
    reader, writer = await asyncio.open_unix_connection(sock=theirs)
    try:
        yield connection, reader, writer
    finally:
        writer.close()
        connection.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _settle() -> None:
    """Let the tasks take their last steps and their callbacks run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def _answers_until(reader: asyncio.StreamReader, call: int) -> dict[int, list[int]]:
    """Every frame's kind by call, read until ``call``'s STATUS."""
    seen: dict[int, list[int]] = {}
    while wire.STATUS not in seen.get(call, []):
        length, number, kind = HEAD.unpack(await reader.readexactly(HEAD.size))
        await reader.readexactly(length)
        seen.setdefault(number, []).append(kind)
    return seen


async def test_calls_cancelled_in_the_read_that_brings_them_never_run_and_leave_nothing() -> None:
    # A front-end coalesces the frames of one loop turn into one write: a call whose client left
    # at once arrives as UNARY (or OPEN) and CANCEL together. Its task is cancelled before its
    # first step, so it must not run, and nothing of it (its request bytes included) may stay.
    echo = _Echo()
    async with _relay(echo) as (connection, reader, writer):
        frames = []
        for call in range(1, 11):
            payload = wire.unary_payload(HEADER, b"gone %d" % call)
            frames += [wire.frame(call, wire.UNARY, payload), wire.frame(call, wire.CANCEL)]
        frames += [wire.frame(11, wire.OPEN, HEADER), wire.frame(11, wire.CANCEL)]
        frames.append(wire.frame(12, wire.UNARY, wire.unary_payload(HEADER, b"stays")))
        writer.write(b"".join(frames))
        seen = await _answers_until(reader, 12)
        assert seen == {12: [wire.MESSAGE, wire.STATUS]}  # the cancelled calls answer nothing
        assert echo.ran == [b"stays"]
        await _settle()
        assert connection.in_flight == 0


async def test_a_call_cancelled_while_it_runs_is_forgotten_too() -> None:
    echo = _Echo()
    async with _relay(echo) as (connection, reader, writer):
        writer.write(wire.frame(1, wire.UNARY, wire.unary_payload(HEADER, b"hold")))
        while not echo.ran:  # it runs: cancel it mid-call
            await asyncio.sleep(0)
        assert connection.in_flight == 1
        writer.write(wire.frame(1, wire.CANCEL))
        writer.write(wire.frame(2, wire.UNARY, wire.unary_payload(HEADER, b"second")))
        seen = await _answers_until(reader, 2)
        assert seen == {2: [wire.MESSAGE, wire.STATUS]}
        assert echo.cancelled == [b"hold"]
        await _settle()
        assert connection.in_flight == 0
