"""Triton's generate extension: ``.../generate`` and ``.../generate_stream`` (Server-Sent Events).

The request is one flat JSON object: a key naming a model input is that input's value (a scalar or a
list, in the input's configured datatype and shape, batch of one), any other key and the optional
``parameters`` object are request parameters. A response is flat too: ``model_name``,
``model_version`` and each output by name (a scalar when it holds one element, else a flat list).

``generate`` answers with exactly one response, so a decoupled model must send exactly one.
``generate_stream`` sends each response as one ``data: {...}`` event until the final one; an error
the model reports becomes a ``data: {"error": ...}`` event. A request that fails before the model
takes it is answered like any other endpoint's error, as JSON with the error's status.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from serving.core.datatypes import wire_from_numpy
from serving.core.server import InferenceServer
from serving.core.signature import ModelSignature, TensorSignature, check_request
from serving.core.streaming import StreamItem
from serving.core.types import InferRequest, InferResponse
from serving.errors import InvalidArgumentError, ServingError
from serving.incidents import report_incident
from serving.protocol.errors import HTTP_STATUS
from serving.protocol.json_codec import tensor_from_json, tensor_to_json
from serving.protocol.parameters import apply_request_parameters

logger = logging.getLogger("serving.http")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_EVENT_STREAM = b"text/event-stream; charset=utf-8"


def decode_request(
    body: dict[str, Any], signature: ModelSignature, *, model_name: str, model_version: int | None
) -> InferRequest:
    """The request a generate body stands for, already checked against the model's signature.

    Checking here (the server checks again) lets a request the model would refuse be answered as
    a plain JSON error rather than as the first event of a stream.
    """
    request = InferRequest(model_name=model_name, inputs={}, model_version=model_version)
    parameters: dict[str, Any] = {}
    for key, value in body.items():
        if key == "parameters":
            if not isinstance(value, dict):
                raise InvalidArgumentError("Expected JSON object for keyword: 'parameters'")
            parameters.update(value)
        elif key in signature.inputs:
            spec = signature.inputs[key]
            request.inputs[key] = tensor_from_json(
                value, spec.datatype, _shape(spec, signature.max_batch_size, value), name=key
            )
        else:
            parameters[key] = value
    apply_request_parameters(request, parameters)
    check_request(request, signature, model_name)
    return request


def _shape(spec: TensorSignature, max_batch_size: int, value: Any) -> list[int]:
    """The input's configured shape, a batch of one, its variable dims sized to fit ``value``.

    With several variable dims all elements go to the last one. A value that fits no shape is
    refused by ``tensor_from_json`` (element count) or ``check_request`` (shape).
    """
    dims = list(spec.dims)
    variable = [i for i, d in enumerate(dims) if d < 0]
    if variable:
        fixed = math.prod(d for d in dims if d >= 0)
        for i in variable:
            dims[i] = 1
        dims[variable[-1]] = _element_count(value) // fixed if fixed else 0
    return ([1] if max_batch_size > 0 else []) + dims


def _element_count(value: Any) -> int:
    if isinstance(value, list):
        return sum(_element_count(item) for item in value)
    return 1


def encode_response(response: InferResponse) -> bytes:
    """The flat generate response: names, then each output as a scalar or a flat list."""
    body: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": str(response.model_version),
    }
    for name, array in response.outputs.items():
        values = tensor_to_json(array, wire_from_numpy(array.dtype), name)
        body[name] = values[0] if array.size == 1 else values
    return orjson.dumps(body)


async def one_response(server: InferenceServer, request: InferRequest) -> InferResponse:
    """The request's only response; a decoupled model that sends none or several fails it."""
    responses: list[InferResponse] = []
    async with _items(server, request) as items:
        async for item, _final in items:
            if isinstance(item, ServingError):
                raise item
            if item is not None:
                responses.append(item)
            if len(responses) > 1:  # no need to wait for the rest: closing stops the model
                break
    if len(responses) != 1:
        raise InvalidArgumentError(
            f"generate expects model to produce exactly 1 response, got "
            f"{'more than 1' if responses else 'none'}; use generate_stream for model "
            f"'{request.model_name}'"
        )
    return responses[0]


async def stream(server: InferenceServer, request: InferRequest, send: Send) -> None:
    """Send every response of the request as an SSE event, until its final one.

    The status line waits for the first event: a request that fails before it is answered as
    JSON by the caller, a first event that is an error sets the status from that error (later
    errors can only be events of a 200 answer, as in Triton).
    """
    started = False
    async with _items(server, request) as items:
        async for item, _final in items:
            if item is None:  # the final flag alone
                continue
            status = 200
            try:
                if isinstance(item, ServingError):
                    raise item
                event = encode_response(item)
            except ServingError as error:
                status = HTTP_STATUS[error.code]
                event = orjson.dumps({"error": error.message})
            except Exception as exc:  # noqa: BLE001 - once streaming, errors can only be events
                incident = report_incident(exc, logger=logger, where="encoding a generate_stream "
                                                                      "response")  # fmt: skip
                status = 500
                event = orjson.dumps({"error": incident.message})
            if not started:
                await _start(send, status)
                started = True
            await send({"type": "http.response.body", "body": b"data: " + event + b"\n\n",
                        "more_body": True})  # fmt: skip
            if status != 200:
                break  # an error ends the request (the model's error is its final item)
    if not started:  # zero responses: an empty event stream
        await _start(send, 200)
    await send({"type": "http.response.body", "body": b""})


@contextlib.asynccontextmanager
async def _items(
    server: InferenceServer, request: InferRequest
) -> AsyncIterator[AsyncIterator[StreamItem]]:
    """The request's stream, closed on leaving: a stream left early stops the model's request."""
    items = server.infer_stream(request)
    try:
        yield items
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()


async def _start(send: Send, status: int) -> None:
    headers = [(b"content-type", _EVENT_STREAM), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
