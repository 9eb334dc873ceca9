"""Start a Portico serving process (or the transport floor) for a benchmark, and stop it after
(with the launcher that load tests use)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from repository.tuning.launcher import free_port, running

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def serving(model_repository: Path, *, startup_timeout_s: float = 120) -> Iterator[dict[str, str]]:
    """Run `manage.py serve --model-repository` and yield its HTTP and gRPC addresses."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = [
        sys.executable, str(ROOT / "manage.py"), "serve",
        "--model-repository", str(model_repository),
        "--http-port", str(http_port),
        "--grpc-port", str(grpc_port),
        "--metrics-port", str(metrics_port),
    ]
    with running(command, http_port, startup_timeout_s):
        yield {
            "http": f"127.0.0.1:{http_port}",
            "grpc": f"127.0.0.1:{grpc_port}",
            "metrics": f"127.0.0.1:{metrics_port}",
        }


@contextlib.contextmanager
def transport_floor(*, startup_timeout_s: float = 60) -> Iterator[dict[str, str]]:
    """Run `bench.transport_floor` (an echo model on the same stacks) and yield its addresses."""
    http_port, grpc_port = free_port(), free_port()
    command = [
        sys.executable, "-m", "bench.transport_floor",
        "--http-port", str(http_port), "--grpc-port", str(grpc_port),
    ]  # fmt: skip
    with running(command, http_port, startup_timeout_s):
        yield {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}"}
