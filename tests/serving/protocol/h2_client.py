"""A bare HTTP/2 client (the ``h2`` library over a socket) for the gRPC listener's tests: it sends
what grpc's own clients never would (two messages to a unary method, an unknown compression, a
``grpc-timeout`` the server must enforce, a reset mid-call) and reads back exactly what came."""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from collections.abc import Sequence

from h2 import events
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes


@dataclasses.dataclass
class Answer:
    headers: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    data: bytes = b""
    trailers: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    reset: int | None = None  # RST_STREAM's error code, when the server reset the stream
    closed: bool = False  # the server closed the connection
    finished: bool = False  # the server ended or reset the stream

    @property
    def grpc_status(self) -> int | None:
        value = self.trailers.get(b"grpc-status", self.headers.get(b"grpc-status"))
        return None if value is None else int(value)

    @property
    def grpc_message(self) -> str:
        value = self.trailers.get(b"grpc-message", self.headers.get(b"grpc-message", b""))
        return value.decode()

    def messages(self) -> list[bytes]:
        out, data = [], self.data
        while len(data) >= 5:
            _, length = struct.unpack(">BI", data[:5])
            out.append(data[5 : 5 + length])
            data = data[5 + length :]
        return out


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), len(payload)) + payload


class RawGrpc:
    """One HTTP/2 connection to ``host:port``; each ``call`` opens a stream on it."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.h2 = H2Connection(config=H2Configuration(client_side=True, header_encoding=None))
        self.answers: dict[int, Answer] = {}  # what came on each stream, as the frames are read
        self.h2.initiate_connection()
        self._flush()
        self._take_settings()

    def _take_settings(self) -> None:
        """Read the server's first frames, so that its windows (larger than HTTP/2's 64 KiB
        default) apply to what this client sends."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection at once")
            received = self.h2.receive_data(data)
            self._flush()
            if any(isinstance(event, events.WindowUpdated) for event in received):
                return
        raise TimeoutError("no window update from the server")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawGrpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def open(
        self,
        method: str,
        *,
        content_type: bytes = b"application/grpc",
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> int:
        sid = self.h2.get_next_available_stream_id()
        headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
                   (b":authority", b"localhost"), (b"content-type", content_type),
                   (b"te", b"trailers"), *extra]  # fmt: skip
        self.h2.send_headers(sid, headers)
        self._flush()
        return sid

    def send(self, sid: int, data: bytes, end: bool = False) -> None:
        self.h2.send_data(sid, data, end_stream=end)
        self._flush()

    def send_until_held(self, sid: int, message: bytes, quiet_s: float = 1.0) -> int:
        """Send ``message`` again and again on ``sid`` as far as the server's windows let it,
        taking in the server's frames between sends but acknowledging none of its answers,
        until no room has come for ``quiet_s`` or the server ends the stream (its answer is
        then in ``answers``); returns how many went."""
        sent, quiet_since = 0, time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            if sid in self.answers and self.answers[sid].finished:
                break
            room = min(self.h2.local_flow_control_window(sid), self.h2.outbound_flow_control_window)
            if room >= len(message):
                self.send(sid, message)
                sent, quiet_since = sent + 1, time.monotonic()
                continue
            self.sock.settimeout(0.1)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                raise ConnectionError("the server closed the connection")
            self._take(data, acknowledge=False)
            self._flush()
        return sent

    def reset(self, sid: int) -> None:
        self.h2.reset_stream(sid, ErrorCodes.CANCEL)
        self._flush()

    def open_and_reset(self, method: str, count: int) -> None:
        """HTTP/2 "rapid reset": ``count`` calls, each opened and reset at once, in one write;
        never more than one is open, so no stream limit applies."""
        for _ in range(count):
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                       (b":path", method.encode()), (b":authority", b"localhost"),
                                       (b"content-type", b"application/grpc")])  # fmt: skip
            self.h2.reset_stream(sid, ErrorCodes.CANCEL)
        self._flush()

    def call(
        self,
        method: str,
        messages: Sequence[bytes],
        *,
        content_type: bytes = b"application/grpc",
        extra: Sequence[tuple[bytes, bytes]] = (),
        timeout_s: float = 10.0,
    ) -> Answer:
        sid = self.open(method, content_type=content_type, extra=extra)
        payload = b"".join(messages)
        self.send(sid, payload, end=True)
        return self.wait(sid, timeout_s)

    def wait(self, sid: int, timeout_s: float = 10.0, *, acknowledge: bool = True) -> Answer:
        """Read until the server ends stream ``sid`` (or the connection): its answer. With
        ``acknowledge`` false, its data is read but no window given back (``_take``)."""
        answer = self.answers.setdefault(sid, Answer())
        deadline = time.monotonic() + timeout_s
        while not answer.finished and (data := self._receive(deadline)) is not None:
            if not data:
                answer.closed = True
                return answer
            self._take(data, acknowledge=acknowledge)
            try:
                self._flush()
            except (BrokenPipeError, ConnectionResetError):  # the server has closed
                answer.closed = True
                return answer
        if answer.finished:
            return answer
        raise TimeoutError(f"stream {sid} did not end within {timeout_s} s")

    def _take(self, data: bytes, *, acknowledge: bool = True) -> None:
        """Feed what the server sent to the protocol, each stream's frames into its answer in
        ``answers``; answer data is given back to the server's window unless ``acknowledge``
        is false (a client that reads no answers)."""
        for event in self.h2.receive_data(data):
            sid = getattr(event, "stream_id", 0)
            if not sid:
                continue
            answer = self.answers.setdefault(sid, Answer())
            if isinstance(event, events.ResponseReceived):
                answer.headers = dict(event.headers)
            elif isinstance(event, events.DataReceived):
                answer.data += event.data
                if acknowledge:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, events.TrailersReceived):
                answer.trailers = dict(event.headers)
            elif isinstance(event, events.StreamReset):
                answer.reset, answer.finished = event.error_code, True
            elif isinstance(event, events.StreamEnded):
                answer.finished = True

    def wait_for_goaway(self, timeout_s: float = 10.0) -> int | None:
        """Read until the server ends the connection: its GOAWAY's error code (None: it closed
        without one). TimeoutError if the connection is still open after ``timeout_s``."""
        code = None
        deadline = time.monotonic() + timeout_s
        while (data := self._receive(deadline)) is not None:
            if not data:
                return code
            for event in self.h2.receive_data(data):
                if isinstance(event, events.ConnectionTerminated):
                    code = event.error_code
        raise TimeoutError(f"the connection was still open after {timeout_s} s")

    def _receive(self, deadline: float) -> bytes | None:
        """What the server sent next: ``b""`` once it closed, None if nothing came in time."""
        if time.monotonic() >= deadline:
            return None
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            return self.sock.recv(65536)
        except TimeoutError:
            return None
        except ConnectionResetError:  # closed with our data unread: the kernel resets
            return b""
