"""Schema-driven fuzzing of the management API: every operation in ``/api/schema/`` gets
generated requests (valid and invalid, derandomized), as a deployer with a token and anonymously,
and no answer may be a 5xx.

The budget is fixed: ``EXAMPLES_PER_OPERATION`` cases per operation and caller, no example
database, so CI runs the same cases every time in well under a minute on two cores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from repository.services import api_token_create
from tests.factories import ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

EXAMPLES_PER_OPERATION = 15
ANSWERS: Counter[tuple[str, int]] = Counter()  # (caller, status) -> cases, printed at the end

# NOTE: loaded at collection (the schema view reads no rows), so each operation is its own test.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture(autouse=True)
def connection_kept_open(db) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """As in Django's test client: the WSGI handler would otherwise close the test's connection
    (and with it the transaction that holds the test's rows) around every request."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


@pytest.fixture(scope="module", autouse=True)
def answers_reported() -> Iterator[None]:
    yield
    print(
        f"\n/api/ fuzzing: {ANSWERS.total()} cases, by caller and status: {sorted(ANSWERS.items())}"
    )


@pytest.fixture
def fuzzed_rows(deployer) -> None:  # type: ignore[no-untyped-def]
    """Throwaway registry rows for the generated requests to find (and change, or delete)."""
    ModelVersionFactory(model__name="fuzzed", number=1, uploaded_by=deployer)


@pytest.fixture
def deployer_token(deployer, fuzzed_rows) -> str:  # type: ignore[no-untyped-def]
    return str(api_token_create(user=deployer, role="deployer", name="fuzz")[1])


FUZZ = settings(
    max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip


@schema.parametrize()
@FUZZ
def test_api_never_answers_5xx_to_a_deployer_with_a_token(case: Any, deployer_token: str) -> None:
    response = case.call(headers={"Authorization": f"Token {deployer_token}"})
    ANSWERS["deployer", response.status_code] += 1
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])


@schema.parametrize()
@FUZZ
def test_api_never_answers_5xx_to_anonymous_callers(case: Any, fuzzed_rows: None) -> None:
    response = case.call()
    ANSWERS["anonymous", response.status_code] += 1
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
