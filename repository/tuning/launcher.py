"""Start the real serving code (``python -m serving``) on a private loopback port, and stop it.

No Django here: load tests in the worker and the developer benchmarks (``bench/``) share it. The
child serves one Triton-layout folder, so it never sees the registry, the promoted version or its
traffic; it dies with its parent (a worker killed mid-test leaves no server behind).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent.parent
PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class PrivateServer:
    """A running child: its HTTP base URL and process id (for CPU accounting)."""

    url: str
    pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_server(model_repository: Path, *, startup_timeout_s: float) -> Iterator[PrivateServer]:
    """Serve ``model_repository`` on 127.0.0.1 (HTTP only) and yield it once it is ready."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "serving",
        "--model-repository",
        str(model_repository),
        "--host",
        "127.0.0.1",
        "--http-port",
        str(port),
        "--grpc-port",
        "-1",
        "--metrics-port",
        "-1",
        "--exit-timeout-secs",
        "2",
    ]
    with running(command, port, startup_timeout_s) as process:
        yield PrivateServer(url=f"http://127.0.0.1:{port}", pid=process.pid)


@contextlib.contextmanager
def running(
    command: list[str], http_port: int, startup_timeout_s: float
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends; ready once ``/v2/health/ready`` answers 200."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    # NOTE: stderr goes to a file, not a pipe: a pipe nobody reads would stall a chatty server.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=_die_with_parent(),
        )
        try:
            wait_ready(
                f"http://127.0.0.1:{http_port}/v2/health/ready", process, startup_timeout_s, log=log
            )
            yield process
        finally:
            _stop(process)


def wait_ready(
    url: str, process: subprocess.Popen[bytes], timeout_s: float, *, log: IO[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"serving exited with {process.returncode} before it was ready: {_tail(log)}"
            )
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:
            if response.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"serving was not ready within {timeout_s:g} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(log: IO[bytes] | None) -> str:
    if log is None:
        return ""
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def _die_with_parent() -> Callable[[], None]:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name, use_errno=True) if name else None

    def apply() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply
