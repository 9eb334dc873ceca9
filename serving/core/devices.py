"""The GPUs this process may really use, read through NVML, without importing a GPU runtime.

A ``/dev/nvidia*`` file proves neither a working driver nor a runtime that can reach it, so the
count comes from NVML (``nvidia-ml-py``): none installed or no driver means no GPU. NVML ignores
``CUDA_VISIBLE_DEVICES``; the CUDA runtimes do not, so the visible list narrows NVML's count.
Whether a backend's runtime was built with CUDA is the backend's own question
(``ModelInstance.gpu_unusable_reason``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from serving.settings import ServingSettings


@dataclasses.dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU as NVML reports it; ``index`` is the CUDA device ordinal a runtime is given."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int


def gpu_count(settings: ServingSettings) -> int:
    """``settings.gpu_count`` when set, else the GPUs NVML reports that this process may see."""
    if settings.gpu_count >= 0:
        return settings.gpu_count
    return len(detected_gpus())


@functools.cache
def detected_gpus() -> tuple[GpuDevice, ...]:
    """The GPUs NVML lists, narrowed by ``CUDA_VISIBLE_DEVICES``; empty without NVML or driver."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError and friends: no driver means no GPU
        return ()
    try:
        devices = [_device(pynvml, i) for i in range(int(pynvml.nvmlDeviceGetCount()))]
    finally:
        pynvml.nvmlShutdown()
    return visible_devices(tuple(devices), os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_devices(devices: tuple[GpuDevice, ...], visible: str | None) -> tuple[GpuDevice, ...]:
    """The devices a CUDA runtime sees under ``CUDA_VISIBLE_DEVICES=visible``, renumbered from 0.

    Entries are indices or UUIDs (``GPU-...``), as CUDA reads them; CUDA stops at the first entry
    it cannot match, and so does this.
    """
    if visible is None:
        return devices
    chosen: list[GpuDevice] = []
    for entry in (part.strip() for part in visible.split(",")):
        match = next((d for d in devices if entry in (str(d.index), d.uuid)), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return tuple(dataclasses.replace(d, index=i) for i, d in enumerate(chosen))


def _device(nvml: Any, index: int) -> GpuDevice:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return GpuDevice(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
