"""Tests: the embedded default (SQLite, filesystem broker) with no variables set, the real
PostgreSQL and Redis when DATABASE_URL / REDIS_URL are set. CI runs the suite both ways."""

import tempfile
from pathlib import Path

from console.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
VAR_DIR = Path(tempfile.mkdtemp(prefix="portico-test-"))
STORAGES["blobs"]["OPTIONS"]["location"] = str(VAR_DIR / "blobs")  # noqa: F405
UPLOAD_DIR = VAR_DIR / "uploads"
MEDIA_ROOT = VAR_DIR / "media"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # NOTE: a file, not Django's in-memory test database: the console, worker and serving
    # subprocesses that tests start must see the rows the test wrote. pytest-django gives each
    # xdist worker its own copy (it suffixes the name), and each test process has its own VAR_DIR.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
SECRET_KEY = "portico-insecure-test-key"
