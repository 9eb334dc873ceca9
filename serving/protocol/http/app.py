"""The HTTP edge: KServe v2 REST plus Triton's extensions, as one raw ASGI callable.

No framework: a request is routed by splitting its path once, and the infer path does one body
read, one JSON parse and one ``server.infer``. Every error leaves as ``{"error": "<message>"}`` with
the status from ``serving.protocol.errors.HTTP_STATUS``.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import orjson

from serving.core.model_names import model_name_problem
from serving.core.request_bytes import RequestBytesBudget
from serving.core.server import InferenceServer
from serving.core.types import InferRequest
from serving.errors import (
    InternalError,
    InvalidArgumentError,
    OverloadedError,
    ServingError,
    UnsupportedError,
)
from serving.incidents import IncidentError, report_incident
from serving.protocol.admission import InFlightLimit
from serving.protocol.binary_codec import (
    HEADER_LENGTH_MISSING,
    parse_header_length,
    raw_input,
    split_body,
)
from serving.protocol.config_json import config_to_json
from serving.protocol.errors import HTTP_STATUS
from serving.protocol.http import compression, generate
from serving.protocol.http import relay_wire as wire
from serving.protocol.http.body import Body, BodyBuffer
from serving.protocol.http.disconnect import ClientDisconnected, Message, Receive, until_disconnect
from serving.protocol.http.whole_answer import (
    WHOLE_ANSWER_BYTES,
    WHOLE_ANSWER_EXTENSION,
    whole_answer,
)
from serving.protocol.json_codec import decode_infer_request, encode_infer_response, parse_json
from serving.protocol.restricted import HEALTH, http_group

logger = logging.getLogger("serving.http")

Scope = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

_JSON = b"application/json"
_CLOSE = (b"connection", b"close")
_RETRY_AFTER = (b"retry-after", b"1")
_OCTET = b"application/octet-stream"
_WANTED_HEADERS = frozenset(
    (b"content-length", b"content-encoding", b"accept-encoding", b"inference-header-content-length")
)
_UNSUPPORTED_PREFIXES = ("systemsharedmemory", "cudasharedmemory", "trace", "logging")
# NOTE: searched with ``re``, which reads any buffer: a large body is a ``memoryview``.
_BINARY_DATA_SIZE = re.compile(rb'"binary_data_size"')
_NOT_BLANK = re.compile(rb"\S")
# Answers up to this size leave as one body message (one write), larger ones piece by piece.
JOIN_PIECES_BYTES = 64 * 1024
# A counted answer (``_send_pieces(counted=True)``) at least this large is waited for until it
# has gone; a smaller one the socket's own buffers take at once (several MiB on Linux), and
# waiting would cost each answer one more round trip to a front-end.
WAIT_UNTIL_SENT_BYTES = 1024 * 1024
# Bytes of request bodies still arriving that this process may hold at once, as a multiple of the
# body limit; past it the request whose chunk would add more gets 503 and a close, as gRPC's
# ``HELD_MESSAGES``. Without it, clients that each send most of a body of just under the limit and
# then stop would hold the limit times the in-flight cap (64 GiB by default) until the body
# timeout: the in-flight cap bounds their number, not their bytes.
HELD_BODIES = 8
DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"


class HttpError(Exception):
    """A transport-level answer that is not a domain error (404, 405, 413), with its headers."""

    def __init__(
        self, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


class HttpApp:
    """The ASGI application serving one ``InferenceServer``."""

    def __init__(
        self,
        server: InferenceServer,
        *,
        max_request_bytes: int,
        in_flight: InFlightLimit | None = None,
    ) -> None:
        self.server = server
        self.max_request_bytes = max_request_bytes
        self._in_flight = in_flight if in_flight is not None and in_flight.limit else None
        self.held = 0  # bytes of request bodies still arriving, over all requests
        self.hold_limit = HELD_BODIES * max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        # The replica's in-flight cap, counted here rather than in an ASGI layer of its own,
        # which cost every request another coroutine. Health checks are never counted.
        # NOTE: ``InFlightLimit.try_enter`` and ``leave`` inlined: this runs on every request.
        limit = self._in_flight
        path = scope["path"]
        # NOTE: ``_is_health``'s cheap prefix test first, here: this runs on every request.
        if limit is not None and (path.startswith("/v2/health") or path.endswith("/ready")):
            limit = None if _is_health(path) else limit
        if limit is not None:
            if limit.current >= limit.limit:
                # NOTE: the body stays unread, so the connection cannot be reused.
                await _send_error(send, 503, limit.message, [_RETRY_AFTER, _CLOSE])
                return
            limit.current += 1
        headers = {k: v for k, v in scope["headers"] if k in _WANTED_HEADERS}
        try:
            await self._route(scope, receive, send, headers)
        except ClientDisconnected:
            return
        except HttpError as exc:
            # NOTE: a refused body is left unread, so the connection cannot be reused.
            extra = [*exc.headers, _CLOSE] if exc.status == 413 else exc.headers
            await _send_error(send, exc.status, exc.message, extra)
        except ServingError as exc:
            extra = [(b"accept-encoding", b"gzip, deflate")] if exc.message == (
                "Unsupported compression type") else []  # fmt: skip
            if isinstance(exc, IncidentError):
                extra.append((b"x-request-id", exc.request_id.encode()))
            elif isinstance(exc, OverloadedError):
                extra.append(_RETRY_AFTER)
            await _send_error(send, HTTP_STATUS[exc.code], exc.message, extra)
        except Exception as exc:  # noqa: BLE001 - the server keeps serving whatever happened
            where = f"on {scope['method']} {scope['path']}"
            incident = report_incident(exc, logger=logger, where=where)
            await _send_error(send, 500, incident.message,
                              [(b"x-request-id", incident.request_id.encode())])  # fmt: skip
        finally:
            if limit is not None:
                limit.current -= 1

    async def _route(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        method: str = scope["method"]
        raw_path: bytes = scope.get("raw_path") or b""
        if b"%" in raw_path:
            _refuse_encoded_separators(raw_path)
        parts = scope["path"].split("/")
        # NOTE: /v2/models/<name>/infer first, without ``_models``'s call and checks.
        if (
            len(parts) == 5
            and parts[4] == "infer"
            and parts[2] == "models"
            and parts[3]
            and parts[1] == "v2"
            and parts[0] == ""
        ):
            _allow(method, "POST")
            return await self._infer(parts[3], None, scope, receive, send, headers)
        if len(parts) < 2 or parts[0] != "" or parts[1] != "v2":
            raise HttpError(404, "Not Found")
        parts = parts[2:]
        if not parts:
            _allow(method, "GET")
            return await _send_json(send, self.server.server_metadata())
        head = parts[0]
        if head == "models":
            return await self._models(method, parts[1:], scope, receive, send, headers)
        if head == "health" and len(parts) == 2 and parts[1] in ("live", "ready"):
            _allow(method, "GET")
            ok = self.server.live if parts[1] == "live" else self.server.ready
            return await _send(send, 200 if ok else 400, b"", _JSON)
        if head == "repository":
            return await self._repository(method, parts[1:], receive, send, headers)
        if head == "portico" and parts[1:] == ["live-stats"]:
            _allow(method, "GET")
            return await self._live_stats(send)
        if head in _UNSUPPORTED_PREFIXES:
            raise UnsupportedError(f"'{head}' is not supported by this server")
        raise HttpError(404, "Not Found")

    async def _models(
        self,
        method: str,
        parts: list[str],
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
    ) -> None:
        if parts == ["stats"]:
            _allow(method, "GET")
            return await _send_json(send, self.server.statistics())
        if not parts or not parts[0]:
            raise HttpError(404, "Not Found")
        name, rest = parts[0], parts[1:]
        version: int | None = None
        if len(rest) >= 2 and rest[0] == "versions":
            if not (rest[1].isascii() and rest[1].isdigit()):  # NOTE: "¹".isdigit() too
                raise HttpError(404, "Not Found")
            version, rest = int(rest[1]), rest[2:]
        action = rest[0] if len(rest) == 1 else "" if not rest else None
        if action == "infer":
            _allow(method, "POST")
            return await self._infer(name, version, scope, receive, send, headers)
        if action in ("generate", "generate_stream"):
            _allow(method, "POST")
            return await self._generate(name, version, action, scope, receive, send, headers)
        if action == "":
            _allow(method, "GET")
            return await _send_json(send, self.server.model_metadata(name, version))
        if action == "ready":
            _allow(method, "GET")
            if self.server.model_ready(name, version):
                return await _send(send, 200, b"", _JSON)
            return await _send_error(send, 400, "Model version not ready")
        if action == "config":
            _allow(method, "GET")
            return await _send_json(send, self._config(name, version))
        if action == "stats":
            _allow(method, "GET")
            return await _send_json(send, self.server.statistics(name, version))
        if action == "trace" or rest == ["trace", "setting"]:
            raise UnsupportedError("trace is not supported by this server")
        raise HttpError(404, "Not Found")

    async def _generate(
        self,
        name: str,
        version: int | None,
        action: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
    ) -> None:
        raw, taken = await self._counted_body(scope, receive, headers, None)
        try:
            body = _json_object(raw)
            signature = self.server.resolve(name, version).signature
            request = generate.decode_request(body, signature, model_name=name,
                                              model_version=version)  # fmt: skip
            if action == "generate_stream":
                return await until_disconnect(
                    generate.stream(self.server, request, send), receive, scope
                )
            response = await until_disconnect(
                generate.one_response(self.server, request), receive, scope
            )
            taken += self.server.request_bytes.hold_outputs(response.outputs)
            answer = generate.encode_response(response)
            await _send_pieces(send, 200, [answer], _JSON, counted=taken > 0)
        finally:
            if taken:
                self.server.request_bytes.give_back(taken)

    def _config(self, name: str, version: int | None) -> dict[str, Any]:
        lv = self.server.resolve(name, version)
        if lv.config_json is None:
            lv.config_json = config_to_json(lv.spec.config)
        return lv.config_json

    async def _infer(
        self,
        name: str,
        version: int | None,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
    ) -> None:
        extensions = scope.get("extensions")
        exchange = extensions.get(WHOLE_ANSWER_EXTENSION) if extensions else None
        # NOTE: a body that arrived whole with its headers is taken without ``receive``'s await.
        whole = exchange.take_whole_body() if exchange is not None else None
        body, taken = await self._counted_body(scope, receive, headers, whole)
        try:
            header_length = parse_header_length(
                headers.get(b"inference-header-content-length"), len(body)
            )
            if header_length == 0:
                request = self._raw_request(name, version, body)
            else:
                json_part, binary = split_body(body, header_length)
                try:
                    header = parse_json(json_part)
                except InvalidArgumentError:
                    if header_length == HEADER_LENGTH_MISSING and _BINARY_DATA_SIZE.search(body):
                        raise _missing_header_length() from None
                    raise
                if header_length == HEADER_LENGTH_MISSING and _has_binary_inputs(header):
                    raise _missing_header_length()
                request = decode_infer_request(
                    header, binary, model_name=name, model_version=version
                )
            infer = self.server.infer(request, decoupled_error=DECOUPLED_HTTP)
            if exchange is not None:  # NOTE: the exchange is the request's disconnect watch too
                response = await exchange.until_lost(infer)
            else:
                response = await until_disconnect(infer, receive, scope)
            # NOTE: the outputs count with the request's body until the answer has gone to
            # the socket (``_send_pieces``): a client that reads slowly holds them.
            taken += self.server.request_bytes.hold_outputs(response.outputs)
            json_body, parts, any_binary = encode_infer_response(response, request)
            out_headers: list[tuple[bytes, bytes]] = []
            if any_binary:
                out_headers.append(
                    (b"inference-header-content-length", str(len(json_body)).encode())
                )
            # NOTE: outputs go out as they are, not framed into one more copy of a large answer.
            pieces = [json_body, *parts]
            encoding = compression.choose_encoding(headers.get(b"accept-encoding"))
            if encoding is not None:
                compressed = await compression.compress(pieces, encoding)
                if compressed is not None:
                    pieces = [compressed]
                    out_headers.append((b"content-encoding", encoding))
            content_type = _OCTET if any_binary else _JSON
            if exchange is not None and sum(map(len, pieces)) <= WHOLE_ANSWER_BYTES:
                out_headers.append((b"content-type", content_type))
                if exchange.write_whole(200, out_headers, b"".join(pieces)):
                    return
                out_headers.pop()
            await _send_pieces(send, 200, pieces, content_type, out_headers, counted=taken > 0)
        finally:
            if taken:
                self.server.request_bytes.give_back(taken)

    def _raw_request(self, name: str, version: int | None, body: Body) -> InferRequest:
        lv = self.server.resolve(name, version)
        input_name, array = raw_input(lv.signature, memoryview(body), name)
        return InferRequest(model_name=name, inputs={input_name: array}, model_version=version,
                            binary_data_output=True)  # fmt: skip

    async def _counted_body(
        self, scope: Scope, receive: Receive, headers: dict[bytes, bytes], whole: Body | None
    ) -> tuple[Body, int]:
        """An inference request's body, whole and decompressed (``whole``: it came with its
        headers), and the bytes it took from the replica's budget, to give back once answered.

        A declared length is taken before the body is read, so the body of a request past the
        budget is dropped as it arrives, never held; what a chunked or compressed body adds is
        taken once it is whole. Either way the answer is 503 and the connection stays open,
        but for a client still waiting for ``100 Continue``: it is refused before it sends the
        body, and the connection closes after the answer (``_take_declared``).
        """
        if whole is not None and len(whole) > self.max_request_bytes:
            raise _too_large(len(whole), self.max_request_bytes)
        budget = self.server.request_bytes
        taken = 0
        try:
            if whole is None:
                taken = await self._take_declared(budget, scope, receive, headers)
                body = await self._read_body(receive, headers)
            else:
                body = whole
            encoding = headers.get(b"content-encoding")
            if encoding is not None:
                body = await compression.decompress(
                    body, encoding, max_bytes=self.max_request_bytes
                )
            if len(body) > taken:
                taken += budget.take(len(body) - taken)
        except BaseException:
            budget.give_back(taken)
            raise
        return body, taken

    async def _take_declared(
        self,
        budget: RequestBytesBudget,
        scope: Scope,
        receive: Receive,
        headers: dict[bytes, bytes],
    ) -> int:
        declared = headers.get(b"content-length")
        if not budget.limit or declared is None or not declared.isdigit():
            return 0
        length = int(declared)
        if length > self.max_request_bytes:
            return 0  # ``_read_body`` answers 413
        try:
            return budget.take(length)
        except OverloadedError:
            exchange = whole_answer(scope)
            if exchange is not None and exchange.waiting_for_100_continue:
                # The client waits for ``100 Continue`` before it sends its body: answered
                # without one, it sends nothing (the exchange closes the connection after).
                raise
            # Read and dropped, not left unread: a client that sends its whole body before it
            # reads the answer (most do) would see a reset instead of the 503 if it were closed.
            await _discard_body(receive)
            raise

    async def _read_body(self, receive: Receive, headers: dict[bytes, bytes]) -> Body:
        limit = self.max_request_bytes
        declared = headers.get(b"content-length")
        length = int(declared) if declared is not None and declared.isdigit() else None
        if length is not None and length > limit:
            raise _too_large(length, limit)
        message = await receive()
        body: bytes = message.get("body", b"")
        if not message.get("more_body"):
            return body
        buffer = BodyBuffer(length)  # NOTE: no whole-body copy on the loop (see ``body``)
        try:
            self._hold(buffer, body)
            while message.get("more_body"):
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise HttpError(400, "client disconnected before the request body was complete")
                self._hold(buffer, message.get("body", b""))
                if buffer.received > limit:
                    raise HttpError(413, f"request body exceeds the maximum input size of "
                                         f"{limit} bytes")  # fmt: skip
        finally:  # complete, refused or left: no longer arriving
            self.held -= buffer.received
        return await buffer.result()

    def _hold(self, buffer: BodyBuffer, chunk: bytes) -> None:
        """Add a chunk to its body and to the bytes held; past ``hold_limit`` the request ends."""
        buffer.add(chunk)
        self.held += len(chunk)
        if self.held > self.hold_limit:
            logger.warning("HTTP request refused: request bodies still arriving held more than "
                           "%d bytes at once", self.hold_limit)  # fmt: skip
            raise HttpError(503, "The server holds too many request bytes; retry later",
                            [_RETRY_AFTER, _CLOSE])  # fmt: skip

    async def _repository(
        self,
        method: str,
        parts: list[str],
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
    ) -> None:
        if parts == ["index"] or (len(parts) == 2 and parts[1] == "index"):
            _allow(method, "POST")
            body = await self._json_body(receive, headers)
            ready = body.get("ready", False)
            if not isinstance(ready, bool):
                raise InvalidArgumentError("'ready' must be a boolean")
            return await _send_json(send, self.server.index(ready_only=ready))
        if len(parts) == 4 and parts[1] == "models" and parts[3] in ("load", "unload"):
            _allow(method, "POST")
            raise UnsupportedError("repository-scoped model load / unload is not supported")
        if len(parts) != 3 or parts[0] != "models" or parts[2] not in ("load", "unload"):
            raise HttpError(404, "Not Found")
        _allow(method, "POST")
        name = parts[1]
        body = await self._json_body(receive, headers)
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidArgumentError("'parameters' must be an object")
        if parts[2] == "load":
            config, files = _load_parameters(params)
            await self.server.repository_load(name, config_json=config, files=files)
        else:
            dependents = params.get("unload_dependents", False)
            if not isinstance(dependents, bool):
                raise InvalidArgumentError("'unload_dependents' must be a boolean")
            await self.server.repository_unload(name, unload_dependents=dependents)
        await _send(send, 200, b"", _JSON)

    async def _json_body(self, receive: Receive, headers: dict[bytes, bytes]) -> dict[str, Any]:
        body = await self._read_body(receive, headers)
        body = await compression.decompress(
            body, headers.get(b"content-encoding"), max_bytes=self.max_request_bytes
        )
        return _json_object(body)

    async def _live_stats(self, send: Send) -> None:
        try:
            module = importlib.import_module("serving.observability.live_stats")
        except ModuleNotFoundError:
            raise HttpError(404, "Not Found") from None
        data = module.live_stats_json(self.server)
        body = data if isinstance(data, bytes) else orjson.dumps(data)
        await _send(send, 200, body, _JSON)


def _json_object(body: Body) -> dict[str, Any]:
    """A JSON body's object; a blank body is an empty one."""
    return parse_json(body) if _NOT_BLANK.search(body) else {}


async def _discard_body(receive: Receive) -> None:
    """Read a request's body to its end (or its client's leaving), keeping none of it."""
    message = await receive()
    while message.get("more_body"):
        message = await receive()


def _load_parameters(params: dict[str, Any]) -> tuple[str | None, dict[str, bytes]]:
    config = params.get("config")
    if config is not None and not isinstance(config, str):
        raise InvalidArgumentError("'config' must be a string holding the model config as JSON")
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if key == "config":
            continue
        if not key.startswith("file:"):
            raise InvalidArgumentError(f"Unrecognized load parameter '{key}'")
        if not isinstance(value, str):
            raise InvalidArgumentError(f"'{key}' must be base64 text")
        try:
            files[key.removeprefix("file:")] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"'{key}' is not valid base64") from None
    return config, files


def _refuse_encoded_separators(raw_path: bytes) -> None:
    """A percent-encoded '/', '\\' or NUL in a segment would split or end a model name once the
    path is decoded: refuse it as the name it was meant to be rather than route its pieces."""
    for segment in raw_path.split(b"?", 1)[0].split(b"/"):
        if b"%" in segment:
            problem = model_name_problem(segment.decode("latin-1"))
            if problem:
                raise InvalidArgumentError(problem)


def _too_large(length: int, limit: int) -> HttpError:
    return HttpError(
        413, f"request body of {length} bytes exceeds the maximum input size of {limit} bytes"
    )


def _missing_header_length() -> InvalidArgumentError:
    return InvalidArgumentError(
        "must specify valid 'Infer-Header-Content-Length' in request header when passing "
        "inputs in binary data format"
    )


def _has_binary_inputs(header: dict[str, Any]) -> bool:
    inputs = header.get("inputs")
    if not isinstance(inputs, list):
        return False
    return any(
        isinstance(i, dict)
        and isinstance(i.get("parameters"), dict)
        and "binary_data_size" in i["parameters"]
        for i in inputs
    )


def _is_health(path: str) -> bool:
    return http_group(path) == HEALTH


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HttpError(405, "Method Not Allowed")


async def _send(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await _send_pieces(send, status, [body], content_type, extra)


async def _send_pieces(
    send: Send,
    status: int,
    pieces: Sequence[bytes | memoryview],
    content_type: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    counted: bool = False,
) -> None:
    """One answer whose body is ``pieces`` in order: joined when small, else each as it is.
    ``counted`` (its bytes are in the budget until it has gone): a large one returns only once
    the socket has taken all but the last of it (the write buffer's low-water mark)."""
    length = sum(len(piece) for piece in pieces)
    until_sent = counted and length >= WAIT_UNTIL_SENT_BYTES
    headers = [(b"content-type", content_type), (b"content-length", str(length).encode())]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if len(pieces) > 1 and length <= JOIN_PIECES_BYTES:
        # NOTE: each body message is one write to the socket; a copy of a small answer is cheaper.
        pieces = [b"".join(pieces)]
    for index, piece in enumerate(pieces):
        more = until_sent or index < len(pieces) - 1
        await send({"type": "http.response.body", "body": piece, "more_body": more})
    if until_sent:
        # NOTE: ``send`` writes a piece whole and waits for the socket only before the next
        # one, so empty pieces after it are what wait for a client that reads slowly: in-process
        # the first waits for the socket; behind a front-end, the front-end waits for its socket
        # before it passes the first on, and the relay sends the end only once every piece has
        # been passed on.
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        end = {"type": "http.response.body", "body": b"", wire.UNTIL_DELIVERED: True}
        await send(end)


async def _send_json(send: Send, data: Any) -> None:
    await _send(send, 200, orjson.dumps(data), _JSON)


async def _send_error(
    send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await _send(send, status, orjson.dumps({"error": message}), _JSON, extra)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["HttpApp", "InternalError"]
