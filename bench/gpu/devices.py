"""What GPU this machine has, asked of NVML (``nvidia-ml-py``) or, before the venv exists, of
``nvidia-smi``; standard library only, so the check can run before anything is installed."""

from __future__ import annotations

import shutil
import subprocess


def gpu_names() -> list[str]:
    """The GPUs ``nvidia-smi`` lists; empty where there is no driver or no GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [line.strip() for line in out.stdout.splitlines() if line.strip()]
        if not out.returncode
        else []
    )


def device_line() -> str:
    names = gpu_names()
    return ", ".join(names) if names else "none found"


def missing_gpu_reason() -> str | None:
    """Why this machine cannot run the GPU check; None when it can."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA driver here (nvidia-smi is not on PATH)"
    if not gpu_names():
        return "nvidia-smi lists no GPU"
    return None
