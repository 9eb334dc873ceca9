"""A folder-mode ``manage.py serve`` subprocess for the fuzzing and abuse tests, and its memory.

The repository holds one model of each kind a hostile client can reach: ONNX identity (FP32 and
BYTES), a small MLP, Python models (a BYTES identity and FP32 add/sub) and a sequence model.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from repository import demo_models as dm
from tests.acceptance.example_repository import write_simple_sequence
from tests.acceptance.server import ServerProcess, run_server

MIN_PROBES_WAIT_S = 60.0
MODELS = ("identity", "identity_bytes", "mlp", "py_identity", "add_sub", "simple_sequence")


def write_hostile_repository(repo: Path) -> None:
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_bytes", dtype="BYTES", dims=(-1,), max_batch_size=8)
    dm.write_onnx_mlp(repo, "mlp", sizes=(16, 32, 4), max_batch_size=8)
    dm.write_python_identity(repo, "py_identity")
    dm.write_python_add_sub(repo, "add_sub")
    write_simple_sequence(repo)


@contextmanager
def hostile_server(repo: Path, *extra_args: str) -> Iterator[ServerProcess]:
    write_hostile_repository(repo)
    with run_server(repo, *extra_args) as server:
        yield server


def rss_bytes(server: ServerProcess) -> int:
    """Resident memory of the serving process itself (Python model stubs are separate processes
    with their own limits)."""
    return int(psutil.Process(server.process.pid).memory_info().rss)


class Watch:
    """While open: probes ``/v2/health/live`` on a fresh connection every ``interval_s`` and samples
    the server's resident memory, as a load balancer and the kernel would see it. On closing it
    goes on until it has ``min_probes`` answers: a short abuse on a slow machine leaves few."""

    def __init__(
        self, server: ServerProcess, interval_s: float = 0.05, *, min_probes: int = 0
    ) -> None:
        self.server, self.interval_s, self.min_probes = server, interval_s, min_probes
        self.latencies_s: list[float] = []
        self.failures: list[str] = []
        self.peak_rss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + MIN_PROBES_WAIT_S
        while (
            len(self.latencies_s) + len(self.failures) < self.min_probes
            and time.monotonic() < deadline
            and self._thread.is_alive()
        ):
            self._stop.wait(self.interval_s)
        self._stop.set()
        self._thread.join(timeout=30)

    def percentile_s(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def _run(self) -> None:
        host, port = self.server.http.split(":")
        while not self._stop.wait(self.interval_s):
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss_bytes(self.server))
            started = time.monotonic()
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            try:
                connection.request("GET", "/v2/health/live")
                status = connection.getresponse().status
            except OSError as error:
                self.failures.append(repr(error))
                continue
            finally:
                connection.close()
            if status != 200:
                self.failures.append(f"status {status}")
            self.latencies_s.append(time.monotonic() - started)

    def summary(self) -> str:
        return (
            f"{len(self.latencies_s)} probes, p50 {self.percentile_s(0.5) * 1000:.1f} ms, "
            f"p95 {self.percentile_s(0.95) * 1000:.1f} ms, max {max(self.latencies_s) * 1000:.1f}"
            f" ms, {len(self.failures)} failed, peak RSS {self.peak_rss_bytes / 2**20:.0f} MiB"
        )
