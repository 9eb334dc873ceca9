"""Record the GPU checks serving replicas report in their heartbeats onto the versions they ran.

Serving's database role writes only its heartbeat row, so a GPU replica that ran a pending
version's warm-up and golden requests reports the outcome there (``versions[].gpu_check``); the
registry's own processes (the console's pages and API, its dashboard collector) copy the first
report onto the version. Idempotent: a version is recorded once, later reports change nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from repository.models import GpuCheck, ModelVersion, ServingReplica


def model_version_gpu_check_record(*, version: ModelVersion) -> ModelVersion:
    """Record a pending version's GPU check from the first replica that reported one."""
    if version.gpu_check != GpuCheck.PENDING:
        return version
    found = _first_report(model=version.model.name, number=version.number)
    if found is None:
        return version
    replica_id, report = found
    with transaction.atomic():
        locked = ModelVersion.objects.select_for_update().get(pk=version.pk)
        if locked.gpu_check != GpuCheck.PENDING:
            return locked
        locked.gpu_check = GpuCheck.PASSED if report.get("ok") is True else GpuCheck.FAILED
        locked.gpu_check_message = str(report.get("message") or "")[:2000]
        locked.gpu_checked_by = replica_id[:128]
        locked.gpu_checked_at = timezone.now()
        locked.save(
            update_fields=["gpu_check", "gpu_check_message", "gpu_checked_by", "gpu_checked_at"]
        )
    return locked


def gpu_checks_record() -> int:
    """Record every pending version some replica has reported on; how many were recorded."""
    pending = ModelVersion.objects.filter(gpu_check=GpuCheck.PENDING).select_related("model")
    recorded = [model_version_gpu_check_record(version=v) for v in pending]
    return sum(1 for v in recorded if v.gpu_check != GpuCheck.PENDING)


def _first_report(*, model: str, number: int) -> tuple[str, dict[str, Any]] | None:
    for replica in ServingReplica.objects.order_by("last_seen"):
        for row in replica.versions if isinstance(replica.versions, list) else []:
            report = row.get("gpu_check") if isinstance(row, dict) else None
            if isinstance(report, dict) and (row.get("model"), row.get("version")) == (
                model,
                number,
            ):
                return replica.replica_id, report
    return None
