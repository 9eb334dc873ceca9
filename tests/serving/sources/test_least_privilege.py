"""A registry-mode replica runs with the read-mostly PostgreSQL role of
``deploy/postgres/serving-role.sql`` and the serving settings (no console ``SECRET_KEY``): it loads
and serves to a token it reads from the token table, heartbeats, and cannot change a version, a
token or read a password hash."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
import tritonclient.http as httpclient
from django.db import connection

from tests.ports import free_port
from tests.serving.harness import (
    ROOT,
    identity_input,
    registry_replica_without_console_key,
    wait_ready,
)
from tests.serving.sources.test_registry import identity_onnx, promote, registry_version, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="database roles are PostgreSQL's; CI runs this against PostgreSQL",
    ),
]

ROLE_SQL = ROOT / "deploy" / "postgres" / "serving-role.sql"


def conninfo(**overrides: Any) -> dict[str, Any]:
    params = connection.get_connection_params()
    info = {k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k)}
    return {**info, **overrides}


@pytest.fixture
def serving_role() -> Any:
    """The documented role under a name of this test's own (roles are cluster-wide)."""
    role, password = f"portico_serving_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    sql = ROLE_SQL.read_text().replace("portico_serving", role)
    sql = sql.replace(":'serving_password'", f"'{password}'")
    with psycopg.connect(**conninfo(), autocommit=True) as admin:
        admin.execute(sql)
    yield role, password
    with psycopg.connect(**conninfo(), autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


def test_replica_with_the_serving_role_serves_and_heartbeats_but_cannot_change_the_registry(
    tmp_path: Path, serving_role: tuple[str, str]
) -> None:
    from repository.models import ApiToken, ServingReplica
    from repository.services import api_token_create
    from tests.factories import UserFactory

    role, password = serving_role
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    token, key = api_token_create(user=UserFactory(), role="invoker", models=["ident"])
    info = conninfo()
    url = f"postgres://{role}:{password}@{info['host']}:{info.get('port', 5432)}/{info['dbname']}"
    port = free_port()
    process = registry_replica_without_console_key(
        database_url=url, port=port, cache_dir=tmp_path / "cache",
        SERVING_REPLICA_ID="least-privilege", SERVING_HEARTBEAT_SECS="0.3",
    )  # fmt: skip
    try:
        wait_ready(f"127.0.0.1:{port}", process=process)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        x = np.ones((1, 3), dtype=np.float32)
        headers = {"Authorization": f"Bearer {key}"}
        served = client.infer("ident", [identity_input(x)], headers=headers).as_numpy("OUTPUT0")
        client.close()
        np.testing.assert_array_equal(served, x)
        wait_for(lambda: ServingReplica.objects.filter(replica_id="least-privilege").exists())
        # The token's last use travels with the heartbeat: the one column serving may write.
        wait_for(lambda: ApiToken.objects.get(pk=token.pk).last_used is not None)
    finally:
        process.kill()
        process.wait()
    with psycopg.connect(**conninfo(user=role, password=password), autocommit=True) as conn:
        for statement in (
            "UPDATE repository_modelversion SET approved_at = now()",
            "DELETE FROM repository_event",
            "UPDATE repository_apitoken SET revoked_at = NULL, expires_at = now()",
            "DELETE FROM repository_apitoken",
            "SELECT * FROM auth_user",
            "SELECT password FROM auth_user",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
