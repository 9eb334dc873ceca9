"""How many GPUs this process may use, without importing a GPU runtime."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from serving.settings import ServingSettings


def gpu_count(settings: ServingSettings) -> int:
    """``settings.gpu_count`` when set, else the NVIDIA devices visible to this process."""
    if settings.gpu_count >= 0:
        return settings.gpu_count
    return _detected_gpu_count()


@functools.cache
def _detected_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([part for part in visible.split(",") if part.strip() and part.strip() != "-1"])
    dev = Path("/dev")
    try:
        return sum(1 for entry in dev.iterdir() if re.fullmatch(r"nvidia\d+", entry.name))
    except OSError:
        return 0
