"""The GPU install can never mix runtimes: onnxruntime and onnxruntime-gpu are one module.

requirements-gpu.lock is generated from requirements.lock (``make`` and ``bench.gpu`` write it when
they need it), so a new CPU pin never leaves a stale GPU lock behind.
"""

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


def _gpu_text() -> str:
    return lock.gpu_lock(lock.CPU_LOCK.read_text(), lock.GPU_PINS.read_text())


def _names(text: str) -> dict[str, str]:
    return {lock._name(p): p.split("==", 1)[1] for p in lock.pins(text)}


def test_the_gpu_lock_has_no_cpu_onnxruntime_and_the_cpu_lock_no_gpu_runtime() -> None:
    gpu_text = _gpu_text()
    cpu_text = (ROOT / "requirements.lock").read_text()
    assert not re.search(r"^onnxruntime==", gpu_text, re.MULTILINE | re.IGNORECASE)
    assert re.search(r"^onnxruntime-gpu==", gpu_text, re.MULTILINE)
    assert not re.search(r"^onnxruntime-gpu", cpu_text, re.MULTILINE | re.IGNORECASE)
    assert not re.search(r"^(tensorrt|nvidia-cudnn)", cpu_text, re.MULTILINE | re.IGNORECASE)


def test_the_gpu_lock_keeps_every_other_cpu_pin_and_adds_the_gpu_runtime() -> None:
    cpu, gpu = _names((ROOT / "requirements.lock").read_text()), _names(_gpu_text())
    assert {k: v for k, v in cpu.items() if k != "onnxruntime"}.items() <= gpu.items()
    assert gpu["torch"] == "2.13.0"
    for name in ("tensorrt", "nvidia-ml-py", "nvidia-cudnn-cu13", "nvidia-cuda-runtime"):
        assert name in gpu, name


def test_the_generator_writes_the_lock_and_check_tells_a_stale_one(tmp_path: Path) -> None:
    target = tmp_path / "requirements-gpu.lock"
    script = str(ROOT / "deploy" / "gpu" / "lock.py")
    stale = subprocess.run([sys.executable, script, "--check", "--output", str(target)],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert stale.returncode == 1 and "is stale" in stale.stderr
    subprocess.run([sys.executable, script, "--output", str(target)], check=True)
    assert target.read_text() == _gpu_text()
    check = [sys.executable, script, "--check", "--output", str(target)]
    assert subprocess.run(check, check=False).returncode == 0


def test_a_package_pinned_on_both_sides_is_refused() -> None:
    with pytest.raises(ValueError, match="pinned in both locks: numpy"):
        lock.gpu_lock("numpy==2.0\nonnxruntime==1.0\n", "onnxruntime-gpu==1.0\nnumpy==2.1\n")
    text = lock.gpu_lock("numpy==2.0\nonnxruntime==1.0\n", "onnxruntime-gpu==1.0\n")
    assert lock.pins(text) == ["numpy==2.0", "onnxruntime-gpu==1.0"]
