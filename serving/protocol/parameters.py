"""Request parameters with reserved meaning (PROTOCOL.md §2.5), shared by both transports."""

from __future__ import annotations

from typing import Any

from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

_RESERVED = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output",
     "headers")
)  # fmt: skip


# Frontend-level flags Triton's own clients send (perf_analyzer over gRPC sends the first one even
# for unary calls); they steer the transport and are not forwarded to the model.
FRONTEND_PARAMETERS = frozenset(("triton_enable_empty_final_response",))


def apply_request_parameters(request: InferRequest, parameters: dict[str, Any]) -> None:
    """Lift reserved parameters into typed fields; keep the custom ones; reject ``triton_*``."""
    custom: dict[str, Any] = {}
    for key, value in parameters.items():
        if key in _RESERVED:
            _apply_reserved(request, key, value)
        elif key in FRONTEND_PARAMETERS:
            continue
        elif key.startswith("triton_"):
            raise InvalidArgumentError(
                f"parameter keys starting with 'triton_' are reserved for Triton usage and "
                f"should not be specified. Found '{key}'"
            )
        elif isinstance(value, str | int | float | bool):
            custom[key] = value
        else:
            raise InvalidArgumentError(
                f"parameter '{key}' has an unsupported type: only string, integer, boolean and "
                "double parameters are allowed"
            )
    request.parameters = custom


def _apply_reserved(request: InferRequest, key: str, value: Any) -> None:
    if key == "sequence_id":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidArgumentError(
                "parameter 'sequence_id' must be an unsigned integer or a string"
            )
        request.sequence_id = value
    elif key in ("sequence_start", "sequence_end", "binary_data_output"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"parameter '{key}' must be a boolean")
        setattr(request, key, value)
    elif key in ("priority", "timeout"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"parameter '{key}' must be an unsigned integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value
