"""The serving process's lifecycle: load models, open ports, serve, drain, unload, exit.

``run_server`` is the whole life of one process on a running loop; ``main`` runs it under uvloop
with SIGTERM/SIGINT handlers (what ``manage.py serve`` calls); ``ServingProcess`` runs it on a
background thread for tests and embedding. Ports open only after the start-up load finished.

Stopping drains in three steps: readiness turns false while every listener stays open for
``drain_grace_s`` (a load balancer's health checks see it and stop sending), then the listeners
close and in-flight requests finish (up to ``exit_timeout_s``), then models unload. A second
signal skips what is left of the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
import socket
import threading
from typing import TYPE_CHECKING, Any

import grpc
import uvicorn
import uvloop

from serving import heap, worker_count
from serving.access.guard import AccessGuard
from serving.core.server import InferenceServer
from serving.errors import UnavailableError
from serving.protocol.admission import InFlightLimit
from serving.protocol.grpc.asgi_server import H2cornGrpcServer, TlsFiles
from serving.protocol.grpc.http2_server import Http2GrpcServer
from serving.protocol.grpc.service import (
    create_grpc_server,
    edge_interceptors,
    register_services,
)
from serving.protocol.http.app import HttpApp
from serving.protocol.http.listener import data_plane_server
from serving.protocol.http.metrics_app import MetricsApp
from serving.protocol.http.restricted import RestrictedApiMiddleware
from serving.protocol.restricted import HTTP_FLAG, parse_restrictions
from serving.protocol.tls import grpc_server_credentials, grpc_ssl_context, uvicorn_tls
from serving.settings import PORT_DISABLED, ServingSettings
from serving.sources import ModelSource

if TYPE_CHECKING:
    from serving.frontends import FrontendPool

logger = logging.getLogger("serving")

EXIT_OK = 0
EXIT_LOAD_FAILED = 1


@dataclasses.dataclass(slots=True)
class BoundPorts:
    """The ports the process really listens on (0 in the settings means "any free port")."""

    http: int | None = None
    grpc: int | None = None
    metrics: int | None = None
    # The processes behind each port under --workers (None where the protocol runs in-process).
    grpc_frontends: FrontendPool | None = None
    http_frontends: FrontendPool | None = None


class StartupError(RuntimeError):
    """Start-up failed before the ports opened (``--exit-on-error`` and a model failed)."""


def make_source(settings: ServingSettings) -> ModelSource:
    if not settings.registry_mode:
        from serving.sources.directory import DirectorySource

        return DirectorySource(settings)
    from serving.sources.registry import RegistrySource

    return RegistrySource(settings)


def log_model_table(server: InferenceServer) -> None:
    rows = server.version_rows()
    if not rows:
        logger.info("no models loaded")
        return
    width = max(len(str(r["model"])) for r in rows) + 2
    lines = [f"{'Model':<{width}}{'Version':<9}Status"]
    for row in rows:
        status = row["state"] + (f": {row['reason']}" if row["reason"] else "")
        lines.append(f"{row['model']:<{width}}{row['version']:<9}{status}")
    logger.info("models:\n%s", "\n".join(lines))


async def run_server(
    settings: ServingSettings,
    source: ModelSource | None = None,
    *,
    stop: asyncio.Event | None = None,
    hurry: asyncio.Event | None = None,
    on_ready: Any = None,
) -> int:
    """Serve until ``stop`` is set; returns the exit code. ``on_ready(server, ports)`` is called
    once every port listens; ``hurry`` set cuts the drain grace short."""
    stop = stop or asyncio.Event()
    _sweep_shared_memory()
    source = source or make_source(settings)
    server = InferenceServer(settings)
    server.control = source
    guard = _access_guard(settings, source)
    errors = await source.start(server)
    log_model_table(server)
    if errors and settings.exit_on_error:
        for error in errors:
            logger.error("%s", error)
        logger.error("failed to load all models")
        await source.stop()
        await server.shutdown()
        raise StartupError("failed to load all models: " + "; ".join(errors))
    settings, chosen = worker_count.resolve(
        settings, (i for lv in server.loaded_versions() for i in lv.instances)
    )
    if chosen:
        logger.info("%s", chosen)
    ports = BoundPorts()
    metrics_server = None
    http_server: uvicorn.Server | FrontendPool | None = None
    grpc_server: grpc.aio.Server | Http2GrpcServer | H2cornGrpcServer | FrontendPool | None = None
    http_task = metrics_task = None
    in_flight = InFlightLimit(settings.max_in_flight_requests)
    server.opening = True
    try:
        if settings.grpc_workers:  # ready only once the front-ends listen: they start first
            grpc_server = await _start_grpc_frontends(settings, server, ports, in_flight, guard)
        http_server, http_task = await _start_http(settings, server, ports, in_flight, guard)
        if not settings.grpc_workers:
            grpc_server = await _start_grpc(settings, server, ports, in_flight, guard)
        metrics_server, metrics_task = await _start_metrics(settings, server, ports, guard)
    except BaseException:
        await _stop_transports(settings, http_server, http_task, grpc_server)
        await _stop_uvicorn(metrics_server, metrics_task, timeout_s=1.0)
        await source.stop()
        await server.shutdown()
        raise
    server.opening = False
    set_endpoints = getattr(source, "set_endpoints", None)
    if set_endpoints is not None:
        set_endpoints(http_port=ports.http)
    sampler = _start_live_stats_sampler(server)
    auth = "required" if guard else "off"
    logger.info("serving: HTTP %s, gRPC %s, metrics %s on %s (inference auth %s)",
                ports.http, ports.grpc, ports.metrics, settings.host, auth)  # fmt: skip
    if on_ready is not None:
        on_ready(server, ports)
    await stop.wait()
    await _drain_grace(server, settings.drain_grace_s, hurry or asyncio.Event())
    logger.info("shutting down: draining in-flight requests (up to %ss)", settings.exit_timeout_s)
    server.shutting_down = True
    await _stop_transports(settings, http_server, http_task, grpc_server)
    await _stop_uvicorn(metrics_server, metrics_task, timeout_s=1.0)
    await source.stop()
    await server.shutdown()
    for task in (sampler,):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    logger.info("stopped")
    return EXIT_OK


def _access_guard(settings: ServingSettings, source: ModelSource) -> AccessGuard | None:
    """The one access layer both listeners pass through; its table comes from the source."""
    if not settings.auth_required:
        return None
    attach = getattr(source, "set_access_guard", None)
    if attach is None:
        raise StartupError("inference auth is required but this model source has no tokens")
    guard = AccessGuard()
    attach(guard)
    return guard


async def _drain_grace(server: InferenceServer, grace_s: float, hurry: asyncio.Event) -> None:
    """Not ready, still serving: load balancers take a few health checks to stop sending."""
    server.draining = True
    if grace_s <= 0 or hurry.is_set():
        return
    logger.info("not ready; listeners stay open %ss so load balancers stop sending", grace_s)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hurry.wait(), timeout=grace_s)


def _sweep_shared_memory() -> None:
    """Python models' segments left by servers that were killed (nothing else ever frees them)."""
    from serving.backends.python import shm

    removed = shm.sweep_dead_servers()
    if removed:
        logger.info("removed %d shared memory segments of servers no longer running", len(removed))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _uvicorn(app: Any, settings: ServingSettings, tls: dict[str, Any]) -> uvicorn.Server:
    return data_plane_server(
        app,
        header_timeout_s=settings.http_header_timeout_s,
        body_timeout_s=settings.http_body_timeout_s,
        send_timeout_s=settings.send_timeout_s,
        graceful_shutdown_s=settings.exit_timeout_s,
        tls=tls,
    )


async def _serve_uvicorn(
    app: Any, settings: ServingSettings, port: int, *, tls: dict[str, Any]
) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    server = _uvicorn(app, settings, tls)
    server.config.load()  # NOTE: before binding: unreadable certificates fail with nothing open
    sock = _bind(settings.host, port)
    bound = int(sock.getsockname()[1])
    # NOTE: ``_serve`` is ``serve`` without uvicorn's own signal handling; the process owns signals.
    task = asyncio.create_task(server._serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return server, task, bound


async def _start_http(
    settings: ServingSettings,
    server: InferenceServer,
    ports: BoundPorts,
    in_flight: InFlightLimit,
    guard: AccessGuard | None,
) -> tuple[uvicorn.Server | FrontendPool | None, asyncio.Task[None] | None]:
    if settings.http_port == PORT_DISABLED:
        return None, None
    app = _http_app(settings, server, in_flight, guard)
    if settings.http_workers:
        from serving.frontend_start import start_http_frontends

        pool = await start_http_frontends(settings, app)
        ports.http, ports.http_frontends = pool.port, pool
        return pool, None
    tls = uvicorn_tls(settings.http_ssl_cert, settings.http_ssl_key)
    http, task, ports.http = await _serve_uvicorn(app, settings, settings.http_port, tls=tls)
    return http, task


def _http_app(
    settings: ServingSettings,
    server: InferenceServer,
    in_flight: InFlightLimit,
    guard: AccessGuard | None,
) -> Any:
    """The HTTP listener's ASGI stack, the same in-process and behind front-ends."""
    app: Any = HttpApp(server, max_request_bytes=settings.max_request_bytes, in_flight=in_flight)
    # Tokens are checked before anything else of the request is looked at, and after the
    # restricted-API headers (a request that may not use an API at all is refused first).
    if guard is not None:
        from serving.access.http import AccessMiddleware

        app = AccessMiddleware(app, guard)
    restrictions = parse_restrictions(settings.http_restricted_apis, flag=HTTP_FLAG)
    if restrictions:
        app = RestrictedApiMiddleware(app, restrictions)
    return app


async def _start_grpc(
    settings: ServingSettings,
    server: InferenceServer,
    ports: BoundPorts,
    in_flight: InFlightLimit,
    guard: AccessGuard | None,
) -> grpc.aio.Server | Http2GrpcServer | H2cornGrpcServer | None:
    if settings.grpc_port == PORT_DISABLED:
        return None
    guarded = None
    if guard is not None:
        from serving.access.grpc import GuardedServicer

        guarded = functools.partial(GuardedServicer, guard=guard)
    limit = in_flight if in_flight.limit else None
    if settings.grpc_transport == "h2":
        listener = Http2GrpcServer(
            lambda target: register_services(target, server, guarded, limit),
            interceptors=edge_interceptors(server),
            max_message_bytes=settings.max_request_bytes,
            send_timeout_s=settings.send_timeout_s,
            tls=grpc_ssl_context(settings),
            request_bytes=server.request_bytes,
        )
        ports.grpc = await listener.start(settings.host, settings.grpc_port)
        return listener
    if settings.grpc_transport == "h2corn":
        native = H2cornGrpcServer(
            lambda target: register_services(target, server, guarded, limit),
            interceptors=edge_interceptors(server),
            max_message_bytes=settings.max_request_bytes,
            grace_s=settings.exit_timeout_s,
            send_timeout_s=settings.send_timeout_s,
            tls=TlsFiles.from_settings(settings),
            request_bytes=server.request_bytes,
        )
        ports.grpc = await native.start(settings.host, settings.grpc_port)
        return native
    grpc_server = create_grpc_server(
        server, max_message_bytes=settings.max_request_bytes, in_flight=limit, guard=guarded
    )
    address = _grpc_address(settings.host, settings.grpc_port)
    credentials = grpc_server_credentials(settings)
    if credentials is None:
        ports.grpc = grpc_server.add_insecure_port(address)
    else:
        ports.grpc = grpc_server.add_secure_port(address, credentials)
    await grpc_server.start()
    return grpc_server


async def _start_grpc_frontends(
    settings: ServingSettings,
    server: InferenceServer,
    ports: BoundPorts,
    in_flight: InFlightLimit,
    guard: AccessGuard | None,
) -> FrontendPool | None:
    """``--grpc-workers N``: N front-end processes relaying to this one (``frontends``)."""
    if settings.grpc_port == PORT_DISABLED:
        return None
    from serving.frontend_start import start_grpc_frontends

    pool = await start_grpc_frontends(settings, server, in_flight, guard)
    ports.grpc, ports.grpc_frontends = pool.port, pool
    return pool


def _grpc_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _start_metrics(
    settings: ServingSettings, server: InferenceServer, ports: BoundPorts, guard: AccessGuard | None
) -> tuple[uvicorn.Server | None, asyncio.Task[None] | None]:
    if settings.metrics_port == PORT_DISABLED:
        return None, None
    tls = uvicorn_tls(settings.metrics_ssl_cert, settings.metrics_ssl_key)
    metrics, task, ports.metrics = await _serve_uvicorn(
        MetricsApp(server, access=guard), settings, settings.metrics_port, tls=tls
    )
    return metrics, task


def _start_live_stats_sampler(server: InferenceServer) -> asyncio.Task[None] | None:
    try:
        from serving.observability.live_stats import sample_forever
    except ImportError:
        return None
    return asyncio.create_task(sample_forever(server))


async def _stop_transports(
    settings: ServingSettings,
    http_server: uvicorn.Server | FrontendPool | None,
    http_task: asyncio.Task[None] | None,
    grpc_server: grpc.aio.Server | Http2GrpcServer | H2cornGrpcServer | FrontendPool | None,
) -> None:
    if isinstance(http_server, uvicorn.Server) or http_server is None:
        stop_http = _stop_uvicorn(http_server, http_task, timeout_s=settings.exit_timeout_s)
    else:
        stop_http = http_server.stop(grace_s=settings.exit_timeout_s)
    waits = [asyncio.ensure_future(stop_http)]
    if isinstance(grpc_server, grpc.aio.Server):
        waits.append(asyncio.ensure_future(grpc_server.stop(grace=settings.exit_timeout_s)))
    elif grpc_server is not None:
        waits.append(asyncio.ensure_future(grpc_server.stop(grace_s=settings.exit_timeout_s)))
    await asyncio.wait(waits)


async def _stop_uvicorn(
    server: uvicorn.Server | None, task: asyncio.Task[None] | None, *, timeout_s: float
) -> None:
    """Stop accepting, let in-flight requests finish (bounded), then close what is left."""
    if server is None or task is None:
        return
    server.should_exit = True
    done, _ = await asyncio.wait([task], timeout=timeout_s + 0.5)
    if done:
        return
    server.force_exit = True
    for connection in list(server.server_state.connections):
        transport = getattr(connection, "transport", None)
        if transport is not None:
            transport.close()
    done, _ = await asyncio.wait([task], timeout=1.0)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def main(settings: ServingSettings) -> int:
    """Run one serving process until SIGTERM/SIGINT; the process's exit code."""

    async def run() -> int:
        stop, hurry = asyncio.Event(), asyncio.Event()

        def on_signal() -> None:
            if stop.is_set():  # a second signal: no more waiting for load balancers
                hurry.set()
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            return await run_server(settings, stop=stop, hurry=hurry, on_ready=_settle_heap)
        except StartupError:
            return EXIT_LOAD_FAILED
        except UnavailableError as exc:  # the registry unreachable, with nothing kept to serve
            logger.error("cannot start serving: %s", exc.message)
            return EXIT_LOAD_FAILED
        except OSError as exc:  # a port that cannot be bound, most often
            logger.error("cannot start serving: %s", exc)
            return EXIT_LOAD_FAILED

    return uvloop.run(run())


def _settle_heap(server: InferenceServer, ports: BoundPorts) -> None:
    """Start-up's models and modules are loaded: the collector stops walking them."""
    heap.freeze_startup_objects()


class ServingProcess:
    """The serving process on a background thread with its own loop, for tests and embedding."""

    def __init__(self, settings: ServingSettings, source: ModelSource | None = None) -> None:
        self.settings = settings
        self.source = source
        self.server: InferenceServer | None = None
        self.ports = BoundPorts()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="serving", daemon=True)

    def start(self, timeout_s: float = 120.0) -> ServingProcess:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("serving did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout_s: float = 60.0, *, drain_grace: bool = False) -> None:
        """Stop and wait; an embedded server skips the drain grace unless asked (no load
        balancer waits on it)."""
        if self.loop is not None and self._stop is not None and self._thread.is_alive():
            if not drain_grace and self._hurry is not None:
                self.loop.call_soon_threadsafe(self._hurry.set)
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def call(self, coro: Any, timeout_s: float = 120.0) -> Any:
        """Run a coroutine on the serving loop from another thread and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    def __enter__(self) -> ServingProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            uvloop.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that called start()
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop, self._hurry = asyncio.Event(), asyncio.Event()

        def ready(server: InferenceServer, ports: BoundPorts) -> None:
            self.server, self.ports = server, ports
            self._ready.set()

        await run_server(
            self.settings, self.source, stop=self._stop, hurry=self._hurry, on_ready=ready
        )
