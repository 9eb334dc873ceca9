"""System gauges with Triton's names: CPU and memory always, GPU series only where NVML answers."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from serving.observability import system_metrics
from tests.gpu_requirement import nvml_gpu_missing, require_gpu

pytestmark = pytest.mark.embedded


def _scrape() -> dict[str, float]:
    registry = CollectorRegistry()
    system_metrics.register(registry)
    text = generate_latest(registry).decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


@pytest.mark.gpu
def test_every_gpu_nvml_lists_has_tritons_series_with_its_uuid() -> None:
    require_gpu(nvml_gpu_missing())
    from serving.core.devices import detected_gpus

    samples = _scrape()
    for device in detected_gpus():
        label = f'{{gpu_uuid="{device.uuid}"}}'
        assert samples[f"nv_gpu_memory_total_bytes{label}"] == device.memory_total_bytes
        assert 0 <= samples[f"nv_gpu_memory_used_bytes{label}"] <= device.memory_total_bytes
        assert 0.0 <= samples[f"nv_gpu_utilization{label}"] <= 1.0
        assert 0 < samples[f"nv_gpu_power_usage{label}"] <= samples[f"nv_gpu_power_limit{label}"]
        assert samples[f"nv_energy_consumption{label}"] > 0


def test_cpu_and_memory_gauges_use_triton_names() -> None:
    samples = _scrape()
    assert 0.0 <= samples["nv_cpu_utilization"] <= 1.0
    assert samples["nv_cpu_memory_total_bytes"] > 0
    assert 0 < samples["nv_cpu_memory_used_bytes"] <= samples["nv_cpu_memory_total_bytes"]


def test_gpu_series_match_what_nvml_reports() -> None:
    gpus = system_metrics.gpu_readings()
    samples = _scrape()
    gpu_series = [name for name in samples if name.startswith("nv_gpu_")]
    if not gpus:
        assert gpu_series == []  # no GPU or no NVML: skipped cleanly, no error
        return
    for gpu in gpus:
        label = f'{{gpu_uuid="{gpu.uuid}"}}'
        assert samples[f"nv_gpu_memory_total_bytes{label}"] == gpu.memory_total_bytes
        assert 0.0 <= samples[f"nv_gpu_utilization{label}"] <= 1.0
        assert f"nv_gpu_power_usage{label}" in samples
        assert f"nv_energy_consumption{label}" in samples


def test_cpu_meter_reads_a_fraction() -> None:
    meter = system_metrics.CpuMeter()
    sum(i * i for i in range(200_000))
    assert 0.0 <= meter.read() <= 1.0


class _StubNvml:
    """Stands in for pynvml's functions on a host without a GPU (units as NVML reports them)."""

    class NVMLError(Exception):
        pass

    @staticmethod
    def nvmlDeviceGetCount() -> int:  # noqa: N802 - NVML's names
        return 1

    @staticmethod
    def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
        return index

    @staticmethod
    def nvmlDeviceGetUUID(handle: int) -> bytes:  # noqa: N802
        return b"GPU-1234"

    @staticmethod
    def nvmlDeviceGetName(handle: int) -> str:  # noqa: N802
        return "Test GPU"

    @staticmethod
    def nvmlDeviceGetMemoryInfo(handle: int) -> object:  # noqa: N802
        return type("Memory", (), {"total": 80 * 2**30, "used": 2**30})()

    @staticmethod
    def nvmlDeviceGetUtilizationRates(handle: int) -> object:  # noqa: N802
        return type("Rates", (), {"gpu": 42})()

    @staticmethod
    def nvmlDeviceGetPowerUsage(handle: int) -> int:  # noqa: N802
        return 123_456  # milliwatts

    @staticmethod
    def nvmlDeviceGetEnforcedPowerLimit(handle: int) -> int:  # noqa: N802
        return 700_000

    @staticmethod
    def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:  # noqa: N802
        raise _StubNvml.NVMLError("not supported")  # older GPUs: reported as 0, not an error


def test_gpu_readings_convert_nvml_units_and_tolerate_unsupported_queries() -> None:
    reading = system_metrics._read_gpu(_StubNvml, 0)
    assert reading.uuid == "GPU-1234" and reading.name == "Test GPU"
    assert reading.utilization == pytest.approx(0.42)
    assert reading.power_usage_w == pytest.approx(123.456)
    assert reading.power_limit_w == pytest.approx(700.0)
    assert reading.energy_j == 0.0
    assert reading.memory_used_bytes == 2**30
