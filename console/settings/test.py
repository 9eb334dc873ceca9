"""Tests: the embedded default (SQLite, filesystem broker) with no variables set, the real
PostgreSQL and Redis when DATABASE_URL / REDIS_URL are set. CI runs the suite both ways."""

import tempfile
from pathlib import Path

from console.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
VAR_DIR = Path(tempfile.mkdtemp(prefix="portico-test-"))
if STORAGES["blobs"]["BACKEND"] == BLOB_BACKENDS["filesystem"]:  # noqa: F405
    STORAGES["blobs"]["OPTIONS"]["location"] = str(VAR_DIR / "blobs")  # noqa: F405
UPLOAD_DIR = VAR_DIR / "uploads"
MEDIA_ROOT = VAR_DIR / "media"
if not REDIS_URL:  # noqa: F405
    # The filesystem broker's folders move with VAR_DIR too. Left under the checkout's var/, the
    # tasks that tests enqueue with no worker to take them would wait there, and the next
    # `make run` worker would take them.
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker_options(VAR_DIR)  # noqa: F405
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # NOTE: a file, not Django's in-memory test database: the console, worker and serving
    # subprocesses that tests start must see the rows the test wrote. pytest-django gives each
    # xdist worker its own copy (it suffixes the name), and each test process has its own VAR_DIR.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
SECRET_KEY = "portico-insecure-test-key"

# NOTE: each test process has its own database, so a cache shared between them (Redis) would mix
# up different users that happen to have the same id; throttle counts stay per process.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Generous enough that no test meets them by accident; throttling is tested with its own rates.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {"anon": "100000/min", "user": "100000/min"},
}
# The scripted stand-in for serving.check reads its mode from these.
PORTICO_VALIDATION_SANDBOX_PASS_ENV = ["FAKE_CHECK", "FAKE_CHECK_SLEEP_S", "FAKE_CHECK_CONFIG"]
