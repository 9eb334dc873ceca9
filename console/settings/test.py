"""Tests: the real PostgreSQL and Redis when DATABASE_URL / REDIS_URL are set (CI), else the
embedded default."""

import tempfile
from pathlib import Path

from console.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
VAR_DIR = Path(tempfile.mkdtemp(prefix="portico-test-"))
STORAGES["blobs"]["OPTIONS"]["location"] = str(VAR_DIR / "blobs")  # noqa: F405
UPLOAD_DIR = VAR_DIR / "uploads"
MEDIA_ROOT = VAR_DIR / "media"
