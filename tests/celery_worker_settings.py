"""Settings for the real Celery worker subprocess that tests start: the test settings, pointed at
the test process's database, blob store and broker queue (passed as JSON in the environment)."""

import json
import os
from pathlib import Path

from console.settings.test import *  # noqa: F403

_shared = json.loads(os.environ["PORTICO_TEST_WORKER"])

DATABASES["default"]["NAME"] = _shared["db_name"]  # noqa: F405
VAR_DIR = Path(_shared["var_dir"])
STORAGES["blobs"] = _shared["blobs"]  # noqa: F405
UPLOAD_DIR = Path(_shared["upload_dir"])
CELERY_BROKER_URL = _shared["broker_url"]
CELERY_BROKER_TRANSPORT_OPTIONS = _shared["broker_options"]
CELERY_TASK_DEFAULT_QUEUE = _shared["queue"]
PORTICO_VALIDATION_TIME_LIMIT_S = _shared["time_limit_s"]
PORTICO_VALIDATION_STALE_GRACE_S = _shared["stale_grace_s"]
if _shared.get("check_module"):
    PORTICO_VALIDATION_CHECK_MODULE = _shared["check_module"]
globals().update(_shared.get("settings_overrides", {}))
