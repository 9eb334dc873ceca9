"""A Python model's BLS requests, run on the server the model is loaded in.

The channel's reader hands each request over with its tensors already copied out; a thread of its
own turns it into an ``InferRequest``, runs it through the server's own ``infer`` (the
``infer_host`` the server core gave the instance: the target model's scheduler, batching and
statistics as for any client) and posts the response back; a decoupled request
(``exec(decoupled=True)``) gets every response of the target's stream, each marked final or not.
Failures (unknown model, bad input) are answered as a response with an error, as Triton does.
Each answer comes within the request's own ``timeout`` (microseconds) or the config parameter
``bls_timeout_s`` (default 300), so a model that calls itself or a cycle of models fails the
request instead of hanging forever.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from serving.backends.python.channel import Channel, ChannelClosed, Tensors
from serving.backends.python.error_codes import TRITON_CODES
from serving.core.loading import InferHost
from serving.core.streaming import StreamItem
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import ErrorCode, InternalError, ServingError, UnavailableError

logger = logging.getLogger(__name__)

DEFAULT_BLS_TIMEOUT_S = 300.0
_FLAG_START = 1
_FLAG_END = 2


class BlsBridge:
    """Runs the BLS requests of one instance's model process."""

    def __init__(self, *, model_name: str, host: InferHost | None, timeout_s: float) -> None:
        self.model_name = model_name
        self.host = host
        self.timeout_s = timeout_s
        self._closed = False

    def submit(self, channel: Channel, payload: dict[str, Any], tensors: Tensors) -> None:
        """Answer one request on a thread of its own (called on the channel's reader thread,
        which must never block)."""
        if self._closed:
            return
        # NOTE: daemon threads: one waiting on a server that stopped must not hold up the exit.
        threading.Thread(
            target=self._answer,
            args=(channel, payload, tensors),
            name=f"bls-{self.model_name}",
            daemon=True,
        ).start()

    def close(self) -> None:
        """Take no more requests (the instance is unloading); running ones end on their own."""
        self._closed = True

    def _answer(self, channel: Channel, payload: dict[str, Any], tensors: Tensors) -> None:
        call = payload["call"]
        for item, final in self._results(payload, tensors):
            result, outputs = _encoded(item)
            result.update(call=call, final=final)
            try:
                channel.post("bls_result", result, outputs)
            except TypeError as error:  # an output dtype shared memory cannot carry
                result, outputs = _encoded(InternalError(str(error)))
                result.update(call=call, final=True)
                with contextlib.suppress(ChannelClosed):
                    channel.post("bls_result", result, outputs)
                return
            except ChannelClosed:
                return  # the model's process went away while its request ran

    def _results(self, payload: dict[str, Any], tensors: Tensors) -> Iterator[StreamItem]:
        """The answers to one request: one response, or a decoupled model's stream of them."""
        try:
            if self.host is None:
                raise UnavailableError(
                    f"model '{self.model_name}' does not run inside a server: BLS is unavailable"
                )
            request, timeout_s = self._request(payload, tensors)
            if payload["decoupled"]:
                yield from self.host.stream_from_thread(request, timeout_s)
            else:
                yield self.host.infer_from_thread(request, timeout_s), True
        except ServingError as error:
            yield error, True
        except Exception as error:  # noqa: BLE001 - the model gets the error, the server goes on
            logger.exception("BLS request from model '%s' failed", self.model_name)
            yield InternalError(f"{type(error).__name__}: {error}"), True

    def _request(self, payload: dict[str, Any], tensors: Tensors) -> tuple[InferRequest, float]:
        version = int(payload["model_version"])
        requested = payload["requested"]
        flags = int(payload["flags"])
        timeout_us = int(payload["timeout"] or 0)
        request = InferRequest(
            model_name=payload["model_name"],
            inputs=tensors,
            model_version=version if version >= 0 else None,
            id=payload["id"],
            outputs=[RequestedOutput(name) for name in requested] if requested else None,
            parameters=dict(payload["parameters"]),
            timeout_us=timeout_us,
            sequence_id=payload["correlation_id"],
            sequence_start=bool(flags & _FLAG_START),
            sequence_end=bool(flags & _FLAG_END),
        )
        return request, timeout_us / 1e6 if timeout_us > 0 else self.timeout_s


def _encoded(
    item: InferResponse | ServingError | None,
) -> tuple[dict[str, Any], list[tuple[str, np.ndarray[Any, Any]]]]:
    if isinstance(item, ServingError):
        return _error(item), []
    if item is None:  # only the final flag
        return {"error": None, "parameters": {}, "empty": True}, []
    return {"error": None, "parameters": item.parameters}, list(item.outputs.items())


def _error(error: ServingError) -> dict[str, Any]:
    code = TRITON_CODES.get(error.code, TRITON_CODES[ErrorCode.INTERNAL])
    return {"error": (code, error.message), "parameters": {}}
