"""Start a Portico serving process (or the transport floor) for a benchmark, and stop it after."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports. NOTE: the sockets stay bound until all are chosen: ports
    picked one after another may repeat, and grpc (which sets SO_REUSEPORT) would then share a
    port with the HTTP listener instead of failing."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


@contextlib.contextmanager
def serving(
    model_repository: Path,
    *,
    startup_timeout_s: float = 120,
    extra_args: tuple[str, ...] = (),
    root: Path = ROOT,
    wrapper: tuple[str, ...] = (),
    output: IO[bytes] | None = None,
) -> Iterator[dict[str, str]]:
    """Run `manage.py serve --model-repository` (of the tree at ``root``, under ``wrapper``, e.g.
    valgrind, when given) and yield its HTTP, gRPC and metrics addresses and its process id
    ("pid"). Its output goes to ``output`` when given, else nowhere."""
    http_port, grpc_port, metrics_port = free_ports(3)
    command = [
        *wrapper, sys.executable, str(root / "manage.py"), "serve",
        "--model-repository", str(model_repository),
        "--http-port", str(http_port),
        "--grpc-port", str(grpc_port),
        "--metrics-port", str(metrics_port),
        *extra_args,
    ]  # fmt: skip
    with _running(command, http_port, startup_timeout_s, cwd=root, output=output) as pid:
        yield {
            "http": f"127.0.0.1:{http_port}",
            "grpc": f"127.0.0.1:{grpc_port}",
            "metrics": f"127.0.0.1:{metrics_port}",
            "pid": str(pid),
        }


@contextlib.contextmanager
def transport_floor(
    *, startup_timeout_s: float = 60, wrapper: tuple[str, ...] = ()
) -> Iterator[dict[str, str]]:
    """Run `bench.transport_floor` (an echo model on the same stacks) and yield its addresses."""
    http_port, grpc_port = free_ports(2)
    command = [
        *wrapper, sys.executable, "-m", "bench.transport_floor",
        "--http-port", str(http_port), "--grpc-port", str(grpc_port),
    ]  # fmt: skip
    with _running(command, http_port, startup_timeout_s) as pid:
        yield {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}", "pid": str(pid)}


@contextlib.contextmanager
def _running(
    command: list[str],
    http_port: int,
    startup_timeout_s: float,
    cwd: Path = ROOT,
    output: IO[bytes] | None = None,
) -> Iterator[int]:
    # Each row measures the layout it names: in-process unless its flags ask for front-ends
    # (flags win over the variable). serve's default, --workers auto, would start some on a
    # many-core host and none on 2 cores, so rows would mean different things on each.
    env = {"SERVING_WORKERS": "0", **os.environ, "PYTHONUNBUFFERED": "1"}
    sink: IO[bytes] | int = subprocess.DEVNULL if output is None else output
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=sink)
    try:
        _wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", process, startup_timeout_s)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serving exited with {process.returncode} before it was ready")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:
            if response.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError("serving was not ready in time")
