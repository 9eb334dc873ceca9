"""A load test job measures with perf_analyzer when one is configured and says so in its result;
a configured binary that cannot run fails the job with the reason; the version's uploaded sample
inputs are what it sends."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings

from repository.demo_models import write_onnx_mlp
from repository.models import LoadTest, ModelVersion
from repository.tuning.jobs import load_test_run
from repository.tuning.samples import sample_input_add
from repository.tuning.services import load_test_start

PERF_ANALYZER = os.environ.get("PERF_ANALYZER", "")

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]


def start(model_repo: Path, **shape: object) -> LoadTest:
    write_onnx_mlp(model_repo, "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    call_command("import_repository", str(model_repo), sync=True, stdout=io.StringIO())
    actor = get_user_model().objects.create_user("deployer")
    version = ModelVersion.objects.get(model__name="mlp", number=1)
    return load_test_start(version=version, actor=actor, duration_s=1.0, **shape)  # type: ignore[arg-type]


@pytest.mark.skipif(
    not PERF_ANALYZER,
    reason="perf_analyzer not configured: set PERF_ANALYZER to the perf_analyzer executable "
    "(pip install perf-analyzer) to run a load test through it",
)
def test_a_load_test_through_perf_analyzer_records_it_as_the_generator(model_repo: Path) -> None:
    job = start(model_repo, mode="rate", rate_per_s=40)
    with override_settings(PORTICO_PERF_ANALYZER=PERF_ANALYZER):
        load_test_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    result = job.result
    assert result["generator"] == "perf_analyzer" and result["mode"] == "rate"
    assert result["requests"] > 0 and result["errors"] == 0
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"]
    assert result["throughput_per_s"] > 0 and result["compute_infer_ms"] > 0
    # Batch sizes and CPU still come from the server's side.
    assert result["batch_sizes"] and result["cpu_percent"] > 0


def test_without_perf_analyzer_the_built_in_client_sends_the_uploaded_sample_inputs(
    model_repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}{os.pathsep}{Path(sys.executable).parent}")
    job = start(model_repo, concurrency=2)
    row = {"name": "INPUT0", "datatype": "FP32", "shape": [2, 16], "data": [0.5] * 32}
    upload = json.dumps({"inputs": [row]}).encode()
    sample_input_add(version=job.version, actor=None, files=[("two-rows.json", upload)])
    with override_settings(PORTICO_PERF_ANALYZER=""):
        load_test_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    assert job.result["generator"] == "built-in" and job.result["requests"] > 0
    assert job.result["inputs"] == "1 uploaded sample input(s) INPUT0[2, 16]"
    # Every request carried the two rows of the sample, so no execution ran a single row.
    assert "1" not in job.result["batch_sizes"] and job.result["batch_sizes"]


def test_a_configured_perf_analyzer_that_cannot_run_fails_the_job(
    model_repo: Path, tmp_path: Path
) -> None:
    job = start(model_repo, concurrency=1)
    with override_settings(PORTICO_PERF_ANALYZER=str(tmp_path / "no-perf-analyzer")):
        load_test_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "PerfAnalyzerError: cannot run perf_analyzer at" in job.error
    assert "no-perf-analyzer" in job.error
