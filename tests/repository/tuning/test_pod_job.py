"""The load-test Job's spec: built by the same function as the check's, with the ``load-test``
role, the serving pods' placement, its own CPU/memory/GPU, and still no secret, no token and no
host access."""

from __future__ import annotations

import json
from typing import Any

import pytest

from repository.tuning.pod_job import LoadTestPodSettings, load_test_job_manifest
from repository.validation.check_job.manifest import ROLE_LABEL

SERVING = {"matchLabels": {"app.kubernetes.io/component": "serving"}}
PLACEMENT = {
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": SERVING,
                    },
                }
            ]
        }
    },
}


def _manifest(**pod: Any) -> dict[str, Any]:
    settings = {
        "cpu": "4",
        "memory": "8Gi",
        "gpus": 0,
        "placement": PLACEMENT,
        "deadline_s": 1800,
        "startup_timeout_s": 300,
    }
    return load_test_job_manifest(
        name="portico-loadtest-0123456789ab",
        namespace="portico",
        image="portico:latest",
        pod=LoadTestPodSettings(**{**settings, **pod}),
        start_timeout_s=300,
        bundle_bytes=3 * 1024**2,
    )


def test_the_load_test_pod_has_its_role_and_the_serving_placement() -> None:
    job = _manifest()
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels[ROLE_LABEL] == "load-test"
        assert labels["app.kubernetes.io/component"] == "load-test"
    pod = job["spec"]["template"]["spec"]
    for field in ("nodeSelector", "tolerations", "affinity"):
        assert pod[field] == PLACEMENT[field]
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "repository.tuning.pod"]
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "8Gi"}
    assert container["resources"]["limits"]["memory"] == "8Gi"
    assert job["spec"]["activeDeadlineSeconds"] == 300 + 1800


def test_the_gpu_is_requested_only_when_configured() -> None:
    (container,) = _manifest(gpus=1)["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    (container,) = _manifest()["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_the_load_test_pod_holds_no_secret_and_no_token() -> None:
    pod = _manifest()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert "envFrom" not in container
    assert all(set(e) == {"name", "value"} for e in container["env"])  # no valueFrom: no secret
    assert not any("secret" in v or "projected" in v or "hostPath" in v for v in pod["volumes"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert not any(pod[k] for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_a_placement_cannot_add_anything_but_scheduling() -> None:
    with pytest.raises(ValueError, match="placement"):
        _manifest(placement={**PLACEMENT, "volumes": [{"name": "x", "hostPath": {"path": "/"}}]})


def test_the_load_test_job_is_a_valid_kubernetes_job() -> None:
    # The pinned client's models keep every known field and drop the rest: a lossless round trip
    # means every field is one the API knows.
    client = pytest.importorskip("kubernetes.client", reason="the kubernetes client is missing")
    for job in (_manifest(), _manifest(gpus=2)):
        parsed = client.V1Job.from_dict(json.loads(json.dumps(job)))
        assert client.ApiClient().sanitize_for_serialization(parsed) == job
