"""The one-shot GPU check: it stops at once where there is no GPU, and its models are sound."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import models
from bench.gpu.devices import missing_gpu_reason

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_gpu_the_check_installs_nothing_and_says_why(tmp_path: Path) -> None:
    reason = missing_gpu_reason()
    if reason is None:
        pytest.skip("this machine has a GPU: `make gpu-check` runs the whole check")
    venv = tmp_path / "venv"
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu", "--venv", str(venv)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"gpu-check: cannot run here: {reason}. It needs a machine with an NVIDIA GPU and its "
        "driver; nothing was installed, tested or measured."
    )
    assert not venv.exists()


def test_the_resnet50_sized_graph_is_valid_and_resnet50_sized() -> None:
    import onnx

    model = models.resnet50_graph()
    onnx.checker.check_model(model, full_check=True)
    assert 25_000_000 < models.parameter_count(model) < 26_000_000
    (output,) = onnx.shape_inference.infer_shapes(model).graph.output
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["N", 1000]


def test_the_benchmark_folder_is_a_valid_gpu_repository(tmp_path: Path) -> None:
    from repository.config import complete_config

    files = models.write_folder(tmp_path)
    for name, path in files.items():
        text = (tmp_path / name / "config.pbtxt").read_text()
        done = complete_config(text, model_name=name, version_dir=path.parent, gpu_count=None)
        (group,) = done.config.instance_group
        assert (group.kind, group.count, list(group.gpus)) == (group.KIND_GPU, 2, [0])
        assert done.config.dynamic_batching.max_queue_delay_microseconds == 500
