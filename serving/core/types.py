"""The internal request and response types shared by every layer of the data plane.

HTTP and gRPC decode into ``InferRequest`` and encode ``InferResponse``; schedulers and backends see
nothing else. Tensors are numpy arrays keyed by name; the wire datatype is derived from the array's
dtype (``datatypes.py``), BYTES tensors are object arrays of ``bytes``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from serving.core.streaming import ResponseStream


@dataclasses.dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters."""

    name: str
    binary_data: bool | None = None
    classification: int = 0


@dataclasses.dataclass(slots=True)
class InferRequest:
    """One inference request as the server core sees it, whatever transport it came from.

    ``model_version`` is None when the client let the server pick (the promoted or highest ready
    version). ``outputs`` is None when the client asked for every output. Reserved parameters
    (PROTOCOL.md §2.5) are lifted into typed fields; ``parameters`` keeps the custom ones.
    """

    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: int | None = None
    id: str = ""
    outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    binary_data_output: bool = False
    arrival_ns: int = dataclasses.field(default_factory=time.monotonic_ns)
    # Where a decoupled model's responses go (set by ``InferenceServer.infer_stream``).
    responses: ResponseStream | None = None

    def batch_size(self, max_batch_size: int) -> int:
        """The request's batch size: shape[0] of any input when the model batches, else 1."""
        if max_batch_size <= 0 or not self.inputs:
            return 1
        first = next(iter(self.inputs.values()))
        return int(first.shape[0]) if first.ndim else 1


@dataclasses.dataclass(slots=True)
class InferResponse:
    """The result of one request: output tensors in the model's production order."""

    model_name: str
    model_version: int
    outputs: dict[str, np.ndarray]
    id: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
