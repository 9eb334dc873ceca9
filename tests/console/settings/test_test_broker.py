"""The test run's filesystem broker lives in the test process's own folder, never under the
checkout's var/, where the next `make run` worker would take the tasks tests left behind."""

from pathlib import Path

import pytest
from django.conf import settings

from console.celery import app

pytestmark = pytest.mark.skipif(
    bool(settings.REDIS_URL), reason="the filesystem broker is the embedded run's (no REDIS_URL)"
)
FOLDERS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")


def test_every_broker_folder_is_under_the_test_var_dir() -> None:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    checkout_var = Path(settings.BASE_DIR) / "var"
    for option in FOLDERS:
        folder = Path(options[option])
        assert folder.is_relative_to(settings.VAR_DIR), option
        assert not folder.is_relative_to(checkout_var), option


def test_a_task_sent_with_no_worker_waits_in_the_test_folder() -> None:
    queue = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    before = set(queue.iterdir())
    app.send_task("repository.tasks.validate_version", args=[0], queue="broker-folder-test")
    assert len(set(queue.iterdir()) - before) == 1
