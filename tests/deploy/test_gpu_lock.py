"""The GPU install can never mix runtimes: onnxruntime and onnxruntime-gpu are one module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy" / "gpu"))

import lock  # noqa: E402

pytestmark = pytest.mark.embedded


def _names(path: Path) -> dict[str, str]:
    pins = lock.pins(path.read_text())
    return {lock._name(p): p.split("==", 1)[1] for p in pins}


def test_the_gpu_lock_has_no_cpu_onnxruntime_and_the_cpu_lock_no_gpu_runtime() -> None:
    gpu_text = (ROOT / "requirements-gpu.lock").read_text()
    cpu_text = (ROOT / "requirements.lock").read_text()
    assert not re.search(r"^onnxruntime==", gpu_text, re.MULTILINE | re.IGNORECASE)
    assert re.search(r"^onnxruntime-gpu==", gpu_text, re.MULTILINE)
    assert not re.search(r"^onnxruntime-gpu", cpu_text, re.MULTILINE | re.IGNORECASE)
    assert not re.search(r"^(tensorrt|nvidia-cudnn)", cpu_text, re.MULTILINE | re.IGNORECASE)


def test_the_gpu_lock_keeps_every_other_cpu_pin_and_adds_the_gpu_runtime() -> None:
    cpu, gpu = _names(ROOT / "requirements.lock"), _names(ROOT / "requirements-gpu.lock")
    assert {k: v for k, v in cpu.items() if k != "onnxruntime"}.items() <= gpu.items()
    assert gpu["torch"] == "2.13.0"
    for name in ("tensorrt", "nvidia-ml-py", "nvidia-cudnn-cu13", "nvidia-cuda-runtime"):
        assert name in gpu, name


def test_the_committed_gpu_lock_is_what_the_generator_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "gpu" / "lock.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_a_package_pinned_on_both_sides_is_refused() -> None:
    with pytest.raises(ValueError, match="pinned in both locks: numpy"):
        lock.gpu_lock("numpy==2.0\nonnxruntime==1.0\n", "onnxruntime-gpu==1.0\nnumpy==2.1\n")
    text = lock.gpu_lock("numpy==2.0\nonnxruntime==1.0\n", "onnxruntime-gpu==1.0\n")
    assert lock.pins(text) == ["numpy==2.0", "onnxruntime-gpu==1.0"]
