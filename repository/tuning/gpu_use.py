"""The GPU use of a load test: the private server's own NVML readings (its live stats' ``system``
section, the same numbers as its ``nv_gpu_*`` metrics), sampled while the load runs. The server
reads them because it sees the GPUs it was given (in a pod: the pod's own), and it reports none
where there is no GPU or no NVML, in which case nothing is sampled and the use is unknown (None).
No Django.
"""

from __future__ import annotations

import json
import statistics
import threading
import urllib.request
from types import TracebackType
from typing import Any

# The server caches its readings for 0.9 s; sampling faster would read the same one twice.
SAMPLE_INTERVAL_S = 1.0
READ_TIMEOUT_S = 5.0


def gpu_readings(server_url: str) -> list[dict[str, Any]]:
    """The server's GPUs now; [] when it reports none or cannot be read."""
    try:
        with urllib.request.urlopen(
            f"{server_url}/v2/portico/live-stats", timeout=READ_TIMEOUT_S
        ) as response:
            body = json.load(response)
    except (OSError, ValueError):
        return []
    gpus = (body.get("system") or {}).get("gpus") or []
    return [g for g in gpus if isinstance(g, dict) and "utilization" in g]


def mean_gpu_percent(samples: list[list[dict[str, Any]]]) -> float | None:
    """Mean utilisation over every sample and GPU, in percent (100 = one GPU fully busy on
    average per GPU); None with no GPU reading."""
    values = [float(g["utilization"]) for sample in samples for g in sample]
    return round(100.0 * statistics.fmean(values), 1) if values else None


class GpuSampler:
    """Samples the server's GPU readings while the ``with`` block runs. With no GPU at the start
    it starts no thread at all, so a CPU-only run pays nothing."""

    def __init__(self, server_url: str, *, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._url, self._interval_s = server_url, interval_s
        self._samples: list[list[dict[str, Any]]] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        if gpu_readings(self._url):
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=READ_TIMEOUT_S + self._interval_s)
            # The last reading covers the run's end, which the thread may have slept through.
            self._samples.append(gpu_readings(self._url))

    @property
    def percent(self) -> float | None:
        return mean_gpu_percent(self._samples)

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            self._samples.append(gpu_readings(self._url))
