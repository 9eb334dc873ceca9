"""Serving's settings bound every wait on PostgreSQL: a connect timeout, TCP keepalives and a
statement timeout, so a hung connection cannot hold the registry thread (and its heartbeats)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.embedded


def database_options(settings_module: str, **env: str) -> dict[str, object]:
    code = ("import json, django; django.setup(); from django.conf import settings; "
            "print(json.dumps(settings.DATABASES['default'].get('OPTIONS', {})))")  # fmt: skip
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    environment = {**base, "DJANGO_SETTINGS_MODULE": settings_module, **env}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_serving_connections_time_out_connecting_and_per_statement() -> None:
    options = database_options(
        "console.settings.serving",
        DATABASE_URL="postgres://portico_serving@db.invalid:5432/portico",
        PORTICO_DB_CONNECT_TIMEOUT_S="3",
        PORTICO_SERVING_STATEMENT_TIMEOUT_S="7",
    )
    assert options["connect_timeout"] == 3
    assert options["keepalives"] == 1
    assert options["options"] == "-c statement_timeout=7000"


def test_the_console_gets_the_connect_timeout_but_no_statement_timeout() -> None:
    options = database_options(
        "console.settings.local", DATABASE_URL="postgres://portico@db.invalid:5432/portico"
    )
    assert options["connect_timeout"] == 5
    assert "options" not in options  # migrations and validation may run long statements
