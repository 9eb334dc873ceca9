"""Validation with ``PORTICO_VALIDATION_RUNNER=kubernetes``: the Job spec the launcher builds, and
the whole validation run through the pod's protocol with a local process standing for the pod
(no cluster here: the API calls themselves are not exercised, docs/deploy.md)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from repository import demo_models
from repository.models import GoldenState, VersionState
from repository.sandbox import CheckLimits
from repository.services import (
    golden_request_record,
    model_version_create_from_upload,
    model_version_validate,
)
from repository.validation.check_job import launcher
from repository.validation.check_job.manifest import check_job_manifest
from tests.repository.archives import make_zip
from tests.repository.validation.local_transport import LocalCheckProcess

STEPS = ["parse", "checksums", "config", "load", "io", "warmup", "golden", "verify-config"]
LIMITS = CheckLimits(time_limit_s=300, memory_limit_bytes=4 * 1024**3, scratch_bytes=1024**3)


def _manifest(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "name": "portico-check-0123456789ab",
        "namespace": "portico",
        "image": "portico:latest",
        "cpu": "2",
        "start_timeout_s": 300,
        "limits": LIMITS,
        "bundle_bytes": 5 * 1024**2,
    }
    return check_job_manifest(**{**args, **overrides})


def test_the_check_pod_holds_no_secret_no_token_and_runs_locked_down() -> None:
    job = _manifest()
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["serviceAccountName"] == "portico-check"
    assert not any(pod[k] for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert "envFrom" not in container
    assert all(set(e) == {"name", "value"} for e in container["env"])  # no valueFrom: no secret
    assert not any("secret" in v or "projected" in v or "hostPath" in v for v in pod["volumes"])
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["stdin"] is True and container["stdinOnce"] is True and not container["tty"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0


def test_the_check_pod_is_bounded_in_time_memory_and_disk() -> None:
    job = _manifest()
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["activeDeadlineSeconds"] > 300 + LIMITS.time_limit_s  # never cuts the check short
    assert spec["ttlSecondsAfterFinished"] > 0
    limits = container["resources"]["limits"]
    assert limits["memory"] == str(4 * 1024**3) and limits["cpu"] == "2"
    sizes = {v["name"]: int(v["emptyDir"]["sizeLimit"]) for v in pod["volumes"]}
    assert sizes["scratch"] == 5 * 1024**2 + 1024**3  # the bundle plus the scratch limit
    assert int(limits["ephemeral-storage"]) >= sizes["scratch"] + sizes["tmp"]
    command = container["command"]
    assert command[command.index("--max-bundle-bytes") + 1] == str(5 * 1024**2)
    # The per-process limits the bubblewrap runner sets, those that are set (0 = none).
    assert [a for a in command if a.startswith("--rlimit")] == [f"--rlimit=as={4 * 1024**3}"]


def test_the_check_pod_carries_the_label_the_deny_all_policy_selects() -> None:
    labels = _manifest()["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "validation-check"
    assert labels["portico.dev/role"] == "validation-check"


def test_the_job_spec_is_a_valid_kubernetes_job() -> None:
    # Offline schema check: the pinned client's models keep every known field and drop the
    # rest, so a round trip that loses nothing means every field is one the API knows.
    client = pytest.importorskip("kubernetes.client", reason="the kubernetes client is missing")
    job = _manifest()
    parsed = client.V1Job.from_dict(json.loads(json.dumps(job)))
    assert client.ApiClient().sanitize_for_serialization(parsed) == job
    broken = _manifest()
    broken["spec"]["template"]["spec"]["containers"][0]["stdinOnly"] = True  # a misspelt field
    parsed = client.V1Job.from_dict(broken)
    assert client.ApiClient().sanitize_for_serialization(parsed) != broken


# ------------------------------------------------------------------ the whole validation run


@pytest.fixture
def kubernetes_runner(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTICO_VALIDATION_RUNNER = "kubernetes"


def _upload_and_validate(user, model_dir: Path):  # type: ignore[no-untyped-def]
    files = {
        p.relative_to(model_dir).as_posix(): p.read_bytes()
        for p in model_dir.rglob("*")
        if p.is_file()
    }
    version = model_version_create_from_upload(
        model_name=model_dir.name,
        uploaded_by=user,
        archive=io.BytesIO(make_zip(files)),
        archive_name="m.zip",
    )
    model_version_validate(version_id=version.pk)
    version.refresh_from_db()
    return version


@pytest.fixture
def local_pods(tmp_path: Path, monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Each check pod the launcher would start is a local ``--bundle-stdin`` process instead;
    the list gets each one's bundle size."""
    started: list[int] = []

    def local_pod(job_settings: Any, *, limits: CheckLimits, bundle_bytes: int) -> Any:
        started.append(bundle_bytes)
        scratch = tmp_path / f"pod-{len(started)}"
        return LocalCheckProcess(scratch, max_bundle_bytes=bundle_bytes)

    monkeypatch.setattr(launcher.CheckPod, "start", local_pod)
    return started


@pytest.mark.django_db
@pytest.mark.timeout(300)
def test_a_version_validates_and_records_golden_through_the_pods_protocol(  # type: ignore[no-untyped-def]
    kubernetes_runner, local_pods: list[int], deployer, model_repo: Path
) -> None:
    model_dir = demo_models.write_onnx_add_sub(model_repo, name="add", dtype="FP32", dims=(4,))
    version = _upload_and_validate(deployer, model_dir)
    assert version.state == VersionState.READY, version.validation_error
    assert [s["name"] for s in version.validation_steps] == STEPS
    assert 'platform: "onnxruntime_onnx"' in version.config_text
    assert len(local_pods) == 1 and local_pods[0] > 0

    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
    ]
    golden = golden_request_record(
        model=version.model, name="g", inputs=inputs, version=version, sync=True
    )
    assert golden.state == GoldenState.RECORDED, golden.error
    assert golden.expected_outputs["OUTPUT0"]["data"] == [2.0, 3.0, 4.0, 5.0]
    assert len(local_pods) == 2


@pytest.mark.django_db
def test_without_a_cluster_validation_fails_closed_with_the_reason(  # type: ignore[no-untyped-def]
    kubernetes_runner, deployer, model_repo: Path
) -> None:
    version = _upload_and_validate(deployer, demo_models.write_onnx_identity(model_repo))
    assert version.state == VersionState.FAILED
    assert version.validation_error.startswith("sandbox:")
    # Without the client, or without in-cluster credentials: either way it says which.
    assert "kubernetes" in version.validation_error.lower()


def test_a_run_waiting_for_its_pod_is_not_taken_for_abandoned(settings) -> None:  # type: ignore[no-untyped-def]
    from repository.validation.pipeline import validation_stale_after

    settings.PORTICO_VALIDATION_TIME_LIMIT_S = 100
    settings.PORTICO_VALIDATION_STALE_GRACE_S = 10
    settings.PORTICO_VALIDATION_KUBERNETES_START_TIMEOUT_S = 200
    settings.PORTICO_VALIDATION_RUNNER = "bubblewrap"
    assert validation_stale_after().total_seconds() == 110
    settings.PORTICO_VALIDATION_RUNNER = "kubernetes"
    assert validation_stale_after().total_seconds() == 310
