"""``python -m serving.check`` on good and broken candidates."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repository import demo_models
from serving.check import main

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def _check(model_dir: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    code = main(
        ["--model-dir", str(model_dir), "--version-dir", str(model_dir / "1"),
         "--report", str(report), *extra]
    )  # fmt: skip
    return code, json.loads(report.read_text())


def _steps(report: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["steps"]}


def _golden_file(tmp_path: Path, entries: list[dict[str, Any]]) -> str:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_good_onnx_model_passes_every_step_and_reports_golden_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path / "repo", dtype="FP32", dims=(4,))
    a, b = [1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0]
    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": a},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": b},
    ]
    expected = {"OUTPUT0": {"datatype": "FP32", "shape": [1, 4], "data": [2.0, 3.0, 4.0, 5.0]}}
    wrong = {"OUTPUT1": {"datatype": "FP32", "shape": [1, 4], "data": [9.0, 9.0, 9.0, 9.0]}}
    golden = _golden_file(
        tmp_path,
        [
            {"id": 1, "inputs": inputs, "outputs": expected, "rtol": 1e-5, "atol": 1e-6},
            {"id": 2, "inputs": {"inputs": inputs}},
        ],
    )
    code, report = _check(model_dir, tmp_path, "--golden", golden)
    assert code == 0 and report["ok"], report
    assert _steps(report) == dict.fromkeys(("config", "load", "io", "warmup", "golden"), "passed")
    assert (
        report["golden"][0]["ok"]
        and report["golden"][0]["outputs"]["OUTPUT0"] == expected["OUTPUT0"]
    )
    assert report["golden"][1]["outputs"]["OUTPUT1"]["data"] == [0.0, 1.0, 2.0, 3.0]
    assert [i["name"] for i in report["inputs"]] == ["INPUT0", "INPUT1"]
    assert 'platform: "onnxruntime_onnx"' in report["config_text"]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["name"] for line in lines] == ["config", "load", "io", "warmup", "golden"]

    golden = _golden_file(tmp_path, [{"id": 3, "inputs": inputs, "outputs": wrong}])
    code, report = _check(model_dir, tmp_path, "--golden", golden)
    assert code == 1 and _steps(report)["golden"] == "failed"
    assert "max abs difference" in report["golden"][0]["message"]


def test_missing_config_is_autocompleted_and_the_filled_fields_reported(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path, with_config=False)
    code, report = _check(model_dir, tmp_path)
    assert code == 0, report
    assert report["autocompleted_fields"]
    assert report["artifact"]["inputs"][0]["name"] == "INPUT0"


def test_corrupt_onnx_fails_at_load(tmp_path: Path) -> None:
    code, report = _check(demo_models.write_corrupt_onnx(tmp_path), tmp_path)
    assert code == 1 and not report["ok"]
    assert _steps(report)["config"] == "passed" and _steps(report)["load"] == "failed"
    assert _steps(report)["warmup"] == "skipped"


@pytest.mark.parametrize(
    ("mismatch", "text"),
    [
        ("datatype", "the config says data_type INT32, the model has FP32"),
        ("name", "the model has no such input"),
        ("dims", "the config implies shape [-1, 8], the model has [-1, 4]"),
    ],
)
def test_config_disagreeing_with_the_model_fails_the_io_step(
    tmp_path: Path, mismatch: str, text: str
) -> None:
    model_dir = demo_models.write_onnx_mismatched_config(tmp_path, mismatch=mismatch)
    code, report = _check(model_dir, tmp_path)
    assert code == 1 and _steps(report)["io"] == "failed"
    failed = next(s for s in report["steps"] if s["name"] == "io")
    assert text in failed["message"]


def test_invalid_config_fails_the_config_step(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path)
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('name: "identity" platform: "onnxruntime_onnx" no_such_field: 1')
    code, report = _check(model_dir, tmp_path, "--config", str(bad))
    assert code == 1 and _steps(report)["config"] == "failed"
    assert report["steps"][0]["message"]


def test_python_model_whose_initialize_raises_fails_at_load(tmp_path: Path) -> None:
    source = textwrap.dedent("""\
        class TritonPythonModel:
            def initialize(self, args):
                raise RuntimeError("weights file missing")

            def execute(self, requests):
                return []
    """)
    config = demo_models.PYTHON_ADD_SUB_CONFIG
    model_dir = demo_models.write_python_model(tmp_path, "broken_py", source, config)
    code, report = _check(model_dir, tmp_path)
    assert code == 1 and _steps(report)["load"] == "failed"
    load = next(s for s in report["steps"] if s["name"] == "load")
    assert "weights file missing" in load["message"]


def test_python_model_passes_and_io_is_skipped(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_add_sub(tmp_path)
    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
    code, report = _check(
        model_dir, tmp_path, "--golden", _golden_file(tmp_path, [{"id": 1, "inputs": inputs}])
    )
    assert code == 0, report
    assert _steps(report)["io"] == "skipped"
    assert report["golden"][0]["outputs"]["OUTPUT1"]["data"] == [0.0, 1.0, 2.0, 3.0]


def test_cli_streams_one_json_line_per_step(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path / "repo")
    report = tmp_path / "r.json"
    result = subprocess.run(
        [sys.executable, "-m", "serving.check", "--model-dir", str(model_dir),
         "--version-dir", str(model_dir / "1"), "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    assert [s["status"] for s in steps] == ["passed"] * 4 + ["skipped"]
    assert all(set(s) == {"name", "status", "message", "duration_ms"} for s in steps)
    assert json.loads(report.read_text())["ok"] is True
    assert np.isfinite(steps[0]["duration_ms"])


def test_kind_gpu_model_on_a_worker_without_gpu_is_checked_on_the_cpu_and_left_pending(
    tmp_path: Path,
) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path / "repo", dtype="FP32", dims=(4,))
    config = (model_dir / "config.pbtxt").read_text()
    (model_dir / "config.pbtxt").write_text(
        config + "\ninstance_group { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }\n"
    )
    code, report = _check(model_dir, tmp_path)
    assert code == 0, report["steps"]
    assert _steps(report) == {s: "passed" for s in ("config", "load", "io", "warmup")} | {
        "golden": "skipped"
    }
    load = next(s for s in report["steps"] if s["name"] == "load")
    assert "on the CPU runtime; GPU check pending: this validation worker:" in load["message"]
    assert report["gpu_check_pending"].startswith("this validation worker: no NVIDIA GPU")
    # The stored config keeps what the user wrote: the replica that loads it places it.
    assert "kind: KIND_GPU" in report["config_text"]
    assert "count: 2\n  gpus: 0\n  gpus: 1\n  kind: KIND_GPU" in report["config_text"]


def test_kind_auto_model_keeps_kind_auto_and_leaves_nothing_pending(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path / "repo", dtype="FP32", dims=(4,))
    code, report = _check(model_dir, tmp_path)
    assert code == 0
    assert report["gpu_check_pending"] == ""
    assert "KIND_CPU" not in report["config_text"]
