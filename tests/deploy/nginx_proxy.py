"""The compose proxy's own ``deploy/nginx.conf``, run by a real nginx on one host.

``local_config`` rewrites only what cannot be the same outside compose, and each rewrite must
match the shipped text exactly as often as expected, so a change to the shipped file fails here
instead of being silently left untested:

- upstream servers: compose DNS names (``serving:8000``, ``serving:8001``, ``console:8080``) become
  the 127.0.0.1 ports of processes the test started;
- listeners: 80, 443, 8000 and 8001 become free ports on 127.0.0.1;
- the certificate pair: ``/etc/nginx/tls/`` becomes the folder ``first_start_cert.py`` wrote;
- nginx older than 1.27.3: ``resolve`` on upstream servers is dropped (it does not know it; without
  it the addresses are fixed at start, which is all loopback needs);
- nginx older than 1.25.1: ``http2 on;`` becomes the ``http2`` parameter of the same ``listen``
  (the older spelling of the same switch);
- added, never replaced: the access log and the five temporary-file folders inside the run's folder
  (Debian's defaults are under /var/lib/nginx); the pid file and error log come from ``-g``/``-e``.

Every TLS, header, body-size, timeout and routing directive stays as written.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "deploy" / "nginx.conf"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
RESOLVE_SINCE = (1, 27, 3)
HTTP2_DIRECTIVE_SINCE = (1, 25, 1)
TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_binary() -> str | None:
    """The nginx executable: the one `make install` unpacks into the venv, else an installed one
    (Debian installs it in /usr/sbin, often not on a user's PATH)."""
    unpacked = Path(sys.prefix) / "nginx" / "usr" / "sbin" / "nginx"
    if unpacked.is_file():
        return str(unpacked)
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def nginx_version(binary: str) -> tuple[int, ...]:
    banner = subprocess.run([binary, "-v"], capture_output=True, text=True, check=True).stderr
    match = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", banner)
    assert match, banner
    return tuple(int(part) for part in match.groups())


@dataclass(frozen=True)
class ProxyPorts:
    """Where the proxy listens (the shipped 80, 443, 8000 and 8001) and what it forwards to."""

    redirect: int
    console: int
    inference_http: int
    inference_grpc: int
    upstream_console: int
    upstream_http: int
    upstream_grpc: int


def local_config(
    shipped: str, ports: ProxyPorts, tls_dir: Path, run_dir: Path, version: tuple[int, ...]
) -> str:
    """The shipped configuration with only the rewrites this module's docstring lists."""
    config = shipped
    for name, port in (("serving:8000", ports.upstream_http),
                       ("serving:8001", ports.upstream_grpc),
                       ("console:8080", ports.upstream_console)):  # fmt: skip
        config = _replace(config, f"server {name} ", f"server 127.0.0.1:{port} ", 1)
    listen = "listen 127.0.0.1:"
    config = _replace(config, "listen 80;", f"{listen}{ports.redirect};", 1)
    config = _replace(config, "listen 443 ssl;", f"{listen}{ports.console} ssl;", 1)
    config = _replace(config, "listen 8000 ssl;", f"{listen}{ports.inference_http} ssl;", 1)
    grpc_listen = f"{listen}{ports.inference_grpc} ssl"
    if version < HTTP2_DIRECTIVE_SINCE:
        config = _replace(config, "listen 8001 ssl;\n        http2 on;", f"{grpc_listen} http2;", 1)
    else:
        config = _replace(config, "listen 8001 ssl;", f"{grpc_listen};", 1)
    if version < RESOLVE_SINCE:
        config = _replace(config, " resolve max_fails=", " max_fails=", 2)
        config = _replace(config, " resolve;", ";", 1)
    for file in ("tls.crt", "tls.key"):
        config = _replace(config, f"/etc/nginx/tls/{file};", f"{tls_dir / file};", 1)
    run_paths = "".join(f"\n    {name}_temp_path {run_dir / name};" for name in TEMP_FOLDERS)
    access_log = f"\n    access_log {run_dir / 'access.log'};"
    return _replace(config, "\nhttp {\n", f"\nhttp {{{access_log}{run_paths}\n", 1)


def _replace(text: str, old: str, new: str, count: int) -> str:
    found = text.count(old)
    assert found == count, f"deploy/nginx.conf: expected {old!r} {count} time(s), found {found}"
    return text.replace(old, new)


class NginxProcess:
    """``nginx -p RUN_DIR -c nginx.conf -g 'daemon off; ...'`` in the foreground."""

    def __init__(self, binary: str, config: str, run_dir: Path, ports: list[int]) -> None:
        self.binary, self.run_dir, self.ports = binary, run_dir, ports
        self.config_path = run_dir / "nginx.conf"
        self.config_path.write_text(config)
        self.error_log = run_dir / "error.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self, *extra: str) -> list[str]:
        directives = f"daemon off; pid {self.run_dir / 'nginx.pid'};"
        return [self.binary, "-p", str(self.run_dir), "-e", str(self.error_log),
                "-c", str(self.config_path), "-g", directives, *extra]  # fmt: skip

    def check(self) -> subprocess.CompletedProcess[str]:
        """``nginx -t``: the configuration as this nginx reads it."""
        return subprocess.run(self.command("-t"), capture_output=True, text=True, check=False)

    def start(self) -> None:
        with (self.run_dir / "stdout.log").open("wb") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(_listening(port) for port in self.ports):
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx not listening after {START_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGQUIT)  # graceful: workers finish what they serve
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def log(self) -> str:
        parts = [self.run_dir / "stdout.log", self.error_log]
        return "\n".join(p.read_text(errors="replace") for p in parts if p.exists())


@contextlib.contextmanager
def running_nginx(
    binary: str, config: str, run_dir: Path, ports: list[int]
) -> Iterator[NginxProcess]:
    nginx = NginxProcess(binary, config, run_dir, ports)
    nginx.start()
    try:
        yield nginx
    finally:
        nginx.stop()


@contextlib.contextmanager
def run_folder() -> Iterator[Path]:
    """A fresh folder nginx's workers can enter whatever user they run as (``nobody`` when the
    master is root), outside pytest's owner-only temporary tree."""
    with tempfile.TemporaryDirectory(prefix="portico-nginx-") as name:
        folder = Path(name)
        folder.chmod(0o711)
        yield folder


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0
