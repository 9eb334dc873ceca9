"""An HTTP front-end process: uvicorn on the shared HTTP port, relaying requests to the server.

``python -m serving.protocol.http.frontend --fd N --host HOST --port PORT [limits]``. It binds
with ``SO_REUSEPORT`` beside its siblings and parses HTTP with the same uvicorn protocol as the
in-process listener (httptools, the header and body deadlines), then relays each request's head
and body as they arrive over the Unix socket ``N`` (framing: ``relay_wire``) to the serving
process, which runs the restricted-API, token and in-flight checks and the app, and streams the
answer back. It holds no token, key or model; it stops accepting on SIGTERM, lets its requests
finish (``--grace-s``) and exits, and exits at once when the serving process's end of the socket
closes (its open requests get 503, or are cut short if their answer had begun).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import logging
import signal
import socket
from collections.abc import MutableMapping
from typing import Any

import orjson
import uvloop

from serving.protocol.http import relay_wire as wire
from serving.protocol.http.exchange import Exchange
from serving.protocol.http.listener import data_plane_server
from serving.protocol.http.whole_answer import WHOLE_ANSWER_BYTES, whole_answer

logger = logging.getLogger("serving.http.frontend")

Message = MutableMapping[str, Any]
_LOST = -1  # a pseudo-kind: the serving process went away
_GONE_ANSWER = orjson.dumps({"error": "the server's front-end lost its server"})


class PendingAnswer:
    """The frames that answer one relayed request, as they arrive, and one waiter at a time."""

    __slots__ = ("frames", "_waiter")

    def __init__(self) -> None:
        self.frames: collections.deque[tuple[int, bytes]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, kind: int, payload: bytes) -> None:
        self.frames.append((kind, payload))
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class Relay(asyncio.Protocol):
    """The front-end's end of the socket: frames out leave coalesced, one write per loop turn;
    frames in go to the request they answer."""

    def __init__(self, lost: asyncio.Event) -> None:
        self._writer = wire.FrameWriter()
        self.send = self._writer.send
        self._answers: dict[int, PendingAnswer] = {}
        self._ids = itertools.count(1)
        self._reader = wire.FrameReader(self._on_frame)
        self._lost = lost
        self.caught_up = self._writer.caught_up  # no request reads on while the server is behind

    def pause_writing(self) -> None:
        self._writer.pause()

    def resume_writing(self) -> None:
        self._writer.resume()

    def connection_made(self, transport: Any) -> None:
        self._writer.hold_back(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._writer.transport = None
        for answer in self._answers.values():
            answer.put(_LOST, b"")
        self._writer.resume()
        self._lost.set()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def _on_frame(self, call: int, kind: int, payload: bytes) -> None:
        answer = self._answers.get(call)
        if answer is not None:  # a request whose client left meanwhile has none: dropped
            answer.put(kind, payload)

    @property
    def connected(self) -> bool:
        return self._writer.transport is not None

    def open(self) -> tuple[int, PendingAnswer]:
        call, answer = next(self._ids), PendingAnswer()
        self._answers[call] = answer
        if not self.connected:
            answer.put(_LOST, b"")
        return call, answer

    def close(self, call: int) -> None:
        self._answers.pop(call, None)


class RelayApp:
    """The ASGI app of a front-end: every HTTP request, relayed. A body goes on piece by piece as
    it comes, while the serving process keeps up (``relay_frames.HIGH_WATER``); the serving
    process's in-flight, size and held-bytes caps refuse a request as in-process."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] != "http":
            return
        relay = self.relay
        call, answer = relay.open()
        try:
            await relay.caught_up()
            message = await receive()
            more = bool(message.get("more_body"))
            head = wire.encode_head(scope, more_body=more)
            body = message.get("body", b"")
            relay.send(wire.frame(call, wire.REQUEST, wire.unary_payload(head, body)))
            watcher = asyncio.ensure_future(_relay_body(relay, call, receive, more))
            watcher.add_done_callback(lambda _: answer.wake())
            try:
                await _answer(relay, call, answer, watcher, send, whole_answer(scope))
            finally:
                watcher.cancel()
        finally:
            relay.close(call)


async def _relay_body(relay: Relay, call: int, receive: Any, more: bool) -> None:
    """The rest of the body as it comes, then (uvicorn's ``receive`` answering only then) the
    client going away; returns when it did."""
    while more:
        await relay.caught_up()
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        more = bool(message.get("more_body"))
        kind = wire.REQUEST_BODY if more else wire.REQUEST_END
        relay.send(wire.frame(call, kind, message.get("body", b"")))
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(
    relay: Relay,
    call: int,
    answer: PendingAnswer,
    gone: asyncio.Future[None],
    send: Any,
    writer: Exchange | None,
) -> None:
    started = False
    while True:
        while answer.frames:
            kind, payload = answer.frames.popleft()
            if kind == wire.START:
                status, headers = wire.decode_start(payload)
                if _written_whole(answer, status, headers, writer):
                    return
                started = True
                await send({"type": "http.response.start", "status": status, "headers": headers})
            elif kind in (wire.BODY, wire.END):
                more = kind == wire.BODY
                await send({"type": "http.response.body", "body": payload, "more_body": more})
                if not more:
                    return
                if relay.connected:  # the client took it: the server may send one more
                    relay.send(wire.frame(call, wire.DELIVERED))
            elif kind == _LOST:
                await _server_lost(send, started)
                return
        if gone.done():
            if relay.connected:
                relay.send(wire.frame(call, wire.DISCONNECT))
            return
        await answer.wait()


def _written_whole(
    answer: PendingAnswer, status: int, headers: Any, writer: Exchange | None
) -> bool:
    """An answer whose end has come with its start leaves in one write (most of them: the
    serving process sends a small answer's frames in one write)."""
    if writer is None or not answer.frames or answer.frames[0][0] != wire.END:
        return False
    body = answer.frames[0][1]
    if len(body) > WHOLE_ANSWER_BYTES or not writer.write_whole(status, headers, body):
        return False
    answer.frames.popleft()
    return True


async def _server_lost(send: Any, started: bool) -> None:
    if started:  # the answer is cut short: the client sees the connection end mid-body
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _GONE_ANSWER})


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    lost, stop = asyncio.Event(), asyncio.Event()
    relay = Relay(lost)
    await loop.create_unix_connection(lambda: relay, sock=socket.socket(fileno=args.fd))
    try:
        sock = _listen(args.host, args.port)
    except OSError as exc:
        raise SystemExit(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    server = data_plane_server(
        RelayApp(relay),
        header_timeout_s=args.header_timeout_s,
        body_timeout_s=args.body_timeout_s,
        send_timeout_s=args.send_timeout_s,
        graceful_shutdown_s=args.grace_s,
    )
    task = asyncio.create_task(server._serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    relay.send(wire.frame(0, wire.READY))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    if lost.is_set():
        server.force_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=args.grace_s + 1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.protocol.http.frontend")
    parser.add_argument("--fd", type=int, required=True, help="the relay socket's descriptor")
    parser.add_argument("--host", required=True, help="the address to listen on (SO_REUSEPORT)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--header-timeout-s", type=float, default=30.0)
    parser.add_argument("--body-timeout-s", type=float, default=60.0)
    parser.add_argument("--send-timeout-s", type=float, default=60.0)
    parser.add_argument("--grace-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvloop.run(serve(args))


if __name__ == "__main__":
    main()
