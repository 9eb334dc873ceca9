"""One measured run: the load generator's latencies plus the server's own account of the same
requests (queue vs compute input/infer/output and batch sizes, from the statistics extension) and
the CPU the serving process used, and the GPUs' use where it has any. No Django.

The generator is the built-in client, or perf_analyzer when one is given; perf_analyzer reports
the queue and compute phases itself, and those are the ones kept (they cover exactly its
windows), while batch sizes and CPU always come from the server side."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.request
from typing import Any

import psutil

from repository.config.cpu_quota import usable_cpu_count
from repository.tuning.gpu_use import GpuSampler
from repository.tuning.launcher import PrivateServer
from repository.tuning.loadgen import ClientAccount, Shape, Target, account_of, drive
from repository.tuning.loadgen_perf_analyzer import PerfAnalyzer

WARMUP_S = 0.3
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """A run's numbers; latencies in ms, ``throughput_per_s`` counts successful requests.

    ``batch_sizes`` maps the batch size the server executed to how many times it did;
    ``cpu_percent`` is the serving process tree's CPU time over wall time (100 = one core);
    ``gpu_percent`` is the mean utilisation of the server's GPUs over the run (None: no GPU);
    ``generator`` names what sent the load (``built-in`` or ``perf_analyzer``).
    """

    mode: str
    generator: str
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
    perf_analyzer: PerfAnalyzer | None = None,
) -> RunResult:
    """Warm up briefly, then run ``shape`` (with ``perf_analyzer`` when given, else the built-in
    client) and diff the server's statistics around it."""
    drive(
        target,
        Shape(mode="concurrency", duration_s=WARMUP_S, concurrency=shape.concurrency),
        stop=stop,
    )
    stats_url = f"{server.url}/v2/models/{model}/versions/{version}/stats"
    process = psutil.Process(server.pid)
    before, cpu_before, wall_before = _stats(stats_url), _cpu_s(process), time.perf_counter()
    with GpuSampler(server.url) as gpus:
        if perf_analyzer is None:
            client = account_of(drive(target, shape, stop=stop))
        else:
            client = perf_analyzer.drive(
                url=target.url, model=model, version=version, shape=shape, stop=stop
            )
    cpu_s, wall_s = _cpu_s(process) - cpu_before, time.perf_counter() - wall_before
    server_side = _diff(_stats(stats_url), before)
    return _result(shape, client, server_side, 100.0 * cpu_s / wall_s, gpus.percent)


def _result(
    shape: Shape,
    client: ClientAccount,
    server: dict[str, Any],
    cpu: float,
    gpu_percent: float | None,
) -> RunResult:
    phases = client.phases_ms if client.phases_ms is not None else server
    return RunResult(
        mode=shape.mode,
        generator=client.generator,
        rate_per_s=shape.rate_per_s,
        concurrency=shape.concurrency,
        duration_s=round(client.elapsed_s, 3),
        requests=client.requests,
        errors=client.errors,
        error_rate=client.errors / client.requests if client.requests else 0.0,
        first_error=client.first_error,
        throughput_per_s=client.throughput_per_s,
        p50_ms=client.p50_ms,
        p95_ms=client.p95_ms,
        p99_ms=client.p99_ms,
        batch_sizes=server["batch_sizes"],
        cpu_percent=round(cpu, 1),
        cpu_cores=usable_cpu_count(),
        gpu_percent=gpu_percent,
        **{f"{phase}_ms": phases[phase] for phase in PHASES},
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
