"""The one place a pod Job's spec is built (a validation check's, and a load test's through
``repository.tuning.pod_job``): a pod that holds nothing worth stealing and can reach nothing.

The pod gets no Secret and no ``envFrom``, only the fixed variables below; no service-account token
(``automountServiceAccountToken: false`` on a service account that has no role) and no service
links; its role label (``validation-check`` or ``load-test``) puts it under a NetworkPolicy that
denies all ingress and egress (deploy/kubernetes/base/network-policies.yaml). It runs as nobody
with a read-only root file system, every capability dropped and the runtime's seccomp profile,
within memory, CPU and ephemeral-storage limits, and is stopped by ``activeDeadlineSeconds``
should the worker die; a finished Job is garbage-collected after ``ttlSecondsAfterFinished`` if
the worker could not delete it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from repository.sandbox import CheckLimits

COMPONENT = "validation-check"
ROLE_LABEL = "portico.dev/role"
LABELS = {
    "app.kubernetes.io/name": "portico",
    "app.kubernetes.io/component": COMPONENT,
    ROLE_LABEL: COMPONENT,
}
PLACEMENT_FIELDS = ("nodeSelector", "tolerations", "affinity")
SERVICE_ACCOUNT = "portico-check"
CONTAINER = "check"
NOBODY = 65534
SCRATCH = "/scratch"
TTL_AFTER_FINISHED_S = 600
# Beyond the check's own time limit: the pod must outlive the worker's deadline, never cut it short.
DEADLINE_GRACE_S = 60
DEFAULT_MEMORY_BYTES = 8 * 1024**3
DEFAULT_SCRATCH_BYTES = 2 * 1024**3
LOG_BYTES = 64 * 1024**2  # the container's own log, which counts as ephemeral storage
# The variables the check gets; the image's own ENV lines are the only others.
ENV = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}


@dataclasses.dataclass(frozen=True)
class CheckJobSettings:
    """Where and how check Jobs run; ``namespace`` and ``image`` empty = the worker's own."""

    namespace: str
    image: str
    cpu: str
    start_timeout_s: int

    @classmethod
    def from_settings(cls) -> CheckJobSettings:
        return cls(
            namespace=str(settings.PORTICO_VALIDATION_KUBERNETES_NAMESPACE),
            image=str(settings.PORTICO_VALIDATION_KUBERNETES_IMAGE),
            cpu=str(settings.PORTICO_VALIDATION_KUBERNETES_CPU),
            start_timeout_s=int(settings.PORTICO_VALIDATION_KUBERNETES_START_TIMEOUT_S),
        )


def check_job_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    cpu: str,
    start_timeout_s: int,
    limits: CheckLimits,
    bundle_bytes: int,
) -> dict[str, Any]:
    """The Job running one check of a ``bundle_bytes`` bundle (unpacked into its scratch)."""
    memory = limits.memory_limit_bytes or DEFAULT_MEMORY_BYTES
    # The pod must have bounds even where the bubblewrap runner's "0 = no limit" is set.
    tmp_bytes = limits.scratch_bytes or DEFAULT_SCRATCH_BYTES
    command = ["python", "-m", "serving.check", "--bundle-stdin", "--scratch", SCRATCH]
    command += ["--max-bundle-bytes", str(bundle_bytes), *_rlimits(limits)]
    return pod_job_manifest(
        name=name,
        namespace=namespace,
        image=image,
        role=COMPONENT,
        command=command,
        resources={"cpu": cpu, "memory": str(memory)},
        bundle_bytes=bundle_bytes,
        tmp_bytes=tmp_bytes,
        deadline_s=start_timeout_s + int(limits.time_limit_s) + DEADLINE_GRACE_S,
    )


def pod_job_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    role: str,
    command: list[str],
    resources: dict[str, str],
    bundle_bytes: int,
    tmp_bytes: int,
    deadline_s: int,
    placement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A locked-down Job whose one container reads a bundle on its attached stdin.

    ``role`` labels it (the NetworkPolicies select on it); ``resources`` are both requested and the
    limit (extended resources such as ``nvidia.com/gpu`` included); ``placement`` may hold a
    ``nodeSelector``, ``tolerations`` and ``affinity`` for the pod, and nothing else."""
    labels = {**LABELS, "app.kubernetes.io/component": role, ROLE_LABEL: role}
    # The unpacked bundle plus as much scratch space again as /tmp gets.
    scratch = bundle_bytes + tmp_bytes
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        # The bundle arrives on stdin through the attach API; stdinOnce closes it when the
        # worker detaches, and the bundle's size header means the pod never waits for that.
        "stdin": True,
        "stdinOnce": True,
        "tty": False,
        "env": [{"name": k, "value": v} for k, v in ENV.items()],
        "resources": {
            "requests": dict(resources),
            "limits": {**resources, "ephemeral-storage": str(scratch + tmp_bytes + LOG_BYTES)},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "scratch", "mountPath": SCRATCH},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "fsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **_placement(placement or {}),
        "containers": [container],
        "volumes": [
            _empty_dir("scratch", scratch),
            _empty_dir("tmp", tmp_bytes),
            {"name": "shm", "emptyDir": {"medium": "Memory", **_size(tmp_bytes)}},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def _placement(placement: dict[str, Any]) -> dict[str, Any]:
    """Only the scheduling fields: a placement can never add a volume, an account or a host."""
    unknown = set(placement) - set(PLACEMENT_FIELDS)
    if unknown:
        raise ValueError(f"a pod placement may set only {', '.join(PLACEMENT_FIELDS)}: {unknown}")
    return {k: placement[k] for k in PLACEMENT_FIELDS if placement.get(k)}


def _rlimits(limits: CheckLimits) -> list[str]:
    """The per-process limits the bubblewrap runner sets (0 = none), for the check to set itself."""
    wanted = {
        "as": limits.memory_limit_bytes,
        "cpu": limits.cpu_limit_s,
        "nofile": limits.max_open_files,
        "fsize": limits.max_file_bytes,
    }
    return [f"--rlimit={name}={value}" for name, value in wanted.items() if value > 0]


def _empty_dir(name: str, size_bytes: int) -> dict[str, Any]:
    return {"name": name, "emptyDir": _size(size_bytes)}


def _size(size_bytes: int) -> dict[str, str]:
    return {"sizeLimit": str(size_bytes)}
