"""One measured run: the client's latencies plus the server's own account of the same requests
(queue vs compute input/infer/output and batch sizes, from the statistics extension) and the CPU
the serving process used. No Django."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import urllib.request
from typing import Any

import numpy as np
import psutil

from repository.tuning.launcher import PrivateServer
from repository.tuning.loadgen import Samples, Shape, Target, drive

WARMUP_S = 0.3
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """A run's numbers; latencies in ms, ``throughput_per_s`` counts successful requests.

    ``batch_sizes`` maps the batch size the server executed to how many times it did;
    ``cpu_percent`` is the serving process tree's CPU time over wall time (100 = one core).
    """

    mode: str
    rate_per_s: float
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    error_rate: float
    first_error: str
    throughput_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    queue_ms: float
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float
    batch_sizes: dict[str, int]
    cpu_percent: float
    cpu_cores: int
    gpu_percent: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def percentile_ms(self, percentile: int) -> float:
        return self.p99_ms if percentile == 99 else self.p95_ms


def measure(
    server: PrivateServer,
    target: Target,
    shape: Shape,
    *,
    model: str,
    version: int,
    stop: threading.Event,
) -> RunResult:
    """Warm up briefly, then run ``shape`` and diff the server's statistics around it."""
    drive(
        target,
        Shape(mode="concurrency", duration_s=WARMUP_S, concurrency=shape.concurrency),
        stop=stop,
    )
    stats_url = f"{server.url}/v2/models/{model}/versions/{version}/stats"
    process = psutil.Process(server.pid)
    before, cpu_before, wall_before = _stats(stats_url), _cpu_s(process), time.perf_counter()
    samples = drive(target, shape, stop=stop)
    cpu_s, wall_s = _cpu_s(process) - cpu_before, time.perf_counter() - wall_before
    return _result(shape, samples, _diff(_stats(stats_url), before), 100.0 * cpu_s / wall_s)


def _result(shape: Shape, samples: Samples, server: dict[str, Any], cpu: float) -> RunResult:
    latencies_ms = np.asarray(samples.latencies_s, dtype=np.float64) * 1000.0
    p50, p95, p99 = (
        (float(v) for v in np.percentile(latencies_ms, [50, 95, 99]))
        if latencies_ms.size
        else (0.0, 0.0, 0.0)
    )
    total = latencies_ms.size + samples.errors
    return RunResult(
        mode=shape.mode,
        rate_per_s=shape.rate_per_s,
        concurrency=shape.concurrency,
        duration_s=round(samples.elapsed_s, 3),
        requests=total,
        errors=samples.errors,
        error_rate=samples.errors / total if total else 0.0,
        first_error=samples.first_error,
        throughput_per_s=latencies_ms.size / samples.elapsed_s if samples.elapsed_s else 0.0,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        batch_sizes=server["batch_sizes"],
        cpu_percent=round(cpu, 1),
        cpu_cores=os.cpu_count() or 1,
        **{f"{phase}_ms": server[phase] for phase in PHASES},
    )


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, Any] = json.load(response)
    return dict(body["model_stats"][0])


def _diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Per-request mean of each phase (ms) and the executed batch sizes, between two snapshots."""
    a, b = after["inference_stats"], before["inference_stats"]
    out: dict[str, Any] = {}
    for phase in PHASES:
        count = a[phase]["count"] - b[phase]["count"]
        out[phase] = (a[phase]["ns"] - b[phase]["ns"]) / count / 1e6 if count else 0.0
    earlier = {s["batch_size"]: s["compute_infer"]["count"] for s in before["batch_stats"]}
    sizes = {
        str(s["batch_size"]): s["compute_infer"]["count"] - earlier.get(s["batch_size"], 0)
        for s in after["batch_stats"]
    }
    out["batch_sizes"] = {size: n for size, n in sizes.items() if n > 0}
    return out


def _cpu_s(process: psutil.Process) -> float:
    """CPU seconds of the serving process and its children (Python-backend model processes)."""
    total = 0.0
    for proc in (process, *process.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total
