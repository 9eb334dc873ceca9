"""How a ``gpu`` test says a GPU requirement is missing: a skip, except in the device check.

``make gpu-check`` (``bench.gpu``) runs the ``gpu`` tests with ``PORTICO_GPU_CHECK=1`` on a machine
that has a GPU, where a missing runtime is a broken install, not a reason to skip.
"""

from __future__ import annotations

import os

import pytest


def require_gpu(missing: str | None) -> None:
    """Skip with ``missing`` as the reason (fail under the device check); None: all is there."""
    if missing is None:
        return
    if os.environ.get("PORTICO_GPU_CHECK") == "1":
        pytest.fail(f"the GPU check needs this: {missing}")
    pytest.skip(missing)


def ort_provider_missing(provider: str) -> str | None:
    import onnxruntime as ort

    if provider in ort.get_available_providers():
        return None
    return f"needs onnxruntime-gpu and an NVIDIA GPU ({provider} not available)"


def torch_cuda_missing() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    return "needs torch with CUDA and an NVIDIA GPU (torch.cuda.is_available() is False)"


def nvml_gpu_missing() -> str | None:
    from serving.core.devices import detected_gpus

    return None if detected_gpus() else "needs nvidia-ml-py and an NVIDIA GPU (NVML lists none)"
