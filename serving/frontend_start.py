"""Starting the front-end processes of ``serve --workers N`` (``--grpc-workers``,
``--http-workers``): each protocol's pool (``serving.frontends``) with this process's end of
every socket running the same handlers as the in-process listener would."""

from __future__ import annotations

import functools
from typing import Any

from serving.access.guard import AccessGuard
from serving.core.server import InferenceServer
from serving.frontends import FrontendPool
from serving.protocol.admission import InFlightLimit
from serving.settings import ServingSettings


async def start_grpc_frontends(
    settings: ServingSettings,
    server: InferenceServer,
    in_flight: InFlightLimit,
    guard: AccessGuard | None,
) -> FrontendPool:
    """``settings.grpc_workers`` gRPC front-ends, listening once this returns."""
    from serving.protocol.grpc.calls import Dispatcher
    from serving.protocol.grpc.relay import RelayConnection
    from serving.protocol.grpc.service import edge_interceptors, register_services

    guarded = None
    if guard is not None:
        from serving.access.grpc import GuardedServicer

        guarded = functools.partial(GuardedServicer, guard=guard)
    limit = in_flight if in_flight.limit else None
    dispatcher = Dispatcher(
        lambda target: register_services(target, server, guarded, limit),
        edge_interceptors(server),
    )

    def arguments(host: str, port: int) -> list[str]:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return ["--address", address, "--max-message-bytes", str(settings.max_request_bytes),
                "--grace-s", str(settings.exit_timeout_s),
                "--send-timeout-s", str(settings.send_timeout_s),
                "--transport", settings.grpc_transport]  # fmt: skip

    pool = FrontendPool(
        "gRPC", settings.grpc_workers or 0, settings.host, settings.grpc_port,
        module="serving.protocol.grpc.frontend", arguments=arguments,
        connect=functools.partial(RelayConnection, dispatcher), grace_s=settings.exit_timeout_s,
    )  # fmt: skip
    await pool.start()
    return pool


async def start_http_frontends(settings: ServingSettings, app: Any) -> FrontendPool:
    """``settings.http_workers`` HTTP front-ends relaying to ``app`` (the whole ASGI stack of
    the in-process listener), listening once this returns."""
    from serving.protocol.http.relay import HttpRelayConnection

    def arguments(host: str, port: int) -> list[str]:
        return ["--host", host, "--port", str(port),
                "--header-timeout-s", str(settings.http_header_timeout_s),
                "--body-timeout-s", str(settings.http_body_timeout_s),
                "--send-timeout-s", str(settings.send_timeout_s),
                "--grace-s", str(settings.exit_timeout_s)]  # fmt: skip

    pool = FrontendPool(
        "HTTP", settings.http_workers or 0, settings.host, settings.http_port,
        module="serving.protocol.http.frontend", arguments=arguments,
        connect=functools.partial(HttpRelayConnection, app), grace_s=settings.exit_timeout_s,
    )  # fmt: skip
    await pool.start()
    return pool
