"""The uvicorn server every HTTP listener of the data plane runs (in the serving process, and in
each HTTP front-end process): Portico's own connection protocol (``connection``), no lifespan, no
``server`` header, no per-request access log and no proxy-header rewriting."""

from __future__ import annotations

import logging
from typing import Any

import uvicorn

from serving.protocol.http.connection import data_plane_connection

KEEP_ALIVE_S = 60


def data_plane_server(
    app: Any,
    *,
    header_timeout_s: float,
    body_timeout_s: float,
    send_timeout_s: float,
    graceful_shutdown_s: float,
    tls: dict[str, Any] | None = None,
) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http=data_plane_connection(header_timeout_s, body_timeout_s, send_timeout_s),
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        # NOTE: nothing on the data plane reads the client's address or scheme (no access log;
        # callers are told apart by their token), so uvicorn's middleware would read
        # X-Forwarded-For and X-Forwarded-Proto on every request for nobody.
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=max(1, int(graceful_shutdown_s)),
        **(tls or {}),
    )
    # NOTE: no per-request access log on the data plane (it costs more than routing does).
    access = logging.getLogger("uvicorn.access")
    access.handlers, access.propagate, access.disabled = [], False, True
    return uvicorn.Server(config)
