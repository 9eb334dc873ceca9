"""The registry sweep every worker runs on its own timer: a validation abandoned by a killed worker
is picked up by a worker that is already running (not only by the next one to start)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from repository.models import ModelVersion, VersionState
from repository.services import model_version_create_from_upload
from tests.conftest import start_live_worker

pytestmark = pytest.mark.embedded

FAKE_CHECK = "tests.repository.validation.fake_check"


def wait_for_state(version: ModelVersion, states: set[str], timeout_s: float) -> float:
    """Seconds until ``version`` reaches one of ``states``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        version.refresh_from_db()
        if version.state in states:
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"version stayed {version.state} for {timeout_s}s")


def test_a_running_worker_revalidates_a_version_whose_worker_was_killed_mid_validation(  # type: ignore[no-untyped-def]
    transactional_db, worker_queue: str, tmp_path: Path, deployer, monkeypatch
) -> None:
    for name in ("killed", "sweeper"):
        (tmp_path / name).mkdir()
    # The sweeper runs first, on a queue of its own (what it re-queues, it validates itself); a
    # validation is stale 4 s after it started.
    monkeypatch.setenv("FAKE_CHECK", "ok")
    sweeper = start_live_worker(tmp_path / "sweeper", queue=f"{worker_queue}-sweeper",
                                check_module=FAKE_CHECK, time_limit_s=3, stale_grace_s=1,
                                settings_overrides={"PORTICO_SWEEP_INTERVAL_S": 1})  # fmt: skip
    monkeypatch.setenv("FAKE_CHECK", "slow")  # this worker is surely mid-validation when killed
    killed = start_live_worker(tmp_path / "killed", queue=worker_queue, check_module=FAKE_CHECK)
    try:
        version = model_version_create_from_upload(
            model_name="killed", uploaded_by=deployer, file=io.BytesIO(b"w"), file_name="model.onnx"
        )
        wait_for_state(version, {VersionState.VALIDATING}, timeout_s=60)
        killed.kill()
        recovered_s = wait_for_state(
            version, {VersionState.READY, VersionState.FAILED}, timeout_s=60
        )
    finally:
        killed.stop()
        sweeper.stop()
    assert version.state == VersionState.READY, version.validation_error
    assert f"re-queued abandoned validations of versions [{version.pk}]" in sweeper.output()
    print(f"\nworker killed mid-validation: version {version.state} {recovered_s:.1f} s later")
