"""Triton's restricted APIs: which API group each HTTP route and gRPC method belongs to, and the
header a restricted group demands.

``--http-restricted-api=<api>[,<api>...]:<header>=<value>`` and
``--grpc-restricted-protocol=<api>[,<api>...]:<key>=<value>`` (both repeatable) name groups of APIs
that answer only requests carrying that header with that value. Over gRPC the metadata key is
``triton-grpc-protocol-<key>``, as in Triton. A refused request gets Triton's answer: HTTP 403
``This API is restricted, expecting header '<header>'``; gRPC UNAVAILABLE ``This protocol is
restricted, expecting header 'triton-grpc-protocol-<key>'``. An API in no group stays open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

HEALTH = "health"
METADATA = "metadata"
INFERENCE = "inference"
SHARED_MEMORY = "shared-memory"
MODEL_CONFIG = "model-config"
MODEL_REPOSITORY = "model-repository"
STATISTICS = "statistics"
TRACE = "trace"
LOGGING = "logging"
GROUPS = (HEALTH, METADATA, INFERENCE, SHARED_MEMORY, MODEL_CONFIG, MODEL_REPOSITORY, STATISTICS,
          TRACE, LOGGING)  # fmt: skip

HTTP_FLAG = "--http-restricted-api"
GRPC_FLAG = "--grpc-restricted-protocol"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

_SERVICE = "/inference.GRPCInferenceService/"
GRPC_METHOD_GROUPS: Mapping[str, str] = {
    **{_SERVICE + m: HEALTH for m in ("ServerLive", "ServerReady", "ModelReady")},
    "/grpc.health.v1.Health/Check": HEALTH,
    "/grpc.health.v1.Health/Watch": HEALTH,
    **{_SERVICE + m: METADATA for m in ("ServerMetadata", "ModelMetadata")},
    **{_SERVICE + m: INFERENCE for m in ("ModelInfer", "ModelStreamInfer")},
    _SERVICE + "ModelConfig": MODEL_CONFIG,
    _SERVICE + "ModelStatistics": STATISTICS,
    **{_SERVICE + m: MODEL_REPOSITORY
       for m in ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")},
    **{_SERVICE + m: SHARED_MEMORY
       for kind in ("System", "Cuda")
       for m in (f"{kind}SharedMemoryStatus", f"{kind}SharedMemoryRegister",
                 f"{kind}SharedMemoryUnregister")},
    _SERVICE + "TraceSetting": TRACE,
    _SERVICE + "LogSettings": LOGGING,
}  # fmt: skip

_MODEL_ACTIONS: Mapping[str, str] = {
    "": METADATA,
    "ready": HEALTH,
    "infer": INFERENCE,
    "generate": INFERENCE,
    "generate_stream": INFERENCE,
    "config": MODEL_CONFIG,
    "stats": STATISTICS,
    "trace": TRACE,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Restriction:
    """The header (as configured) and the value a group demands."""

    header: str
    value: str

    @property
    def key(self) -> str:
        """The header name as both transports deliver it: lower case."""
        return self.header.lower()


def parse_restrictions(
    specs: Iterable[str], *, flag: str, header_prefix: str = ""
) -> dict[str, Restriction]:
    """Group name -> restriction from the flag values; ValueError naming every problem."""
    restrictions: dict[str, Restriction] = {}
    problems: list[str] = []
    for spec in specs:
        apis, sep, header_value = spec.partition(":")
        header, eq, value = header_value.partition("=")
        if not sep or not eq or not apis or not header.strip():
            problems.append(f"{flag}: expected '<api>[,<api>...]:<header>=<value>', got '{spec}'")
            continue
        # NOTE: gRPC metadata keys are lower case on the wire, so the key is lowered there.
        key = header.strip().lower() if header_prefix else header.strip()
        restriction = Restriction(header_prefix + key, value)
        for api in (a.strip() for a in apis.split(",")):
            if api not in GROUPS:
                problems.append(f"{flag}: unknown API '{api}' (known: {', '.join(GROUPS)})")
            elif api in restrictions:
                problems.append(f"{flag}: API '{api}' is given more than once")
            else:
                restrictions[api] = restriction
    if problems:
        raise ValueError("; ".join(problems))
    return restrictions


def http_group(path: str) -> str | None:
    """The API group of an HTTP path (Triton's routing); None for paths outside every group."""
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != "" or parts[1] != "v2":
        return None
    parts = parts[2:]
    if not parts or parts == [""]:
        return METADATA
    head, rest = parts[0], parts[1:]
    if head == "health":
        return HEALTH
    if head == "models":
        return _model_route_group(rest)
    if head == "repository":
        return MODEL_REPOSITORY
    if head in ("systemsharedmemory", "cudasharedmemory"):
        return SHARED_MEMORY
    if head == "trace":
        return TRACE
    if head == "logging":
        return LOGGING
    if head == "portico" and rest == ["live-stats"]:
        return STATISTICS  # Portico's own per-replica statistics
    return None


def _model_route_group(rest: list[str]) -> str | None:
    if rest == ["stats"]:
        return STATISTICS
    if not rest:
        return None
    rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "versions":
        rest = rest[2:]
    return _MODEL_ACTIONS.get(rest[0] if rest else "")


def http_refusal(restriction: Restriction) -> str:
    return f"This API is restricted, expecting header '{restriction.header}'"


def grpc_refusal(restriction: Restriction) -> str:
    return f"This protocol is restricted, expecting header '{restriction.header}'"
