"""A 500 never carries the exception's text: the client gets a request id (header and body)
and the log holds the traceback under that same id."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from tests.console.security.failing_urls import SECRET_DETAIL

pytestmark = [pytest.mark.urls("tests.console.security.failing_urls"), pytest.mark.django_db]


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def _logged_with(caplog: pytest.LogCaptureFixture, request_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "request_id", None) == request_id]


def test_an_api_500_answers_the_error_json_with_the_request_id_only(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    response = client.get("/api/failing/")
    assert response.status_code == 500
    assert SECRET_DETAIL not in response.content.decode()
    body = response.json()
    assert set(body) == {"message", "code", "extra"} and body["code"] == "server_error"
    request_id = response["X-Request-ID"]
    assert body["extra"] == {"request_id": request_id}
    logged = _logged_with(caplog, request_id)
    assert any(r.exc_info and SECRET_DETAIL in str(r.exc_info[1]) for r in logged), logged


def test_a_page_500_shows_the_request_id_and_logs_the_traceback(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    response = client.get("/failing/")
    assert response.status_code == 500
    page = response.content.decode()
    assert SECRET_DETAIL not in page and "RuntimeError" not in page
    request_id = response["X-Request-ID"]
    assert request_id in page
    assert any(r.exc_info for r in _logged_with(caplog, request_id))


def test_every_answer_carries_a_fresh_request_id(client: Client) -> None:
    first, second = client.get("/login/"), client.get("/login/")
    assert first.status_code == 200
    assert len(first["X-Request-ID"]) == 32 and first["X-Request-ID"] != second["X-Request-ID"]


def test_a_client_cannot_choose_its_request_id(client: Client) -> None:
    response = client.get("/login/", HTTP_X_REQUEST_ID="chosen-by-client")
    assert response["X-Request-ID"] != "chosen-by-client"


def test_log_lines_django_writes_after_the_answer_carry_its_id_too(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    response = client.get("/api/no-such-route/")
    assert response.status_code == 404
    assert _logged_with(caplog, response["X-Request-ID"]), caplog.records
