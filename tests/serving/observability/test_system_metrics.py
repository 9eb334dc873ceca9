"""System gauges with Triton's names: CPU and memory always, GPU series only where NVML answers."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from serving.observability import system_metrics

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
