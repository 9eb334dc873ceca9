"""Inference tokens through tritonclient against registry-mode serving (auth required, the
default): health stays open, everything else needs a live token scoped to the model, quotas answer
429 / RESOURCE_EXHAUSTED, and a revoked token stops working on every replica within 2 s."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from serving.main import ServingProcess
from serving.settings import ServingSettings
from tests.serving.sources.test_registry import identity_onnx, promote, registry_version, retrying

pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("REDIS_URL", "")
# With Redis the poll is slow on purpose: only the pub/sub wake-up can meet the 2 s promise.
POLL_S = 30.0 if REDIS_URL else 0.3
REVOKE_DEADLINE_S = 2.0 if REDIS_URL else POLL_S + 2.0
X = np.arange(4, dtype=np.float32).reshape(1, 4)


def settings(tmp_path: Path, replica: str) -> ServingSettings:
    return ServingSettings(
        model_repository=None, host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0,
        cache_dir=tmp_path / f"cache-{replica}", registry_poll_s=POLL_S,
        heartbeat_interval_s=0.3, exit_timeout_s=5.0, cpu_count=1, replica_id=replica,
        redis_url=REDIS_URL,
    )  # fmt: skip


@pytest.fixture
def models(tmp_path: Path) -> None:
    onnx, config = identity_onnx(tmp_path)
    for name in ("fraud", "ranker"):
        promote(registry_version(name, 1, onnx, config))


@pytest.fixture
def replica(tmp_path: Path, models: None) -> Iterator[ServingProcess]:
    with ServingProcess(settings(tmp_path, "replica-a")) as server:
        yield server


def token(
    role: str = "invoker", *, known_to: ServingProcess | None = None, **options: Any
) -> tuple[Any, str]:
    """A new token row and its key; with ``known_to``, once that replica has picked it up."""
    from repository.services import api_token_create, user_role_grant
    from tests.factories import UserFactory

    def create() -> tuple[Any, str]:
        user = UserFactory()
        if role != "invoker":
            user_role_grant(user=user, role=role)
        return api_token_create(user=user, role=role, **options)

    row, key = retrying(create)
    if known_to is not None:
        metadata = f"http://{known_to.http_url}/v2"
        wait_until(lambda: httpx.get(metadata, headers=bearer(key)).status_code == 200, 30.0)
    return row, key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def grpc_bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def http_infer(server: ServingProcess, model: str, headers: dict[str, str] | None) -> Any:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(X)
    client = httpclient.InferenceServerClient(server.http_url)
    return client.infer(model, [tensor], headers=headers)


def grpc_infer(server: ServingProcess, model: str, headers: dict[str, str] | None) -> Any:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(X)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    return client.infer(model, [tensor], headers=headers)


def http_status(call: Any) -> str:
    with pytest.raises(InferenceServerException) as raised:
        call()
    return str(raised.value.status())


def grpc_status(call: Any) -> str:
    with pytest.raises(InferenceServerException) as raised:
        call()
    return str(raised.value.status()).removeprefix("StatusCode.")


def wait_until(predicate: Any, deadline_s: float) -> float:
    """Seconds until ``predicate()`` held; fails past ``deadline_s``."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < deadline_s, f"not within {deadline_s} s"
        time.sleep(0.02)
    return time.monotonic() - started


def test_health_answers_without_a_token_and_nothing_else_does(replica: ServingProcess) -> None:
    http = httpclient.InferenceServerClient(replica.http_url)
    grpc_client = grpcclient.InferenceServerClient(replica.grpc_url)
    assert http.is_server_live() and http.is_server_ready()
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    with grpc.insecure_channel(replica.grpc_url) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert check.status == health_pb2.HealthCheckResponse.SERVING

    assert http_status(lambda: http_infer(replica, "fraud", None)) == "401"
    assert http_status(lambda: http.get_server_metadata()) == "401"
    assert http_status(lambda: http.get_model_metadata("fraud")) == "401"
    assert http_status(lambda: http.get_model_repository_index()) == "401"
    assert grpc_status(lambda: grpc_infer(replica, "fraud", None)) == "UNAUTHENTICATED"
    assert grpc_status(lambda: grpc_client.get_server_metadata()) == "UNAUTHENTICATED"
    assert grpc_status(lambda: grpc_client.get_model_config("fraud")) == "UNAUTHENTICATED"

    raw = httpx.post(f"http://{replica.http_url}/v2/models/fraud/infer", json={"inputs": []})
    assert raw.status_code == 401 and raw.headers["www-authenticate"] == "Bearer"
    assert "inference token" in raw.json()["error"]  # Triton's error shape


def test_unknown_token_is_unauthenticated(replica: ServingProcess) -> None:
    wrong = bearer("x" * 43)
    assert http_status(lambda: http_infer(replica, "fraud", wrong)) == "401"
    assert grpc_status(lambda: grpc_infer(replica, "fraud", grpc_bearer("x" * 43))) == (
        "UNAUTHENTICATED")  # fmt: skip
    malformed = {"Authorization": "Basic Zm9vOmJhcg=="}
    assert http_status(lambda: http_infer(replica, "fraud", malformed)) == "401"


def test_invoker_calls_its_models_only(replica: ServingProcess) -> None:
    _, key = token(models=["fraud"], known_to=replica)
    result = http_infer(replica, "fraud", bearer(key))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X)
    result = grpc_infer(replica, "fraud", grpc_bearer(key))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X)

    assert http_status(lambda: http_infer(replica, "ranker", bearer(key))) == "403"
    assert grpc_status(lambda: grpc_infer(replica, "ranker", grpc_bearer(key))) == (
        "PERMISSION_DENIED")  # fmt: skip
    http = httpclient.InferenceServerClient(replica.http_url)
    grpc_client = grpcclient.InferenceServerClient(replica.grpc_url)
    assert http.get_model_metadata("fraud", headers=bearer(key))["name"] == "fraud"
    assert http_status(lambda: http.get_model_config("ranker", headers=bearer(key))) == "403"
    assert http.get_server_metadata(headers=bearer(key))["name"]
    # The index and live stats name every model: a scoped token may not read them.
    assert http_status(lambda: http.get_model_repository_index(headers=bearer(key))) == "403"
    assert grpc_status(lambda: grpc_client.get_model_repository_index(
        headers=grpc_bearer(key))) == "PERMISSION_DENIED"  # fmt: skip
    live_stats = f"http://{replica.http_url}/v2/portico/live-stats"
    assert httpx.get(live_stats, headers=bearer(key)).status_code == 403


def test_async_clients_send_the_token_the_same_way(replica: ServingProcess) -> None:
    _, key = token(models=["fraud"], known_to=replica)

    async def calls() -> list[Any]:
        http = httpaio.InferenceServerClient(replica.http_url)
        grpc_client = grpcaio.InferenceServerClient(replica.grpc_url)
        try:
            h_in = httpaio.InferInput("INPUT0", [1, 4], "FP32")
            h_in.set_data_from_numpy(X)
            g_in = grpcaio.InferInput("INPUT0", [1, 4], "FP32")
            g_in.set_data_from_numpy(X)
            answers: list[Any] = [
                (await http.infer("fraud", [h_in], headers=bearer(key))).as_numpy("OUTPUT0"),
                (await grpc_client.infer("fraud", [g_in], headers=grpc_bearer(key))).as_numpy(
                    "OUTPUT0"),
            ]  # fmt: skip
            for call in (http.infer("fraud", [h_in]), grpc_client.infer("ranker", [g_in],
                         headers=grpc_bearer(key))):  # fmt: skip
                try:
                    await call
                except InferenceServerException as exc:
                    answers.append(str(exc.status()))
            return answers
        finally:
            await http.close()
            await grpc_client.close()

    ok_http, ok_grpc, no_token, out_of_scope = asyncio.run(calls())
    np.testing.assert_array_equal(ok_http, X)
    np.testing.assert_array_equal(ok_grpc, X)
    assert (no_token, out_of_scope) == ("401", "StatusCode.PERMISSION_DENIED")


def test_viewer_token_reads_every_model_but_calls_none_and_deployer_calls_all(
    replica: ServingProcess,
) -> None:
    _, viewer_key = token("viewer", known_to=replica)
    _, deployer_key = token("deployer", known_to=replica)
    http = httpclient.InferenceServerClient(replica.http_url)
    assert http.get_model_config("ranker", headers=bearer(viewer_key))["name"] == "ranker"
    assert http.get_model_repository_index(headers=bearer(viewer_key))
    assert http_status(lambda: http_infer(replica, "ranker", bearer(viewer_key))) == "403"
    for model in ("fraud", "ranker"):
        assert http_infer(replica, model, bearer(deployer_key)).as_numpy("OUTPUT0") is not None
        assert grpc_infer(replica, model, grpc_bearer(deployer_key)) is not None


def test_revoked_token_stops_working_on_every_replica_within_2_s(
    tmp_path: Path, models: None
) -> None:
    from repository.services import api_token_revoke

    row, key = token(models=["fraud"])
    with (
        ServingProcess(settings(tmp_path, "replica-a")) as a,
        ServingProcess(settings(tmp_path, "replica-b")) as b,
    ):
        for replica in (a, b):
            http_infer(replica, "fraud", bearer(key))
            grpc_infer(replica, "fraud", grpc_bearer(key))
        retrying(lambda: api_token_revoke(token=row, actor=row.user))
        revoked_at = time.monotonic()
        for replica in (a, b):
            wait_until(lambda r=replica: _refused(r, key), REVOKE_DEADLINE_S)
        assert time.monotonic() - revoked_at < REVOKE_DEADLINE_S
        for replica in (a, b):
            assert grpc_status(lambda r=replica: grpc_infer(r, "fraud", grpc_bearer(key))) == (
                "UNAUTHENTICATED")  # fmt: skip


def _refused(replica: ServingProcess, key: str) -> bool:
    try:
        http_infer(replica, "fraud", bearer(key))
    except InferenceServerException as exc:
        return str(exc.status()) == "401"
    return False


def test_expired_token_is_unauthenticated(replica: ServingProcess) -> None:
    from django.utils import timezone

    from repository.models import ApiToken
    from repository.services import serving_revision_bump

    row, key = token(models=["fraud"], known_to=replica)
    http_infer(replica, "fraud", bearer(key))
    expiry = timezone.now() + timedelta(seconds=1)

    def shorten() -> None:
        ApiToken.objects.filter(pk=row.pk).update(expires_at=expiry)
        serving_revision_bump()

    retrying(shorten)
    wait_until(lambda: _refused(replica, key), 10.0)
    with pytest.raises(InferenceServerException, match="expired"):
        http_infer(replica, "fraud", bearer(key))
    assert grpc_status(lambda: grpc_infer(replica, "fraud", grpc_bearer(key))) == (
        "UNAUTHENTICATED")  # fmt: skip


def test_rate_quota_answers_429_with_retry_after_and_is_counted_by_prefix(
    replica: ServingProcess,
) -> None:
    # One request per 100 s: the first passes, the next ones are over the rate whatever the timing.
    row, key = token(models=["fraud"], rate_limit_rps=0.01, known_to=replica)
    http_infer(replica, "fraud", bearer(key))
    raw = httpx.post(f"http://{replica.http_url}/v2/models/fraud/infer", headers=bearer(key),
                     json={"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                                       "data": [0, 1, 2, 3]}]})  # fmt: skip
    assert raw.status_code == 429 and int(raw.headers["retry-after"]) >= 1
    assert "Quota exceeded" in raw.json()["error"]
    assert grpc_status(lambda: grpc_infer(replica, "fraud", grpc_bearer(key))) == (
        "RESOURCE_EXHAUSTED")  # fmt: skip
    metrics = httpx.get(f"http://127.0.0.1:{replica.ports.metrics}/metrics").text
    line = f'portico_inference_rejected_total{{reason="quota_rate",token="{row.prefix}"}} 2.0'
    assert line in metrics
    assert key not in metrics


def test_concurrency_quota_counts_an_open_stream(replica: ServingProcess) -> None:
    _, key = token(models=["fraud"], max_concurrency=1, known_to=replica)
    answers: list[Any] = []
    stream = grpcclient.InferenceServerClient(replica.grpc_url)
    stream.start_stream(callback=lambda result, error: answers.append((result, error)),
                        headers=grpc_bearer(key))  # fmt: skip
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(X)
        stream.async_stream_infer("fraud", [tensor])
        wait_until(lambda: answers, 30.0)
        assert answers[0][1] is None
        assert http_status(lambda: http_infer(replica, "fraud", bearer(key))) == "429"
        assert grpc_status(lambda: grpc_infer(replica, "fraud", grpc_bearer(key))) == (
            "RESOURCE_EXHAUSTED")  # fmt: skip
    finally:
        stream.stop_stream()
        stream.close()
    wait_until(lambda: _passes(replica, key), 10.0)


def _passes(replica: ServingProcess, key: str) -> bool:
    try:
        http_infer(replica, "fraud", bearer(key))
    except InferenceServerException:
        return False
    return True


def test_stream_message_for_a_model_out_of_scope_ends_the_stream(replica: ServingProcess) -> None:
    _, key = token(models=["fraud"], known_to=replica)
    answers: list[Any] = []
    client = grpcclient.InferenceServerClient(replica.grpc_url)
    client.start_stream(callback=lambda result, error: answers.append((result, error)),
                        headers=grpc_bearer(key))  # fmt: skip
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(X)
    client.async_stream_infer("fraud", [tensor])
    client.async_stream_infer("ranker", [tensor])
    wait_until(lambda: len(answers) >= 2, 30.0)
    client.stop_stream()
    client.close()
    assert answers[0][1] is None
    assert "PERMISSION_DENIED" in str(answers[1][1].status())


def test_live_stats_need_a_token_for_every_model_and_the_console_key_has_one(
    replica: ServingProcess,
) -> None:
    from repository.console_key import console_authorization

    url = f"http://{replica.http_url}/v2/portico/live-stats"
    assert httpx.get(url).status_code == 401
    # The console publishes its key's hash on first use; the replica takes it with the revision.
    headers = console_authorization()
    wait_until(lambda: httpx.get(url, headers=headers).status_code == 200, 30.0)
    assert "models" in httpx.get(url, headers=headers).json()


def test_last_use_reaches_the_token_row_through_the_heartbeat(replica: ServingProcess) -> None:
    from repository.models import ApiToken

    row, key = token(models=["fraud"], known_to=replica)
    assert row.last_used is None
    http_infer(replica, "fraud", bearer(key))

    def recorded() -> bool:
        return ApiToken.objects.filter(pk=row.pk, last_used__isnull=False).exists()

    wait_until(recorded, 10.0)


def test_rpcs_serving_lacks_still_answer_unimplemented_behind_the_check(
    replica: ServingProcess,
) -> None:
    _, key = token(models=["fraud"], known_to=replica)
    client = grpcclient.InferenceServerClient(replica.grpc_url)
    assert grpc_status(lambda: client.get_system_shared_memory_status()) == "UNAUTHENTICATED"
    assert grpc_status(lambda: client.get_system_shared_memory_status(
        headers=grpc_bearer(key))) == "UNIMPLEMENTED"  # fmt: skip


def test_user_deactivated_outside_the_services_loses_inference_at_once(
    replica: ServingProcess,
) -> None:
    """Django's admin saves the user directly; no service call bumps the revision for it."""
    row, key = token(models=["fraud"], known_to=replica)
    http_infer(replica, "fraud", bearer(key))
    user = row.user

    def deactivate() -> None:
        user.is_active = False
        user.save()

    retrying(deactivate)
    wait_until(lambda: _refused(replica, key), REVOKE_DEADLINE_S)
