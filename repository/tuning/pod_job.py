"""A load test's pod as a Kubernetes Job: the check Job's locked-down spec
(``check_job.manifest.pod_job_manifest``) with the ``load-test`` role, the serving pods' node
placement, its own CPU, memory and GPU, and ``python -m repository.tuning.pod`` as its command.

The API calls are the check's (``check_job.launcher.CheckPod.launch``): nothing here talks to a
cluster itself.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from django.conf import settings

from repository.validation.check_job.launcher import CheckPod
from repository.validation.check_job.manifest import (
    DEFAULT_SCRATCH_BYTES,
    SCRATCH,
    CheckJobSettings,
    pod_job_manifest,
)
from repository.validation.streamed import CheckTransport

ROLE = "load-test"
GPU_RESOURCE = "nvidia.com/gpu"
RUNNER_KUBERNETES = "kubernetes"


def runs_in_pods() -> bool:
    """Whether each served config runs in a Job of its own: ``PORTICO_LOADTEST_RUNNER`` is
    exactly "kubernetes" (anything else is the worker)."""
    return str(settings.PORTICO_LOADTEST_RUNNER).strip().lower() == RUNNER_KUBERNETES


def cpu_quantity_cores(quantity: str) -> int:
    """Whole cores a Kubernetes CPU quantity ("2", "1.5", "500m") grants, at least 1."""
    text = quantity.strip()
    cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return max(1, math.ceil(cores))


@dataclasses.dataclass(frozen=True)
class LoadTestPodSettings:
    """How big a load-test pod is and where it is scheduled."""

    cpu: str
    memory: str
    gpus: int
    placement: dict[str, Any]
    deadline_s: int
    startup_timeout_s: int

    @classmethod
    def from_settings(cls) -> LoadTestPodSettings:
        return cls(
            cpu=str(settings.PORTICO_LOADTEST_KUBERNETES_CPU),
            memory=str(settings.PORTICO_LOADTEST_KUBERNETES_MEMORY),
            gpus=int(settings.PORTICO_LOADTEST_KUBERNETES_GPUS),
            placement=dict(settings.PORTICO_LOADTEST_KUBERNETES_PLACEMENT or {}),
            deadline_s=int(settings.PORTICO_LOADTEST_KUBERNETES_DEADLINE_S),
            startup_timeout_s=int(settings.PORTICO_VALIDATION_TIME_LIMIT_S),
        )


def load_test_job_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    pod: LoadTestPodSettings,
    start_timeout_s: int,
    bundle_bytes: int,
) -> dict[str, Any]:
    """The Job serving one config of a ``bundle_bytes`` bundle and measuring it in place."""
    resources = {"cpu": pod.cpu, "memory": pod.memory}
    if pod.gpus > 0:
        resources[GPU_RESOURCE] = str(pod.gpus)
    command = ["python", "-m", "repository.tuning.pod", "--bundle-stdin", "--scratch", SCRATCH]
    command += ["--max-bundle-bytes", str(bundle_bytes)]
    command += ["--startup-timeout-s", str(pod.startup_timeout_s)]
    return pod_job_manifest(
        name=name,
        namespace=namespace,
        image=image,
        role=ROLE,
        command=command,
        resources=resources,
        bundle_bytes=bundle_bytes,
        tmp_bytes=DEFAULT_SCRATCH_BYTES,
        deadline_s=start_timeout_s + pod.deadline_s,
        placement=pod.placement,
    )


def load_test_pod_start(bundle_bytes: int) -> CheckTransport:
    """Create a load-test Job and attach to its running pod (``SandboxUnavailableError`` when the
    cluster cannot be had)."""
    job_settings = CheckJobSettings.from_settings()
    pod = LoadTestPodSettings.from_settings()
    return CheckPod.launch(
        job_settings,
        lambda name, namespace, image: load_test_job_manifest(
            name=name,
            namespace=namespace,
            image=image,
            pod=pod,
            start_timeout_s=job_settings.start_timeout_s,
            bundle_bytes=bundle_bytes,
        ),
        prefix="portico-loadtest",
    )
