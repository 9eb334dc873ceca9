"""Host and GPU gauges with Triton's metric names: CPU and memory always (psutil), per-GPU
utilisation, memory, power and energy through NVML where a GPU and ``pynvml`` are present.

``SystemMetricsCollector`` is a prometheus_client collector (registered next to the model metrics
on the metrics port); ``system_snapshot()`` gives the same numbers as a dict for the live stats.
NVML is imported lazily and at most once: a host without a GPU or without ``nvidia-ml-py`` simply
reports no GPU series.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

logger = logging.getLogger(__name__)

# The live stats are polled every second; NVML queries take about a millisecond per GPU.
SNAPSHOT_CACHE_S = 0.9


@dataclasses.dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant. Power in watts, energy in joules since the driver started."""

    index: int
    uuid: str
    name: str
    utilization: float
    memory_total_bytes: int
    memory_used_bytes: int
    power_usage_w: float
    power_limit_w: float
    energy_j: float


class _Nvml:
    """Lazy, failure-tolerant access to NVML: ``None`` handles when unavailable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._tried = False

    def _init(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    self._module = pynvml
                except Exception as exc:  # ImportError, or NVMLError without a driver
                    logger.debug("NVML unavailable, no GPU metrics: %s", exc)
            return self._module

    def readings(self) -> list[GpuReading]:
        nvml = self._init()
        if nvml is None:
            return []
        try:
            return [_read_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # a GPU falling off the bus must not break the metrics page
            logger.warning("NVML query failed: %s", exc)
            return []


def _optional(call: Any, *args: Any, default: float | None = 0.0) -> Any:
    try:
        return call(*args)
    except Exception:  # not every GPU supports power or energy queries
        return default


def _read_gpu(nvml: Any, index: int) -> GpuReading:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    name = nvml.nvmlDeviceGetName(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = _optional(nvml.nvmlDeviceGetUtilizationRates, handle, default=None)
    return GpuReading(
        index=index,
        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
        name=name.decode() if isinstance(name, bytes) else str(name),
        utilization=(utilization.gpu / 100.0) if utilization is not None else 0.0,
        memory_total_bytes=int(memory.total),
        memory_used_bytes=int(memory.used),
        power_usage_w=_optional(nvml.nvmlDeviceGetPowerUsage, handle) / 1000.0,
        power_limit_w=_optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle) / 1000.0,
        energy_j=_optional(nvml.nvmlDeviceGetTotalEnergyConsumption, handle) / 1000.0,
    )


NVML = _Nvml()


MIN_CPU_SAMPLE_S = 0.1
_ZERO_TIMES = type(psutil.cpu_times())(*[0.0] * len(psutil.cpu_times()))


class CpuMeter:
    """Host-wide CPU utilisation (0..1) since this meter's previous reading (non-blocking).
    Each reader keeps its own meter so a scrape and a live-stats poll don't shorten each other's
    interval."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times()
        self._lock = threading.Lock()

    def read(self) -> float:
        with self._lock:
            now = psutil.cpu_times()
            last, self._last = self._last, now
        if sum(now) - sum(last) < MIN_CPU_SAMPLE_S * (psutil.cpu_count() or 1):
            last = _ZERO_TIMES  # too short to mean anything (the first scrape): average since boot
        total = sum(now) - sum(last)
        idle = (now.idle - last.idle) + (getattr(now, "iowait", 0.0) - getattr(last, "iowait", 0.0))
        return min(max(1.0 - idle / total, 0.0), 1.0) if total > 0 else 0.0


def gpu_readings() -> list[GpuReading]:
    return NVML.readings()


class SystemMetricsCollector(Collector):
    """Yields ``nv_cpu_*`` and, per GPU (label ``gpu_uuid``), ``nv_gpu_*`` and
    ``nv_energy_consumption`` on every scrape."""

    def __init__(self) -> None:
        self._cpu = CpuMeter()

    def collect(self) -> Iterator[Metric]:
        memory = psutil.virtual_memory()
        yield _gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", self._cpu.read())
        yield _gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", memory.total)
        yield _gauge(
            "nv_cpu_memory_used_bytes",
            "CPU used memory (RAM), in bytes",
            memory.total - memory.available,
        )
        gpus = gpu_readings()
        if not gpus:
            return
        families = {
            "nv_gpu_utilization": ("GPU utilization rate [0.0 - 1.0)", "utilization"),
            "nv_gpu_memory_total_bytes": ("GPU total memory, in bytes", "memory_total_bytes"),
            "nv_gpu_memory_used_bytes": ("GPU used memory, in bytes", "memory_used_bytes"),
            "nv_gpu_power_usage": ("GPU power usage in watts", "power_usage_w"),
            "nv_gpu_power_limit": ("GPU power management limit in watts", "power_limit_w"),
        }
        for name, (doc, field) in families.items():
            family = GaugeMetricFamily(name, doc, labels=["gpu_uuid"])
            for gpu in gpus:
                family.add_metric([gpu.uuid], float(getattr(gpu, field)))
            yield family
        # NOTE: Triton's counter has no "_total" suffix and prometheus_client forces one on counter
        # families, so it is exposed untyped under Triton's exact name (rate() works the same).
        energy = Metric(
            "nv_energy_consumption",
            "GPU energy consumption in joules since the server started",
            "counter",
        )
        for gpu in gpus:
            energy.add_sample("nv_energy_consumption", {"gpu_uuid": gpu.uuid}, gpu.energy_j)
        yield energy


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


def register(registry: CollectorRegistry) -> SystemMetricsCollector:
    """Add the system gauges to ``registry`` (the metrics port's registry)."""
    collector = SystemMetricsCollector()
    registry.register(collector)
    return collector


_snapshot_cpu = CpuMeter()
_snapshot_lock = threading.Lock()
_snapshot_cache: tuple[float, dict[str, Any]] = (0.0, {})


def system_snapshot() -> dict[str, Any]:
    """CPU, memory and GPUs as a dict for the live stats; cached for ``SNAPSHOT_CACHE_S``."""
    global _snapshot_cache
    now = time.monotonic()
    with _snapshot_lock:
        taken, cached = _snapshot_cache
        if cached and now - taken < SNAPSHOT_CACHE_S:
            return cached
        memory = psutil.virtual_memory()
        snapshot = {
            "cpu_utilization": _snapshot_cpu.read(),
            "cpu_memory_total_bytes": memory.total,
            "cpu_memory_used_bytes": memory.total - memory.available,
            "gpus": [dataclasses.asdict(g) for g in gpu_readings()],
        }
        _snapshot_cache = (now, snapshot)
        return snapshot
