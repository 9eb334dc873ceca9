"""API throttles (DRF's, rates from settings): over the rate, 429 with the API's error JSON and
Retry-After; users are counted apart; anonymous clients by address."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.console.api.conftest import signed_in, token_client


@pytest.fixture
def small_rates(settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": "2/min", "user": "3/min"},
    }
    cache.clear()
    yield
    cache.clear()


def test_a_user_over_the_rate_gets_429_with_the_error_json(small_rates, viewer) -> None:  # type: ignore[no-untyped-def]
    client = signed_in(viewer)
    assert [client.get("/api/models/").status_code for _ in range(3)] == [200, 200, 200]
    response = client.get("/api/models/")
    assert response.status_code == 429
    body = response.json()
    assert set(body) == {"message", "code", "extra"} and body["code"] == "throttled"
    assert 0 < body["extra"]["retry_after_s"] <= 60
    assert 0 < int(response["Retry-After"]) <= 60


def test_token_and_session_requests_of_one_user_share_a_count(small_rates, viewer) -> None:  # type: ignore[no-untyped-def]
    session, token = signed_in(viewer), token_client(viewer, "viewer")
    codes = [c.get("/api/models/").status_code for c in (session, token, session, token)]
    assert codes == [200, 200, 200, 429]


def test_users_are_counted_apart(small_rates, viewer, deployer) -> None:  # type: ignore[no-untyped-def]
    first = signed_in(viewer)
    for _ in range(3):
        first.get("/api/models/")
    assert first.get("/api/models/").status_code == 429
    assert signed_in(deployer).get("/api/models/").status_code == 200


def test_anonymous_clients_are_throttled_by_address(small_rates) -> None:  # type: ignore[no-untyped-def]
    # The schema is public: the one API route an anonymous client gets past authentication.
    assert [APIClient().get("/api/schema/").status_code for _ in range(3)] == [200, 200, 429]
    other = APIClient(REMOTE_ADDR="10.1.2.3")
    assert other.get("/api/schema/").status_code == 200


def test_an_anonymous_client_cannot_escape_by_sending_x_forwarded_for(small_rates) -> None:  # type: ignore[no-untyped-def]
    client = APIClient()
    codes = [
        client.get("/api/schema/", HTTP_X_FORWARDED_FOR=f"10.9.9.{n}").status_code for n in range(3)
    ]
    assert codes == [200, 200, 429]
