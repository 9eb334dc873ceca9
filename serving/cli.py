"""The serving command line (Triton's flag names), shared by ``manage.py serve`` and
``python -m serving``. Every flag falls back to its ``SERVING_*`` variable, then to the default."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from serving import worker_count
from serving.settings import (
    CONTROL_MODES,
    GRPC_TRANSPORTS,
    ServingSettings,
    parse_bool,
    settings_from_env,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model-repository", "--model-store", dest="model_repository",
        help="serve this Triton-layout folder or s3://[host:port/]bucket/path "
             "(absent: serve the registry)")  # fmt: skip
    add("--model-control-mode", choices=CONTROL_MODES, help="none (default), poll or explicit")
    add("--repository-poll-secs", dest="repository_poll_s", type=float,
        help="poll mode: seconds between repository scans (default 15)")  # fmt: skip
    add("--load-model", dest="load_models", action="append",
        help="explicit mode: model to load at start-up (repeatable; '*' = all)")  # fmt: skip
    add("--model-config-name", help="use configs/<name>.pbtxt in a model folder when present")
    add("--disable-auto-complete-config", "--strict-model-config", dest="auto_complete_config",
        action="store_const", const=False,
        help="do not fill the config in from the model files (Triton's flag)")  # fmt: skip
    add("--host", "--http-address", dest="host",
        help="address to bind (default 0.0.0.0; 127.0.0.1 in registry mode, auth off)")  # fmt: skip
    add("--http-port", type=int, help="HTTP port (default 8000; 0 = any free port, -1 = off)")
    add("--grpc-port", type=int, help="gRPC port (default 8001; 0 = any free port, -1 = off)")
    add("--workers", type=worker_count.parse,
        help="front-end processes per protocol, or auto: sets --grpc-workers and "
             "--http-workers where they are not given (default auto: from the usable cores, "
             "0 below 4)")  # fmt: skip
    add("--grpc-workers", type=worker_count.parse,
        help="gRPC front-end processes sharing the gRPC port (SO_REUSEPORT) that relay calls to "
             "this one (0: gRPC in this process; default auto)")  # fmt: skip
    add("--grpc-transport", choices=GRPC_TRANSPORTS,
        help="the gRPC listener: h2corn (default: HTTP/2 in native code, the calls on this "
             "process's loop), h2 (HTTP/2 in Python on the loop; more CPU per call) or grpcio "
             "(grpc.aio)")  # fmt: skip
    add("--http-workers", type=worker_count.parse,
        help="HTTP front-end processes sharing the HTTP port (SO_REUSEPORT) that relay requests "
             "to this one (0: HTTP in this process; default auto)")  # fmt: skip
    add("--metrics-port", type=int, help="metrics port (default 8002; 0 = any, -1 = off)")
    add("--strict-readiness", type=parse_bool, nargs="?", const=True,
        help="ready only when every model version is READY (default true)")  # fmt: skip
    add("--exit-on-error", type=parse_bool, nargs="?", const=True,
        help="exit when a start-up model fails to load (default true)")  # fmt: skip
    add("--http-max-input-size", dest="max_request_bytes", type=int,
        help="largest accepted HTTP request body in bytes (default 64 MiB)")  # fmt: skip
    add("--http-body-timeout-secs", dest="http_body_timeout_s", type=float,
        help="most seconds between two reads of a request body before answering 408 "
             "(default 60)")  # fmt: skip
    add("--send-timeout-secs", dest="send_timeout_s", type=float,
        help="a connection (HTTP, gRPC) or HTTP/2 stream whose client takes none of its "
             "answer this long is reset (default 60)")  # fmt: skip
    add("--exit-timeout-secs", dest="exit_timeout_s", type=float,
        help="how long shutdown waits for in-flight requests (default 30)")  # fmt: skip
    add("--drain-grace-secs", dest="drain_grace_s", type=float,
        help="after SIGTERM: seconds not ready but still listening, so load balancers stop "
             "sending before the listeners close (default 5)")  # fmt: skip
    add("--id", dest="server_id", help="server name in the metadata (default 'triton')")
    add("--cache-dir", type=Path,
        help="local artifact cache (registry mode; the copy of an s3:// repository)")  # fmt: skip
    add("--http-restricted-api", dest="http_restricted_apis", action="append",
        help="'<api>[,<api>...]:<header>=<value>': those APIs answer only requests with that "
             "header (repeatable; Triton's flag)")  # fmt: skip
    add("--grpc-restricted-protocol", dest="grpc_restricted_protocols", action="append",
        help="'<api>[,<api>...]:<key>=<value>': those RPCs answer only requests with "
             "'triton-grpc-protocol-<key>' metadata (repeatable; Triton's flag)")  # fmt: skip
    add("--max-in-flight-requests", type=int,
        help="requests one replica accepts at once before answering 503 (default 1024; 0: no "
             "cap)")  # fmt: skip
    add("--max-in-flight-request-bytes", type=int,
        help="bytes of inference requests one replica serves at once (HTTP bodies and gRPC "
             "messages together); a request that would pass it gets 503 / UNAVAILABLE "
             "(default 0: no budget; else at least --http-max-input-size)")  # fmt: skip
    add("--max-unread-response-bytes", type=int,
        help="bytes of a decoupled model's responses one streamed request may have waiting "
             "for a client that reads slower than the model sends; past it the model's sends "
             "wait until the client has read half (default 64 MiB; 0: no limit)")  # fmt: skip
    add("--unread-response-timeout-secs", dest="unread_response_timeout_s", type=float,
        help="a stream held back by --max-unread-response-bytes this long (its client read "
             "less than half) ends UNAVAILABLE; the model sees it cancelled "
             "(default 60)")  # fmt: skip
    add(
        "--on-demand-max-versions",
        type=int,
        help="registry mode: extra versions per model loaded on demand (default 2)",
    )
    add(
        "--on-demand-idle-secs",
        dest="on_demand_idle_s",
        type=float,
        help="registry mode: unload an unused on-demand version after this (default 600)",
    )
    add("--backend-config", dest="backend_config", action="append",
        help="'<backend>,<setting>=<value>': a parameter every model of that backend gets "
             "unless its config sets it (repeatable; Triton's flag)")  # fmt: skip
    add("--log-verbose", type=int, default=0, help="0: info, 1 or more: debug")
    _add_tls_arguments(parser)


def _add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """gRPC TLS with Triton's flags; HTTPS (Triton has none) with flags named in their style."""
    add = parser.add_argument
    add("--grpc-use-ssl", type=parse_bool, nargs="?", const=True,
        help="gRPC over TLS with --grpc-server-cert/--grpc-server-key (default false)")  # fmt: skip
    add("--grpc-use-ssl-mutual", type=parse_bool, nargs="?", const=True,
        help="gRPC over mutual TLS: clients need a certificate signed by --grpc-root-cert "
             "(implies --grpc-use-ssl)")  # fmt: skip
    add("--grpc-server-cert", type=Path, help="PEM file: the gRPC server's certificate (chain)")
    add("--grpc-server-key", type=Path, help="PEM file: the gRPC server's private key")
    add("--grpc-root-cert", type=Path, help="PEM file: the CA that client certificates chain to")
    add("--http-ssl-cert", type=Path, help="PEM file: serve HTTPS on the HTTP port with this cert")
    add("--http-ssl-key", type=Path, help="PEM file: the HTTPS private key")
    add("--metrics-ssl-cert", type=Path, help="PEM file: serve the metrics port over HTTPS")
    add("--metrics-ssl-key", type=Path, help="PEM file: the metrics port's private key")


TLS_KEYS = ("grpc_use_ssl", "grpc_use_ssl_mutual", "grpc_server_cert", "grpc_server_key",
            "grpc_root_cert", "http_ssl_cert", "http_ssl_key", "metrics_ssl_cert",
            "metrics_ssl_key")  # fmt: skip


def settings_from_args(options: dict[str, Any]) -> ServingSettings:
    keys = ("model_repository", "model_control_mode", "repository_poll_s", "model_config_name",
            "auto_complete_config", "host", "http_port", "grpc_port", "grpc_workers",
            "grpc_transport", "http_workers", "metrics_port", "strict_readiness", "exit_on_error",
            "max_request_bytes", "exit_timeout_s", "drain_grace_s", "server_id", "cache_dir",
            "max_in_flight_requests", "max_in_flight_request_bytes", "max_unread_response_bytes",
            "on_demand_max_versions", "on_demand_idle_s")  # fmt: skip
    every = (*keys, "http_body_timeout_s", "send_timeout_s", "unread_response_timeout_s",
             *TLS_KEYS)  # fmt: skip
    overrides: dict[str, Any] = {key: options.get(key) for key in every}
    for protocol_workers in ("grpc_workers", "http_workers"):
        if overrides[protocol_workers] is None:
            overrides[protocol_workers] = options.get("workers")
    repeatable = ("load_models", "http_restricted_apis", "grpc_restricted_protocols",
                  "backend_config")  # fmt: skip
    for repeated in repeatable:
        if options.get(repeated):
            overrides[repeated] = tuple(options[repeated])
    return settings_from_env(**overrides)


def configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
