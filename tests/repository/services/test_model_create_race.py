"""Two first uploads of the same new model name at once: both become versions of one model.

Two real connections race on both databases. Only PostgreSQL lets the second insert reach the new
model's row and wait on its lock; SQLite serialises whole-database writes, so there the second
upload waits for the first before it starts.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from repository.models import Event, Model, ModelVersion
from repository.services import model_version_create_from_upload
from tests.repository.services.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = 'name: "racy"\nbackend: "onnxruntime"\n'


@pytest.fixture(autouse=True)
def private_upload_dir(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"


def upload(user: Any, content: bytes) -> ModelVersion:
    return model_version_create_from_upload(
        model_name="racy",
        uploaded_by=user,
        file=io.BytesIO(content),
        file_name="model.onnx",
        config_text=CONFIG,
    )


def wait_for_lock_waiter(timeout_s: float = 10.0) -> None:
    """Return once another connection of this database waits on a lock (the second insert)."""
    deadline = time.monotonic() + timeout_s
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] > 0:
                return
            time.sleep(0.02)
    raise AssertionError("the second upload never waited on the first one's new model row")


def test_second_first_upload_waits_for_the_first_and_becomes_version_2(deployer) -> None:  # type: ignore[no-untyped-def]
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's row lock on the uncommitted model row (SQLite never gets there)")
    results: dict[str, Any] = {}
    first_holds_the_row = threading.Event()
    second_waits = threading.Event()

    def first() -> ModelVersion:
        # The first upload's model row exists but is not committed when the second one starts.
        with transaction.atomic():
            version = upload(deployer, b"weights-1")
            first_holds_the_row.set()
            assert second_waits.wait(20)
        return version

    def second() -> ModelVersion:
        assert first_holds_the_row.wait(20)
        return upload(deployer, b"weights-2")

    threads = [in_thread(first, results, "first"), in_thread(second, results, "second")]
    assert first_holds_the_row.wait(20)
    wait_for_lock_waiter()
    second_waits.set()
    for thread in threads:
        thread.join(30)
    assert isinstance(results["first"], ModelVersion), results["first"]
    assert isinstance(results["second"], ModelVersion), results["second"]
    assert Model.objects.filter(name="racy").count() == 1
    assert sorted(ModelVersion.objects.values_list("number", flat=True)) == [1, 2]
    assert Event.objects.filter(action="upload", model_name="racy").count() == 2


def test_simultaneous_first_uploads_both_succeed(deployer) -> None:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(2, timeout=20)
    results: dict[str, Any] = {}

    def racer(content: bytes) -> Callable[[], ModelVersion]:
        def run() -> ModelVersion:
            barrier.wait()
            return upload(deployer, content)

        return run

    threads = [in_thread(racer(f"w{n}".encode()), results, str(n)) for n in range(2)]
    for thread in threads:
        thread.join(30)
    assert all(isinstance(r, ModelVersion) for r in results.values()), results
    assert Model.objects.filter(name="racy").count() == 1
    assert sorted(ModelVersion.objects.values_list("number", flat=True)) == [1, 2]
