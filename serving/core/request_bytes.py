"""The replica's budget of inference request bytes being served (``--max-in-flight-request-bytes``).

The in-flight cap bounds how many requests a replica holds, not how large they are: 1,024
requests of up to 64 MiB each may hold 64 GiB (and several times that while they run) before
any is answered. With a budget, an inference request whose bytes would take the requests being
served past it is refused before it is queued, and the others go on: HTTP 503 with
``Retry-After``, gRPC ``UNAVAILABLE`` (in-band on a ``ModelStreamInfer`` stream, which stays
open). An HTTP request counts its body; a gRPC request its decoded inputs (a large request's
tensors are views of the message it came in: the same bytes), and a unary call's message its
declared length while it arrives (``serving.protocol.grpc.arriving``). Where an answer waits
for its client under the server's own flow control (HTTP's, a ``ModelStreamInfer`` stream's
queue), its outputs count too until it has gone (``hold_outputs``), and so do a decoupled
request's responses while they wait in its ``ResponseStream`` (``hold``). The count lives on the
server, so HTTP and gRPC, in-process or behind front-ends, share one budget. Requests a model sends
itself (BLS) and an ensemble's steps are not counted again: their bytes are the counted
request's doing (but the responses of a model's decoupled request wait in a stream, and count,
as a network client's do).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from serving.errors import OverloadedError


class RequestBytesBudget:
    """Bytes taken by requests being served, refused past ``limit`` (0: no budget)."""

    __slots__ = ("held", "limit", "refused")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.refused = 0  # requests refused since start (a counter for the metrics)

    def take(self, nbytes: int) -> int:
        """``nbytes`` taken, to be given back when the request is answered (0 with no budget);
        ``OverloadedError`` when they would take the requests being served past the limit."""
        if not self.limit:
            return 0
        if self.held + nbytes > self.limit:
            self.refused += 1
            raise OverloadedError(
                f"Server is overloaded: a request of {nbytes} bytes would take the requests "
                f"being served past {self.limit} bytes; retry later"
            )
        self.held += nbytes
        return nbytes

    def take_inputs(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> int:
        """``take`` for a decoded request's inputs, not counted at all with no budget."""
        return self.take(tensor_bytes(inputs)) if self.limit else 0

    def hold_outputs(self, outputs: Mapping[str, np.ndarray[Any, Any]]) -> int:
        """A response's outputs, counted (never refused: they exist already) until its answer
        has gone to the client, to be given back then (0 with no budget). A model whose
        answers are larger than its requests thus makes later requests wait, as large requests
        would, while a client that reads slowly holds its answer."""
        return self.hold(tensor_bytes(outputs)) if self.limit else 0

    def hold(self, nbytes: int) -> int:
        """``nbytes`` that exist already, counted (never refused) until given back (0 with no
        budget)."""
        if not self.limit:
            return 0
        self.held += nbytes
        return nbytes

    def give_back(self, nbytes: int) -> None:
        self.held -= nbytes


def tensor_bytes(tensors: Mapping[str, np.ndarray[Any, Any]]) -> int:
    """The bytes a request's decoded inputs (or a response's outputs) hold: a BYTES tensor's
    elements counted by length (its array holds only references to them)."""
    total = 0
    for array in tensors.values():
        if array.dtype == object:
            total += sum(map(len, array.ravel().tolist()))  # NOTE: faster than .flat
        else:
            total += array.nbytes
    return total
