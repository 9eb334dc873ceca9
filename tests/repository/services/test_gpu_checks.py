"""A pending GPU check is recorded from the first replica heartbeat that reports it, once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from repository.models import GpuCheck
from repository.services import gpu_checks_record, model_version_gpu_check_record, replica_heartbeat
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db


def _beat(replica_id: str, model: str, version: int, report: dict[str, Any] | None) -> None:
    row: dict[str, Any] = {"model": model, "version": version, "state": "READY", "reason": ""}
    if report is not None:
        row["gpu_check"] = report
    replica_heartbeat(
        replica_id=replica_id, address=replica_id, http_url=f"http://{replica_id}:8000",
        started_at=datetime.now(tz=UTC), versions=[row], last_error="",
    )  # fmt: skip


def test_a_failed_report_marks_the_version_failed_with_the_replicas_message() -> None:
    version = ModelVersionFactory(gpu_check=GpuCheck.PENDING, gpu_check_message="no GPU")
    _beat("cpu-1", version.model.name, version.number, None)
    assert model_version_gpu_check_record(version=version).gpu_check == GpuCheck.PENDING
    _beat("gpu-1", version.model.name, version.number, {"ok": False, "message": "GPU check "
          "failed: GPU 0: golden request 3: OUTPUT0 differs"})  # fmt: skip
    recorded = model_version_gpu_check_record(version=version)
    assert (recorded.gpu_check, recorded.gpu_checked_by) == (GpuCheck.FAILED, "gpu-1")
    assert recorded.gpu_check_message.endswith("OUTPUT0 differs")


def test_the_first_report_stays_and_versions_without_a_pending_check_are_untouched() -> None:
    pending = ModelVersionFactory(gpu_check=GpuCheck.PENDING)
    other = ModelVersionFactory()
    _beat("gpu-1", pending.model.name, pending.number, {"ok": True, "message": "passed"})
    _beat("gpu-2", other.model.name, other.number, {"ok": False, "message": "ignored"})
    assert gpu_checks_record() == 1
    _beat("gpu-1", pending.model.name, pending.number, {"ok": False, "message": "later"})
    assert gpu_checks_record() == 0
    pending.refresh_from_db()
    other.refresh_from_db()
    assert (pending.gpu_check, pending.gpu_check_message) == (GpuCheck.PASSED, "passed")
    assert other.gpu_check == GpuCheck.NOT_NEEDED
