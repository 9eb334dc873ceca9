"""Two admins demoting each other at once: one of them stays admin.

Two real connections race: PostgreSQL's row lock or SQLite's write lock (taken as the transaction
begins) makes the second wait for the first and see its result.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from repository.errors import LastAdminError
from repository.services import user_role, user_role_set
from tests.factories import UserFactory
from tests.repository.services.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("attempt", range(3))
def test_two_admins_stepping_down_at_once_leave_one_admin(attempt: int) -> None:
    admins = [UserFactory(username=f"admin-{n}", role="admin") for n in range(2)]
    barrier = threading.Barrier(2, timeout=20)
    results: dict[str, Any] = {}

    def step_down(admin: Any) -> Any:
        def run() -> str:
            barrier.wait()
            return user_role_set(user=admin, role="viewer", actor=admin)

        return run

    threads = [in_thread(step_down(a), results, a.username) for a in admins]
    for thread in threads:
        thread.join(30)
    outcomes = sorted(type(r).__name__ for r in results.values())
    assert outcomes == [LastAdminError.__name__, "str"], results
    roles = sorted(user_role(type(a).objects.get(pk=a.pk)) or "" for a in admins)
    assert roles == ["admin", "viewer"]
