"""Serving started without the console's SECRET_KEY (its own settings, a random key of its own)
still accepts the console's inference key: Try-it publishes the key's hash to the token table,
and serving reads it there like any other token's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.ports import free_port
from tests.serving.harness import registry_replica_without_console_key, wait_ready
from tests.serving.sources.test_registry import identity_onnx, promote, registry_version, wait_for

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

REQUEST = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}


def database_url() -> str:
    """The test database, for a process that reads it with settings of its own."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db.get('PORT') or 5432}/{db['NAME']}"


def test_serving_without_the_consoles_secret_key_answers_try_it(
    tmp_path: Path, deployer: Any
) -> None:
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    port = free_port()
    process = registry_replica_without_console_key(
        database_url=database_url(), port=port, cache_dir=tmp_path / "cache",
        SERVING_REGISTRY_POLL_SECS="0.3", PORTICO_INFERENCE_AUTH="required",
    )  # fmt: skip
    try:
        wait_ready(f"127.0.0.1:{port}", process=process)
        infer = f"http://127.0.0.1:{port}/v2/models/ident/infer"
        assert httpx.post(infer, json=REQUEST).status_code == 401
        settings.PORTICO_SERVING_HTTP_URL = f"http://127.0.0.1:{port}"
        browser = Client()
        browser.force_login(deployer)

        def try_it() -> dict[str, Any]:
            url = reverse("console:model-try", args=["ident"])
            response = browser.post(url, data={"request": REQUEST}, content_type="application/json")
            assert response.status_code == 200
            return dict(response.json())

        # The first call publishes the key's hash; serving takes it with the next revision.
        wait_for(lambda: try_it()["status"] == 200)
        assert try_it()["response"]["outputs"][0]["data"] == [1, 2, 3]
    finally:
        process.kill()
        process.wait()
