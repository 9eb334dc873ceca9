"""The gRPC edge: tritonclient's generated ``GRPCInferenceServiceServicer``, served by the HTTP/2
listener (``http2_server``, through ``register_services``) or by grpc.aio (``create_grpc_server``).

Each RPC is a thin call into the ``InferenceServer``; domain errors leave as the gRPC status of
``serving.protocol.errors.GRPC_STATUS`` with Triton's message. Shared memory, trace and logging RPCs
end UNIMPLEMENTED with the HTTP edge's message (the server metadata does not list them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from serving.core.server import InferenceServer
from serving.core.types import InferResponse
from serving.errors import InvalidArgumentError, ServingError
from serving.incidents import report_incident
from serving.protocol.admission import InFlightLimit
from serving.protocol.errors import GRPC_STATUS
from serving.protocol.grpc.edge import CountingTarget, EdgeInterceptor
from serving.protocol.grpc.infer_wire import SplitInferResponse
from serving.protocol.grpc.registration import InferenceMethodsOnly, InferRequestsInPlace
from serving.protocol.grpc_codec import (
    decode_infer_request,
    encode_infer_response,
    parameter_value,
    parse_version,
)

logger = logging.getLogger("serving.grpc")

# A stream's requests running at once, and its answers waiting for a slow reader: past either the
# stream stops reading (backpressure through gRPC's flow control) instead of growing. With a
# request-bytes budget the waiting answers' requests stay counted too (``one`` below).
STREAM_MAX_IN_FLIGHT = 64
STREAM_MAX_BUFFERED = 64
DECOUPLED_GRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"
EMPTY_FINAL_PARAMETER = "triton_enable_empty_final_response"
FINAL_RESPONSE_PARAMETER = "triton_final_response"
T = TypeVar("T")


async def _call(context: grpc.aio.ServicerContext, func: Callable[[], Awaitable[T]]) -> T:
    """Run one RPC body, turning domain errors into the matching gRPC status."""
    try:
        return await func()
    except ServingError as exc:
        await context.abort(GRPC_STATUS[exc.code], exc.message)
    except (grpc.aio.AbortError, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 - the server keeps serving whatever happened
        incident = report_incident(exc, logger=logger, where="in a gRPC call")
        await context.abort(grpc.StatusCode.INTERNAL, incident.message)
    raise AssertionError("unreachable")  # pragma: no cover - abort raises


def _stream_response(
    message: Any, response: InferResponse | ServingError | None, final: bool, request_id: str = ""
) -> Any:
    """One ``ModelStreamInferResponse``: a response, an error, or only the final flag. A
    response with a large output is a ``SplitInferResponse``, which the stream's serializer
    writes as the stream answer holding it, from the outputs' own memory."""
    if isinstance(response, InferResponse):
        encoded = encode_infer_response(response, request_id, in_place=True)
        if type(encoded) is SplitInferResponse:
            encoded.message.parameters[FINAL_RESPONSE_PARAMETER].bool_param = final
            return encoded
        answer = service_pb2.ModelStreamInferResponse(infer_response=encoded)
    else:
        # An error or a flag-only answer names the request it belongs to, as Triton's does.
        answer = service_pb2.ModelStreamInferResponse(
            error_message="" if response is None else response.message,
            infer_response=service_pb2.ModelInferResponse(
                id=message.id, model_name=message.model_name, model_version=message.model_version
            ),
        )
    answer.infer_response.parameters[FINAL_RESPONSE_PARAMETER].bool_param = final
    return answer


class _Counted:
    """The request bytes one streamed request took from the budget (or one answer's outputs),
    and whether they were put on the stream's queue after its answers (its marker), for the
    writer to give back."""

    __slots__ = ("handed_over", "nbytes")

    def __init__(self, nbytes: int = 0, *, handed_over: bool = False) -> None:
        self.nbytes = nbytes
        self.handed_over = handed_over


def _unsupported(feature: str) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """An RPC of a feature this server does not offer. The generated servicer's own answer
    raises NotImplementedError, which grpc reports as an unexpected error with a traceback in
    the server's log on every call: a client that polls shared-memory status would fill it."""
    message = f"'{feature}' is not supported by this server"

    async def refuse(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    return refuse


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService`` over one ``InferenceServer``."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=self.server.live)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=self.server.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            version = parse_version(request.version)
            ready = self.server.model_ready(request.name, version)
            return service_pb2.ModelReadyResponse(ready=ready)

        return await _call(context, body)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        meta = self.server.server_metadata()
        return service_pb2.ServerMetadataResponse(
            name=meta["name"], version=meta["version"], extensions=meta["extensions"]
        )

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            meta = self.server.model_metadata(request.name, parse_version(request.version))
            response = service_pb2.ModelMetadataResponse(
                name=meta["name"], versions=meta["versions"], platform=meta["platform"]
            )
            for key in ("inputs", "outputs"):
                for tensor in meta[key]:
                    getattr(response, key).add(**tensor)
            return response

        return await _call(context, body)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            lv = self.server.resolve(request.name, parse_version(request.version))
            return service_pb2.ModelConfigResponse(config=lv.spec.config)

        return await _call(context, body)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            infer_request = decode_infer_request(request)
            budget = self.server.request_bytes
            taken = budget.take_inputs(infer_request.inputs)
            try:
                response = await self.server.infer(infer_request, decoupled_error=DECOUPLED_GRPC)
                return encode_infer_response(response, infer_request.id, in_place=True)
            finally:
                if taken:
                    budget.give_back(taken)

        return await _call(context, body)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        # Answers in order, ``_Counted`` markers among them (see ``one``), None at the end.
        results: asyncio.Queue[Any] = asyncio.Queue(maxsize=STREAM_MAX_BUFFERED)
        pending: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(STREAM_MAX_IN_FLIGHT)
        budget = self.server.request_bytes

        async def one(message: Any) -> None:
            # A request's bytes stay taken from the budget until its last answer has gone to
            # the client, not just into ``results``: a client that stops reading would
            # otherwise have answers pile up here outside the budget. Its marker follows its
            # answers, and the writer below gives the bytes back when it reaches it.
            # An answer's outputs count the same way, each until that answer has gone, by a
            # marker of their own after it.
            counted = _Counted()
            outputs = 0  # the outputs of the answer being put, until their marker is
            try:
                async for answer, outputs in self._stream_answers(message, counted):
                    await results.put(answer)
                    if outputs:
                        await results.put(_Counted(outputs, handed_over=True))
                        outputs = 0
                if counted.nbytes:
                    await results.put(counted)
                    counted.handed_over = True
            finally:
                slots.release()
                if outputs:
                    budget.give_back(outputs)
                if counted.nbytes and not counted.handed_over:
                    budget.give_back(counted.nbytes)

        async def read() -> None:
            async for message in request_iterator:
                await slots.acquire()
                task = asyncio.create_task(one(message))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.gather(*pending)
            await results.put(None)

        reader = asyncio.create_task(read())
        try:
            while (item := await results.get()) is not None:
                if type(item) is _Counted:
                    budget.give_back(item.nbytes)
                else:
                    yield item
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()  # NOTE: one not yet past its marker's put gives its bytes back
            while not results.empty():  # markers already put: their answers will never go
                item = results.get_nowait()
                if type(item) is _Counted:
                    budget.give_back(item.nbytes)

    async def _stream_answers(
        self, message: Any, counted: _Counted
    ) -> AsyncIterator[tuple[Any, int]]:
        """Every answer to one streamed request: a decoupled model's responses in order, each
        marked ``triton_final_response``; a flag-only final one only when the request asked for
        it (``triton_enable_empty_final_response``); errors in-band, the stream staying open.
        Each answer comes with the output bytes it holds from the budget, and the request bytes
        it takes are left in ``counted``, for the caller to give back."""
        param = message.parameters.get(EMPTY_FINAL_PARAMETER)
        empty_final = param is not None and param.bool_param
        budget = self.server.request_bytes
        try:
            infer_request = decode_infer_request(message)
            counted.nbytes = budget.take_inputs(infer_request.inputs)
            async for response, final in self.server.infer_stream(infer_request):
                if response is None and not (final and empty_final):
                    continue
                answer = _stream_response(message, response, final, infer_request.id)
                outputs = response.outputs if isinstance(response, InferResponse) else {}
                yield answer, budget.hold_outputs(outputs)
        except ServingError as exc:
            yield _stream_response(message, exc, True), 0
        except Exception as exc:  # noqa: BLE001 - the stream stays open after a failed request
            incident = report_incident(exc, logger=logger, where="in a streamed request")
            yield _stream_response(message, incident, True), 0

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            name = request.name or None
            version = parse_version(request.version)
            if name is None and version is not None:
                raise InvalidArgumentError("a version needs a model name")
            stats = self.server.statistics(name, version)
            return json_format.ParseDict(
                stats, service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True
            )

        return await _call(context, body)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        response = service_pb2.RepositoryIndexResponse()
        for row in self.server.index(ready_only=request.ready):
            response.models.add(
                name=row["name"],
                version=row.get("version", ""),
                state=row.get("state", ""),
                reason=row.get("reason", ""),
            )
        return response

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            config: str | None = None
            files: dict[str, bytes] = {}
            for key, param in request.parameters.items():
                value = parameter_value(param)
                if key == "config" and isinstance(value, str):
                    config = value
                elif key.startswith("file:") and isinstance(value, bytes):
                    files[key.removeprefix("file:")] = value
                else:
                    raise InvalidArgumentError(f"Unrecognized load parameter '{key}'")
            await self.server.repository_load(request.model_name, config_json=config, files=files)
            return service_pb2.RepositoryModelLoadResponse()

        return await _call(context, body)

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        async def body() -> Any:
            dependents = False
            param = request.parameters.get("unload_dependents")
            if param is not None:
                dependents = bool(parameter_value(param))
            await self.server.repository_unload(request.model_name, unload_dependents=dependents)
            return service_pb2.RepositoryModelUnloadResponse()

        return await _call(context, body)

    SystemSharedMemoryStatus = _unsupported("systemsharedmemory")
    SystemSharedMemoryRegister = _unsupported("systemsharedmemory")
    SystemSharedMemoryUnregister = _unsupported("systemsharedmemory")
    CudaSharedMemoryStatus = _unsupported("cudasharedmemory")
    CudaSharedMemoryRegister = _unsupported("cudasharedmemory")
    CudaSharedMemoryUnregister = _unsupported("cudasharedmemory")
    TraceSetting = _unsupported("trace")
    LogSettings = _unsupported("logging")


class HealthService(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health/Check``: SERVING while the server is live."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server

    async def Check(self, request: Any, context: Any) -> Any:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.server.live
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)


def create_grpc_server(
    server: InferenceServer,
    *,
    max_message_bytes: int,
    in_flight: InFlightLimit | None = None,
    guard: Callable[[Any], Any] | None = None,
) -> grpc.aio.Server:
    """A grpc.aio server (not yet bound or started) with both services registered.

    Messages are capped like HTTP bodies (``--http-max-input-size``); every RPC passes through
    the edge (restricted protocols, then the in-flight cap). ``guard`` wraps the inference
    servicer (the token check, after the edge), never the health service.
    """
    grpc_server = grpc.aio.server(
        interceptors=edge_interceptors(server),
        options=[
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ],
    )
    register_services(grpc_server, server, guard, in_flight)
    return grpc_server


def edge_interceptors(server: InferenceServer) -> list[Any]:
    """The edge interceptor every RPC passes first, when protocols are restricted."""
    from serving.protocol.restricted import GRPC_FLAG, GRPC_HEADER_PREFIX, parse_restrictions

    restrictions = parse_restrictions(
        server.settings.grpc_restricted_protocols, flag=GRPC_FLAG, header_prefix=GRPC_HEADER_PREFIX
    )
    return [EdgeInterceptor(restrictions)] if restrictions else []


def register_services(
    target: Any,
    server: InferenceServer,
    guard: Callable[[Any], Any] | None,
    in_flight: InFlightLimit | None = None,
) -> None:
    """Register the inference service (behind ``guard``) and the health service on ``target``:
    a grpc server, or the relay's collector of handlers. Every RPC but health checks counts
    against ``in_flight`` (None: no cap)."""
    target = InferRequestsInPlace(InferenceMethodsOnly(target))
    if in_flight is not None:
        target = CountingTarget(target, in_flight)
    servicer = InferenceService(server)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        servicer if guard is None else guard(servicer), target
    )
    health_pb2_grpc.add_HealthServicer_to_server(HealthService(server), target)
