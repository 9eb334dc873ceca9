"""``AccessGuard`` on its own: keys, scopes, expiry, quotas and table swaps, decided without any
listener (the listeners' behaviour is ``test_inference_auth``)."""

from __future__ import annotations

import hashlib
import time

import pytest

from serving.access.errors import (
    AccessCode,
    PermissionDeniedError,
    QuotaExceededError,
    UnauthenticatedError,
)
from serving.access.guard import AccessGuard
from serving.access.http import route_need
from serving.access.table import AccessTable, Need, TokenGrant, key_hash

KEY = "k" * 43


def grant(key: str = KEY, token_id: int = 1, **fields: object) -> TokenGrant:
    values: dict[str, object] = {"models": frozenset({"fraud"}), "may_infer": True, **fields}
    return TokenGrant(token_id=token_id, prefix=key[:8], key_hash=key_hash(key), **values)  # type: ignore[arg-type]


def guard_with(*grants: TokenGrant, revision: int = 1) -> AccessGuard:
    return AccessGuard(AccessTable.of(revision, grants))


def test_key_hash_is_the_registrys_sha256() -> None:
    assert key_hash(KEY) == hashlib.sha256(KEY.encode()).hexdigest()


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", f"Bearer {KEY}x", "Bearer  "])
def test_missing_malformed_or_unknown_keys_are_unauthenticated(header: str | None) -> None:
    guard = guard_with(grant())
    with pytest.raises(UnauthenticatedError) as raised:
        guard.admit(header, Need.INFER, "fraud")
    assert raised.value.code is AccessCode.UNAUTHENTICATED
    assert guard.rejected[("", "unauthenticated")] == 1


def test_bearer_and_token_schemes_are_accepted_and_health_needs_nothing() -> None:
    guard = guard_with(grant())
    assert guard.admit(f"Bearer {KEY}", Need.INFER, "fraud") is None
    assert guard.admit(f"token {KEY}", Need.READ, "fraud") is None
    assert guard.admit(None, Need.OPEN, "") is None


def test_scope_read_only_and_every_model_needs() -> None:
    reader = "r" * 43
    guard = guard_with(grant(), grant(reader, token_id=2, models=None, may_infer=False))
    with pytest.raises(PermissionDeniedError, match="may not use model 'ranker'"):
        guard.admit(f"Bearer {KEY}", Need.READ, "ranker")
    with pytest.raises(PermissionDeniedError, match="needs a token for every model"):
        guard.admit(f"Bearer {KEY}", Need.EVERY_MODEL, "")
    assert guard.admit(f"Bearer {reader}", Need.EVERY_MODEL, "") is None
    assert guard.admit(f"Bearer {reader}", Need.READ, "ranker") is None
    with pytest.raises(PermissionDeniedError, match="may read models but not call them"):
        guard.admit(f"Bearer {reader}", Need.INFER, "ranker")
    assert guard.rejected == {(KEY[:8], "forbidden"): 2, (reader[:8], "forbidden"): 1}


def test_expired_token_is_unauthenticated() -> None:
    guard = guard_with(grant(expires_at=time.time() - 1))
    with pytest.raises(UnauthenticatedError, match="expired"):
        guard.admit(f"Bearer {KEY}", Need.SERVER, "")
    assert guard.rejected == {(KEY[:8], "expired"): 1}


def test_rate_quota_refuses_beyond_the_burst_with_a_retry_after() -> None:
    guard = guard_with(grant(rate_limit_rps=0.5))
    state = guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    assert state is not None
    guard.release(state)
    with pytest.raises(QuotaExceededError) as raised:
        guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    assert raised.value.retry_after_s == 2 and raised.value.reason == "quota_rate"
    # Reading metadata is not inference: no quota taken.
    assert guard.admit(f"Bearer {KEY}", Need.READ, "fraud") is None


def test_concurrency_quota_frees_its_slot_on_release() -> None:
    guard = guard_with(grant(max_concurrency=2))
    held = [guard.admit(f"Bearer {KEY}", Need.INFER, "fraud") for _ in range(2)]
    with pytest.raises(QuotaExceededError, match="2 requests in flight"):
        guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    guard.release(held.pop())  # type: ignore[arg-type]
    assert guard.admit(f"Bearer {KEY}", Need.INFER, "fraud") is not None
    assert guard.rejected == {(KEY[:8], "quota_concurrency"): 1}


def test_a_new_table_takes_effect_at_once_and_keeps_counters_of_tokens_that_stay() -> None:
    other = "o" * 43
    guard = guard_with(grant(max_concurrency=1), grant(other, token_id=2))
    held = guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    assert guard.admit(f"Bearer {other}", Need.INFER, "fraud") is None  # verified, remembered
    guard.replace(AccessTable.of(2, [grant(max_concurrency=1)]))  # token 2 revoked
    with pytest.raises(UnauthenticatedError):
        guard.admit(f"Bearer {other}", Need.INFER, "fraud")
    with pytest.raises(QuotaExceededError):
        guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    guard.release(held)  # type: ignore[arg-type]
    assert guard.admit(f"Bearer {KEY}", Need.INFER, "fraud") is not None


def test_usage_is_reported_once_per_token() -> None:
    guard = guard_with(grant())
    guard.admit(f"Bearer {KEY}", Need.INFER, "fraud")
    guard.admit(f"Bearer {KEY}", Need.READ, "fraud")
    assert list(guard.take_usage()) == [1]
    assert guard.take_usage() == {}


@pytest.mark.parametrize(
    ("path", "need", "model"),
    [
        ("/v2/health/live", Need.OPEN, ""),
        ("/v2/health/ready", Need.OPEN, ""),
        ("/v2", Need.SERVER, ""),
        ("/metrics", Need.SERVER, ""),
        ("/v2/models/fraud/infer", Need.INFER, "fraud"),
        ("/v2/models/fraud/versions/3/infer", Need.INFER, "fraud"),
        ("/v2/models/fraud/generate_stream", Need.INFER, "fraud"),
        ("/v2/models/fraud", Need.READ, "fraud"),
        ("/v2/models/fraud/versions/2/config", Need.READ, "fraud"),
        ("/v2/models/fraud/ready", Need.READ, "fraud"),
        ("/v2/models/stats", Need.EVERY_MODEL, ""),
        ("/v2/repository/index", Need.EVERY_MODEL, ""),
        ("/v2/repository/models/fraud/load", Need.EVERY_MODEL, ""),
        ("/v2/portico/live-stats", Need.EVERY_MODEL, ""),
        ("/v2/models/", Need.SERVER, ""),
    ],
)
def test_http_paths_are_classified_as_the_router_reads_them(
    path: str, need: Need, model: str
) -> None:
    assert route_need(path) == (need, model)
