"""A real ``manage.py serve`` subprocess on free ports, as a Triton user would run the server.

Given a ``Pki``, every listener speaks TLS with its server certificate: HTTPS on the HTTP and
metrics ports, and gRPC with Triton's ``--grpc-use-ssl`` flags (``--grpc-use-ssl-mutual`` too when
asked, so gRPC clients must present a certificate the CA signed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.certificates import Pki
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
# Logged once every port listens. HTTP answers ``live`` while gRPC and metrics are still binding
# (the server is not ready until they are), and a broken model keeps a strict server not ready
# for good, so neither an open port nor ``ready`` says the start-up is over; this line does.
SERVING_LINE = "serving: HTTP "


class ServerProcess:
    """A running server: ``http``/``grpc``/``metrics`` addresses as ``host:port``, and its log.

    ``pki`` is None for clear text; otherwise the certificates its listeners serve.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        log_path: Path,
        ports: dict[str, int],
        pki: Pki | None = None,
        grpc_mutual: bool = False,
    ):
        self.process = process
        self.log_path = log_path
        self.http = f"127.0.0.1:{ports['http']}"
        self.grpc = f"127.0.0.1:{ports['grpc']}"
        self.metrics = f"127.0.0.1:{ports['metrics']}"
        self.pki = pki
        self.grpc_mutual = grpc_mutual

    @property
    def scheme(self) -> str:
        return "https" if self.pki else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """What an HTTPS client needs to trust this server: its CA (None in clear text)."""
        return ssl.create_default_context(cafile=str(self.pki.ca)) if self.pki else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_server(
    repo: Path, *extra_args: str, pki: Pki | None = None, grpc_mutual: bool = False
) -> Iterator[ServerProcess]:
    """Start ``manage.py serve --model-repository repo``; yield once its HTTP port answers.

    ``--exit-on-error=false`` so one broken model fails only its own tests; the port opens after
    the start-up loads are done (Triton's order), so waiting for ``live`` is enough.
    """
    ports = dict(zip(("http", "grpc", "metrics"), free_ports(3), strict=True))
    command = [
        sys.executable, str(ROOT / "manage.py"), "serve",
        "--model-repository", str(repo),
        "--host", "127.0.0.1",
        "--http-port", str(ports["http"]),
        "--grpc-port", str(ports["grpc"]),
        "--metrics-port", str(ports["metrics"]),
        "--exit-on-error=false",
        "--exit-timeout-secs", "5",
        *(_tls_args(pki, grpc_mutual=grpc_mutual) if pki else ()),
        *extra_args,
    ]  # fmt: skip
    log_fd, log_name = tempfile.mkstemp(prefix="acceptance-serve-", suffix=".log")
    log_path = Path(log_name)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with os.fdopen(log_fd, "wb") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    server = ServerProcess(process, log_path, ports, pki, grpc_mutual)
    try:
        _wait_live(server)
        yield server
    finally:
        _stop(process)
        log_path.unlink(missing_ok=True)


def _tls_args(pki: Pki, *, grpc_mutual: bool) -> list[str]:
    cert, key = str(pki.server_cert), str(pki.server_key)
    return [
        "--http-ssl-cert", cert, "--http-ssl-key", key,
        "--metrics-ssl-cert", cert, "--metrics-ssl-key", key,
        "--grpc-use-ssl=true", "--grpc-server-cert", cert, "--grpc-server-key", key,
        "--grpc-root-cert", str(pki.ca),
        *(["--grpc-use-ssl-mutual=true"] if grpc_mutual else []),
    ]  # fmt: skip


def _wait_live(server: ServerProcess) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    url = f"{server.scheme}://{server.http}/v2/health/live"
    context = server.ssl_context()
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"serve exited with {server.process.returncode} before it was live:\n{server.log()}"
            )
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=1, context=context) as response,
        ):
            if response.status == 200 and SERVING_LINE in server.log():
                return
        time.sleep(0.2)
    raise RuntimeError(f"serve was not live after {STARTUP_TIMEOUT_S} s:\n{server.log()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # The whole session: Python backend stubs live in the server's process group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)
