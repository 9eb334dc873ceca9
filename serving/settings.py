"""Settings of one serving process: one frozen object built from flags and ``SERVING_*`` variables.

Every flag has an environment variable (``--http-port`` <-> ``SERVING_HTTP_PORT``); a flag given on
the command line wins. ``PORTICO_INFERENCE_AUTH=required|off`` (no flag) decides whether registry
mode asks for inference tokens: required unless switched off, and with it off the default bind is
loopback only. Ports: ``0`` picks a free port (the bound port is logged and available on the
running server), ``-1`` disables that endpoint.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from repository.config.cpu_quota import usable_cpu_count
from serving import worker_count

CONTROL_MODES = ("none", "poll", "explicit")
# h2: the loop's own HTTP/2 listener (http2_server); grpcio: grpc.aio's, as before it; h2corn:
# HTTP/2 in native code, calls served on the loop through ASGI (asgi_server).
GRPC_TRANSPORTS = ("h2", "grpcio", "h2corn")
INFERENCE_AUTH_MODES = ("required", "off")
LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 1024
# As much as the largest request by default: what a lagging client may leave one stream holding.
DEFAULT_MAX_UNREAD_RESPONSE_BYTES = 64 * 1024 * 1024
PORT_DISABLED = -1


@dataclasses.dataclass(frozen=True, slots=True)
class ServingSettings:
    """Everything the serving process reads at start-up. Units are in the names."""

    model_repository: Path | None = None  # None (and no URL): serve the registry
    model_repository_url: str = ""  # an s3:// repository, mirrored into a local folder
    model_control_mode: str = "none"
    repository_poll_s: float = 15.0
    load_models: tuple[str, ...] = ()
    model_config_name: str = ""  # use configs/<name>.pbtxt where a model has one
    auto_complete_config: bool = True
    # "": 0.0.0.0, except registry mode with inference auth off, which binds loopback only.
    host: str = ""
    http_port: int = 8000
    grpc_port: int = 8001
    # Front-end processes relaying to this one per protocol; 0: the protocol is served in-process.
    # ``worker_count.AUTO`` (the ``serve`` command's default, from ``settings_from_env``) is
    # resolved from the cores once the start-up models have loaded (``worker_count.resolve``).
    grpc_workers: int | None = 0
    grpc_transport: str = "h2corn"  # the gRPC listener: one of GRPC_TRANSPORTS
    http_workers: int | None = 0
    metrics_port: int = 8002
    strict_readiness: bool = True
    exit_on_error: bool = True
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    exit_timeout_s: float = 30.0
    http_header_timeout_s: float = 30.0  # a request's headers must arrive within this
    http_body_timeout_s: float = 60.0  # most silence allowed between two reads of a body
    # SIGTERM: not ready at once, listeners kept open this long so load balancers stop sending.
    drain_grace_s: float = 5.0
    server_id: str = "triton"
    cache_dir: Path | None = None  # registry mode: where blobs are materialised
    registry_poll_s: float = 2.0
    heartbeat_interval_s: float = 5.0
    replica_id: str = ""
    replica_address: str = ""  # host name other replicas and the console reach this one by
    advertised_http_url: str = ""
    redis_url: str = ""
    cpu_count: int = 0  # 0: the cores the process may use (affinity and cgroup quota)
    gpu_count: int = -1  # -1: detect
    # PORTICO_INFERENCE_AUTH: "" is "required" in registry mode; folder mode has no token table.
    inference_auth: str = ""
    # TLS (docs/serving.md "TLS"). gRPC with Triton's flags: mutual implies SSL.
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    grpc_root_cert: Path | None = None
    # HTTPS on the inference port and, separately, on the metrics port (PEM files).
    http_ssl_cert: Path | None = None
    http_ssl_key: Path | None = None
    metrics_ssl_cert: Path | None = None
    metrics_ssl_key: Path | None = None
    http_restricted_apis: tuple[str, ...] = ()  # Triton's '<api>[,<api>...]:<header>=<value>'
    grpc_restricted_protocols: tuple[str, ...] = ()
    max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS  # per replica; 0: no cap
    # Bytes of the inference requests one replica serves at once (HTTP and gRPC); 0: no budget.
    max_in_flight_request_bytes: int = 0
    # Response bytes one streamed request may have waiting for its client before the model is
    # held back; 0: no limit. A stream held back for the timeout ends.
    max_unread_response_bytes: int = DEFAULT_MAX_UNREAD_RESPONSE_BYTES
    unread_response_timeout_s: float = 60.0
    # nginx's send_timeout: a connection or HTTP/2 stream whose client takes none of its answer
    # for this long is reset (``protocol/write_stall.py``).
    send_timeout_s: float = 60.0
    on_demand_max_versions: int = 2  # registry mode: extra versions per model kept loaded
    on_demand_idle_s: float = 600.0  # registry mode: an unused extra version unloads after this
    backend_config: tuple[str, ...] = ()  # Triton's '<backend>,<setting>=<value>'

    def __post_init__(self) -> None:
        # Resolved first: the checks below (explicit model control on a non-loopback address)
        # judge the address actually bound, never the unset "".
        if not self.host:
            host = LOOPBACK if self.registry_mode and not self.auth_required else ANY_ADDRESS
            object.__setattr__(self, "host", host)
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        problems: list[str] = []
        if self.model_control_mode not in CONTROL_MODES:
            problems.append(
                f"--model-control-mode: expected one of {', '.join(CONTROL_MODES)}, "
                f"got '{self.model_control_mode}'"
            )
        if self.grpc_transport not in GRPC_TRANSPORTS:
            problems.append(
                f"--grpc-transport: expected one of {', '.join(GRPC_TRANSPORTS)}, "
                f"got '{self.grpc_transport}'"
            )
        if "*" in self.load_models and len(self.load_models) > 1:
            problems.append("--load-model: '*' must be the only --load-model value")
        if self.load_models and self.model_control_mode != "explicit":
            problems.append("--load-model: only allowed with --model-control-mode=explicit")
        for name, port in (
            ("--http-port", self.http_port),
            ("--grpc-port", self.grpc_port),
            ("--metrics-port", self.metrics_port),
        ):
            if not PORT_DISABLED <= port <= 65535:
                problems.append(f"{name}: expected -1 (disabled), 0 (any) or a port, got {port}")
        if self.max_request_bytes <= 0:
            problems.append("--http-max-input-size: must be positive")
        if self.repository_poll_s <= 0:
            problems.append("--repository-poll-secs: must be positive")
        if self.http_header_timeout_s <= 0:
            problems.append("SERVING_HTTP_HEADER_TIMEOUT_SECS: must be positive")
        if self.http_body_timeout_s <= 0:
            problems.append("--http-body-timeout-secs: must be positive")
        if self.send_timeout_s <= 0:
            problems.append("--send-timeout-secs: must be positive")
        if self.exit_timeout_s < 0:
            problems.append("--exit-timeout-secs: must not be negative")
        if self.drain_grace_s < 0:
            problems.append("--drain-grace-secs: must not be negative")
        if self.max_in_flight_requests < 0:
            problems.append("--max-in-flight-requests: must not be negative")
        if self.max_in_flight_request_bytes and (
            self.max_in_flight_request_bytes < self.max_request_bytes
        ):
            # NOTE: below the largest request, a request the server accepts could never be served.
            problems.append(
                f"--max-in-flight-request-bytes: must be 0 (no budget) or at least "
                f"--http-max-input-size ({self.max_request_bytes})"
            )
        if self.max_unread_response_bytes < 0:
            problems.append("--max-unread-response-bytes: must not be negative")
        if self.unread_response_timeout_s <= 0:
            problems.append("--unread-response-timeout-secs: must be positive")
        problems.extend(self._grpc_worker_problems())
        problems.extend(self._http_worker_problems())
        if self.on_demand_max_versions < 0:
            problems.append("--on-demand-max-versions: must not be negative")
        if self.on_demand_idle_s <= 0:
            problems.append("--on-demand-idle-secs: must be positive")
        problems.extend(self._restriction_problems())
        problems.extend(self._backend_config_problems())
        problems.extend(self._tls_problems())
        problems += self._auth_problems()
        return problems

    def _grpc_worker_problems(self) -> list[str]:
        if self.grpc_workers is worker_count.AUTO:
            return []  # resolved to what TLS and the message limit allow (worker_count.resolve)
        if self.grpc_workers < 0:
            return ["--grpc-workers: must not be negative"]
        if self.grpc_workers and self.grpc_tls:
            # NOTE: a front-end would need the private key, and front-ends hold no secrets.
            return [
                "--grpc-workers: gRPC over TLS is served in-process only; terminate TLS in a "
                "proxy in front, or use --grpc-workers 0"
            ]
        if self.grpc_workers and not self.fits_relay:
            return ["--grpc-workers: --http-max-input-size must be under 4 GiB"]
        return []

    def _http_worker_problems(self) -> list[str]:
        if self.http_workers is worker_count.AUTO:
            return []
        if self.http_workers < 0:
            return ["--http-workers: must not be negative"]
        if self.http_workers and (self.http_ssl_cert or self.http_ssl_key):
            # NOTE: as for gRPC: a front-end would need the private key; front-ends hold no secrets.
            return [
                "--http-workers: HTTPS is served in-process only; terminate TLS in a proxy in "
                "front, or use --http-workers 0"
            ]
        if self.http_workers and not self.fits_relay:
            return ["--http-workers: --http-max-input-size must be under 4 GiB"]
        return []

    def _backend_config_problems(self) -> list[str]:
        try:
            self.backend_defaults  # noqa: B018 (parsed for its errors)
        except ValueError as error:
            return [str(error)]
        return []

    @property
    def backend_defaults(self) -> dict[str, dict[str, str]]:
        """``--backend-config`` as backend -> {setting -> value}."""
        from serving.backends.backend_config import parse_backend_config

        return parse_backend_config(self.backend_config)

    def _tls_problems(self) -> list[str]:
        problems: list[str] = []
        if self.grpc_tls:
            flag = "--grpc-use-ssl-mutual" if self.grpc_use_ssl_mutual else "--grpc-use-ssl"
            if self.grpc_server_cert is None or self.grpc_server_key is None:
                problems.append(f"{flag}: needs --grpc-server-cert and --grpc-server-key")
            if self.grpc_use_ssl_mutual and self.grpc_root_cert is None:
                problems.append(
                    "--grpc-use-ssl-mutual: needs --grpc-root-cert (the CA that signs clients)"
                )
        for prefix, cert, key in (
            ("--http-ssl", self.http_ssl_cert, self.http_ssl_key),
            ("--metrics-ssl", self.metrics_ssl_cert, self.metrics_ssl_key),
        ):
            if (cert is None) != (key is None):
                problems.append(f"{prefix}-cert and {prefix}-key: give both or neither")
        return problems

    def _auth_problems(self) -> list[str]:
        if self.inference_auth not in ("", *INFERENCE_AUTH_MODES):
            return [f"PORTICO_INFERENCE_AUTH: expected required or off, "
                    f"got '{self.inference_auth}'"]  # fmt: skip
        if self.inference_auth == "required" and not self.registry_mode:
            return [
                "PORTICO_INFERENCE_AUTH=required: a folder repository has no token table "
                "(protect it with restricted APIs and its bind address, as tritonserver)"
            ]
        return []

    @property
    def auth_required(self) -> bool:
        """Whether every request but health needs an inference token (registry mode only)."""
        return self.registry_mode and self.inference_auth != "off"

    @property
    def grpc_tls(self) -> bool:
        """gRPC listens with TLS (Triton: ``--grpc-use-ssl-mutual`` implies ``--grpc-use-ssl``)."""
        return self.grpc_use_ssl or self.grpc_use_ssl_mutual

    @property
    def http_tls(self) -> bool:
        return self.http_ssl_cert is not None

    @property
    def fits_relay(self) -> bool:
        """A request of ``max_request_bytes`` fits one front-end relay frame (a 4-byte length,
        with room for the frame's own header)."""
        return self.max_request_bytes < 2**32 - 2**16

    def _restriction_problems(self) -> list[str]:
        from serving.protocol import restricted

        problems: list[str] = []
        for specs, flag in ((self.http_restricted_apis, restricted.HTTP_FLAG),
                            (self.grpc_restricted_protocols, restricted.GRPC_FLAG)):  # fmt: skip
            try:
                restricted.parse_restrictions(specs, flag=flag)
            except ValueError as exc:
                problems.append(str(exc))
        if not problems and self.exposes_model_control():
            problems.append(
                f"--model-control-mode=explicit on the non-loopback address '{self.host}' lets "
                "anyone who reaches the port load models (and run their code): restrict the "
                "model-repository API on every enabled protocol (--http-restricted-api="
                "model-repository:<header>=<value>, --grpc-restricted-protocol="
                "model-repository:<key>=<value>) or bind --host 127.0.0.1"
            )
        return problems

    def exposes_model_control(self) -> bool:
        """Explicit model control reachable from other hosts without a restriction on it."""
        if self.registry_mode or self.model_control_mode != "explicit" or is_loopback(self.host):
            return False
        open_http = self.http_port != PORT_DISABLED and not _restricts_repository(
            self.http_restricted_apis
        )
        open_grpc = self.grpc_port != PORT_DISABLED and not _restricts_repository(
            self.grpc_restricted_protocols
        )
        return open_http or open_grpc

    @property
    def registry_mode(self) -> bool:
        return self.model_repository is None and not self.model_repository_url

    @property
    def effective_cpu_count(self) -> int:
        return self.cpu_count or usable_cpu_count()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _restricts_repository(specs: tuple[str, ...]) -> bool:
    from serving.protocol import restricted

    groups = restricted.parse_restrictions(specs, flag="")
    return restricted.MODEL_REPOSITORY in groups


def parse_bool(value: str | bool) -> bool:
    """Triton's boolean flag values: true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean, got '{value}'")


_ENV_FIELDS: dict[str, tuple[str, Callable[[str], object]]] = {
    "SERVING_MODEL_REPOSITORY": ("model_repository", str),
    "SERVING_MODEL_CONTROL_MODE": ("model_control_mode", str),
    "SERVING_REPOSITORY_POLL_SECS": ("repository_poll_s", float),
    "SERVING_MODEL_CONFIG_NAME": ("model_config_name", str),
    "SERVING_AUTO_COMPLETE_CONFIG": ("auto_complete_config", bool),
    "SERVING_HOST": ("host", str),
    "SERVING_HTTP_PORT": ("http_port", int),
    "SERVING_GRPC_PORT": ("grpc_port", int),
    "SERVING_GRPC_WORKERS": ("grpc_workers", worker_count.parse),
    "SERVING_GRPC_TRANSPORT": ("grpc_transport", str),
    "SERVING_HTTP_WORKERS": ("http_workers", worker_count.parse),
    "SERVING_METRICS_PORT": ("metrics_port", int),
    "SERVING_STRICT_READINESS": ("strict_readiness", bool),
    "SERVING_EXIT_ON_ERROR": ("exit_on_error", bool),
    "SERVING_HTTP_MAX_INPUT_SIZE": ("max_request_bytes", int),
    "SERVING_EXIT_TIMEOUT_SECS": ("exit_timeout_s", float),
    "SERVING_HTTP_HEADER_TIMEOUT_SECS": ("http_header_timeout_s", float),
    "SERVING_HTTP_BODY_TIMEOUT_SECS": ("http_body_timeout_s", float),
    "SERVING_SEND_TIMEOUT_SECS": ("send_timeout_s", float),
    "SERVING_DRAIN_GRACE_SECS": ("drain_grace_s", float),
    "SERVING_ID": ("server_id", str),
    "SERVING_CACHE_DIR": ("cache_dir", Path),
    "SERVING_REGISTRY_POLL_SECS": ("registry_poll_s", float),
    "SERVING_HEARTBEAT_SECS": ("heartbeat_interval_s", float),
    "SERVING_REPLICA_ID": ("replica_id", str),
    "SERVING_ADVERTISED_HTTP_URL": ("advertised_http_url", str),
    "SERVING_REPLICA_ADDRESS": ("replica_address", str),
    "SERVING_CPU_COUNT": ("cpu_count", int),
    "SERVING_GPU_COUNT": ("gpu_count", int),
    "SERVING_GRPC_USE_SSL": ("grpc_use_ssl", bool),
    "SERVING_GRPC_USE_SSL_MUTUAL": ("grpc_use_ssl_mutual", bool),
    "SERVING_GRPC_SERVER_CERT": ("grpc_server_cert", Path),
    "SERVING_GRPC_SERVER_KEY": ("grpc_server_key", Path),
    "SERVING_GRPC_ROOT_CERT": ("grpc_root_cert", Path),
    "SERVING_HTTP_SSL_CERT": ("http_ssl_cert", Path),
    "SERVING_HTTP_SSL_KEY": ("http_ssl_key", Path),
    "SERVING_METRICS_SSL_CERT": ("metrics_ssl_cert", Path),
    "SERVING_METRICS_SSL_KEY": ("metrics_ssl_key", Path),
    "SERVING_MAX_IN_FLIGHT_REQUESTS": ("max_in_flight_requests", int),
    "SERVING_MAX_IN_FLIGHT_REQUEST_BYTES": ("max_in_flight_request_bytes", int),
    "SERVING_MAX_UNREAD_RESPONSE_BYTES": ("max_unread_response_bytes", int),
    "SERVING_UNREAD_RESPONSE_TIMEOUT_SECS": ("unread_response_timeout_s", float),
    "SERVING_ON_DEMAND_MAX_VERSIONS": ("on_demand_max_versions", int),
    "SERVING_ON_DEMAND_IDLE_SECS": ("on_demand_idle_s", float),
}


def settings_from_env(env: Mapping[str, str] | None = None, **overrides: object) -> ServingSettings:
    """Build settings from ``SERVING_*`` variables (and ``REDIS_URL``), then apply ``overrides``.

    ``overrides`` are the flags given on the command line; a None value means "not given".
    """
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for variable, (field, kind) in _ENV_FIELDS.items():
        raw = env.get(variable)
        if raw is None or raw == "":
            continue
        values[field] = parse_bool(raw) if kind is bool else kind(raw)
    if env.get("SERVING_LOAD_MODEL"):
        values["load_models"] = tuple(env["SERVING_LOAD_MODEL"].split(","))
    for variable, field in (
        ("SERVING_HTTP_RESTRICTED_API", "http_restricted_apis"),
        ("SERVING_GRPC_RESTRICTED_PROTOCOL", "grpc_restricted_protocols"),
        ("SERVING_BACKEND_CONFIG", "backend_config"),
    ):
        if env.get(variable):  # several groups separated by ';' (a group holds ',' and ':')
            values[field] = tuple(g for g in env[variable].split(";") if g)
    # Both protocols' front-ends, where not set one by one; unset, ``auto`` (worker_count).
    raw_both = env.get("SERVING_WORKERS")
    both = worker_count.parse(raw_both) if raw_both else worker_count.AUTO_WORD
    for field in ("grpc_workers", "http_workers"):
        values.setdefault(field, both)
    if env.get("REDIS_URL"):
        values["redis_url"] = env["REDIS_URL"]
    if env.get("PORTICO_INFERENCE_AUTH"):
        values["inference_auth"] = env["PORTICO_INFERENCE_AUTH"].strip().lower()
    values.update({key: value for key, value in overrides.items() if value is not None})
    for field in ("grpc_workers", "http_workers"):
        values[field] = worker_count.settled(values[field])
    location = values.pop("model_repository", None)
    if location is not None:
        values.update(repository_location(str(location)))
    return ServingSettings(**values)  # type: ignore[arg-type]


def repository_location(text: str) -> dict[str, object]:
    """``--model-repository``: a folder, or an ``s3://`` URL in tritonserver's forms."""
    if text.startswith("s3://"):
        from serving.sources.s3 import parse_s3_url

        try:
            parse_s3_url(text)
        except ValueError as exc:
            raise ValueError(f"--model-repository: {exc}") from None
        return {"model_repository_url": text}
    scheme = text.partition("://")[0]
    if "://" in text and scheme.isalpha():
        raise ValueError(f"--model-repository: '{scheme}://' is not supported (a folder or s3://)")
    return {"model_repository": Path(text)}
