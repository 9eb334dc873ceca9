"""The first GPU replica's check of a pending version: golden requests on one instance per GPU
before traffic, the outcome kept for the heartbeat, a failure keeping the version unavailable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from repository import demo_models
from serving.backends.base import InstancePlacement
from serving.backends.onnxruntime import OnnxRuntimeInstance
from serving.errors import UnavailableError
from serving.sources.gpu_check import GpuCheckGate, GpuReports, report_failed_load
from tests.serving.backends.specs import spec_for

pytestmark = pytest.mark.embedded


def _golden(expected: list[float], golden_id: int = 7) -> dict[str, Any]:
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]
    outputs = {"OUTPUT0": {"datatype": "FP32", "shape": [1, 2], "data": expected}}
    return {"id": golden_id, "inputs": inputs, "outputs": outputs, "rtol": 0, "atol": 0}


def _instances(tmp_path: Path) -> list[OnnxRuntimeInstance]:
    """Two loaded instances that report GPU placements on devices 0 and 1.

    NOTE: loaded on the CPU provider (no GPU here) and then labelled, so the gate's own logic
    (which instances it asks, what it reports) runs against real executions.
    """
    model_dir = demo_models.write_onnx_identity(tmp_path, dims=(-1,), max_batch_size=8)
    instances = []
    for device in (0, 1):
        cpu = InstancePlacement(name=f"identity_{device}", kind="KIND_CPU")
        instance = OnnxRuntimeInstance(spec_for(model_dir), cpu)
        instance.load()
        instance.placement = dataclasses.replace(cpu, kind="KIND_GPU", device_id=device)
        instances.append(instance)
    return instances


def test_passing_golden_requests_on_every_gpu_are_reported_ok(tmp_path: Path) -> None:
    reports: GpuReports = {}
    instances = _instances(tmp_path)
    GpuCheckGate((_golden([1.0, 2.0]),), reports)(instances[0].spec, instances)
    assert reports == {
        ("identity", 1): {
            "ok": True,
            "message": "warm-up and 1 golden request(s) passed on GPU 0, 1",
        }
    }


def test_a_drifting_golden_request_fails_the_load_and_is_reported(tmp_path: Path) -> None:
    reports: GpuReports = {}
    instances = _instances(tmp_path)
    with pytest.raises(UnavailableError, match="GPU check failed: GPU 0: golden request 7"):
        GpuCheckGate((_golden([1.0, 3.0]),), reports)(instances[0].spec, instances)
    report = reports[("identity", 1)]
    assert report["ok"] is False
    assert "GPU 1: golden request 7" in report["message"]


def test_a_version_that_failed_to_load_on_the_gpu_is_reported_failed_once() -> None:
    reports: GpuReports = {}
    row = {"model": "m", "version": 2, "state": "UNAVAILABLE", "reason": "warm-up failed: OOM"}
    report_failed_load(reports, row)
    assert reports == {("m", 2): {"ok": False, "message": "GPU check failed: warm-up failed: OOM"}}
    report_failed_load(reports, row | {"reason": "something later"})
    assert reports[("m", 2)]["message"].endswith("OOM")
    report_failed_load(reports, {"model": "m", "version": 3, "state": "LOADING", "reason": ""})
    assert ("m", 3) not in reports
