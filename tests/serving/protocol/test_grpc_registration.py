"""Only the inference RPCs are pre-registered with grpc, and every other RPC still answers as it
did, through the generic handler (``serving.protocol.grpc.registration``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from serving.main import ServingProcess
from serving.protocol.admission import InFlightLimit
from serving.protocol.grpc.registration import REGISTERED_METHODS
from serving.protocol.grpc.service import register_services

pytestmark = pytest.mark.embedded

INFERENCE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]
# What Portico serves; the rest (shared memory, trace, logging) it refuses as unsupported.
IMPLEMENTED = {
    "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelConfig",
    "ModelInfer", "ModelStreamInfer", "ModelStatistics", "RepositoryIndex",
    "RepositoryModelLoad", "RepositoryModelUnload",
}  # fmt: skip


@dataclasses.dataclass
class Details:
    method: str
    invocation_metadata: tuple[Any, ...] = ()


class RecordingTarget:
    """What a grpc server is told while the services register."""

    def __init__(self) -> None:
        self.generic: list[grpc.GenericRpcHandler] = []
        self.registered: dict[str, set[str]] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.registered.setdefault(service, set()).update(handlers)

    def serves(self, method: str) -> bool:
        return any(handler.service(Details(method)) is not None for handler in self.generic)


@pytest.mark.parametrize("in_flight", [None, InFlightLimit(8)], ids=["uncapped", "capped"])
def test_only_the_inference_rpcs_are_registered_and_the_generic_handler_serves_all(
    server: ServingProcess, in_flight: InFlightLimit | None
) -> None:
    target = RecordingTarget()
    assert server.server is not None
    register_services(target, server.server, None, in_flight)
    assert target.registered == {INFERENCE.full_name: set(REGISTERED_METHODS)}
    for service in (INFERENCE, HEALTH):
        for method in service.methods:
            assert target.serves(f"/{service.full_name}/{method.name}"), method.name


def test_every_rpc_answers_through_the_real_server(server: ServingProcess) -> None:
    """Each unary RPC, with an empty request: what Portico implements never ends UNIMPLEMENTED,
    and the rest end with Portico's own refusal, not grpc's "Method not found!"."""
    answers = {}
    with grpc.insecure_channel(server.grpc_url) as channel:
        for method in INFERENCE.methods:
            if method.client_streaming or method.server_streaming:
                continue
            call = channel.unary_unary(
                f"/{INFERENCE.full_name}/{method.name}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=lambda data: data,
            )
            request = service_pb2.__dict__[method.input_type.name]()
            try:
                call(request, timeout=30)
                answers[method.name] = (grpc.StatusCode.OK, "")
            except grpc.RpcError as error:
                answers[method.name] = (error.code(), error.details())
        health = channel.unary_unary(
            f"/{HEALTH.full_name}/Check",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        assert health(health_pb2.HealthCheckRequest(), timeout=30).status == (
            health_pb2.HealthCheckResponse.SERVING
        )
    for name, (code, details) in answers.items():
        if name in IMPLEMENTED:
            assert code != grpc.StatusCode.UNIMPLEMENTED, (name, details)
        else:
            assert code == grpc.StatusCode.UNIMPLEMENTED, name
            assert details.endswith("is not supported by this server"), (name, details)
    assert "ModelInfer" in answers and "CudaSharedMemoryStatus" in answers
