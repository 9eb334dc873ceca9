"""Promote, roll back and approve over the API: answers, idempotency and refusals."""

from __future__ import annotations

import pytest

from repository.models import Event, ModelVersion, VersionState
from repository.services import serving_revision_current
from tests.console.api.conftest import assert_error, signed_in
from tests.factories import ModelFactory, ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def states(name: str) -> dict[int, str]:
    rows = ModelVersion.objects.filter(model__name=name).values_list("number", "state")
    return dict(rows)


def test_promote_answers_the_version_json(ready_version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    response = as_deployer.post("/api/models/m/versions/1/promote/")
    assert response.status_code == 200
    body = response.json()
    assert (body["model"], body["version"], body["state"]) == ("m", 1, "promoted")
    assert body["promoted_at"] is not None


def test_promote_twice_answers_200_with_the_same_json_and_one_event(
    ready_version, as_deployer
) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    first = as_deployer.post("/api/models/m/versions/1/promote/")
    revision = serving_revision_current()
    second = as_deployer.post("/api/models/m/versions/1/promote/")
    assert second.status_code == 200
    assert second.json() == first.json()
    assert serving_revision_current() == revision
    assert Event.objects.filter(action="promote").count() == 1


def test_promote_retires_the_previous_version(ready_version, as_deployer, as_viewer) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    ready_version("m")
    as_deployer.post("/api/models/m/versions/1/promote/")
    as_deployer.post("/api/models/m/versions/2/promote/")
    assert states("m") == {1: "retired", 2: "promoted"}
    model = as_viewer.get("/api/models/m/").json()
    assert (model["promoted_version"], model["state"]) == (2, "promoted")


@pytest.mark.parametrize("state", [VersionState.FAILED, VersionState.UPLOADED])
def test_promote_of_an_unready_version_is_409_naming_the_state(as_deployer, state) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(state=state)
    url = f"/api/models/{version.model.name}/versions/{version.number}/promote/"
    body = assert_error(as_deployer.post(url), 409, "invalid_state")
    assert state in body["message"]
    assert body["extra"]["state"] == state
    version.refresh_from_db()
    assert version.state == state


def test_rollback_answers_the_version_now_promoted(ready_version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    ready_version("m")
    as_deployer.post("/api/models/m/versions/1/promote/")
    as_deployer.post("/api/models/m/versions/2/promote/")
    response = as_deployer.post("/api/models/m/rollback/")
    assert response.status_code == 200
    assert (response.json()["version"], response.json()["state"]) == (1, "promoted")
    assert states("m") == {1: "promoted", 2: "retired"}
    event = Event.objects.get(action="rollback")
    assert (event.from_version, event.to_version) == (2, 1)


def test_rollback_with_nothing_to_roll_back_to_is_409(ready_version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    assert_error(as_deployer.post("/api/models/m/rollback/"), 409, "nothing_to_roll_back")
    as_deployer.post("/api/models/m/versions/1/promote/")
    body = assert_error(as_deployer.post("/api/models/m/rollback/"), 409, "nothing_to_roll_back")
    assert body["extra"]["current"] == 1


def test_rollback_of_a_missing_model_is_404(as_deployer) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_deployer.post("/api/models/nope/rollback/"), 404, "model_not_found")


def code_version(uploader):  # type: ignore[no-untyped-def]
    model = ModelFactory(name="py", backend="python")
    return ModelVersionFactory(model=model, number=1, needs_approval=True, uploaded_by=uploader)


def test_code_bearing_version_must_be_approved_before_promote(deployer, as_deployer) -> None:  # type: ignore[no-untyped-def]
    code_version(deployer)
    body = assert_error(as_deployer.post("/api/models/py/versions/1/promote/"), 409)
    assert body["code"] == "approval_required"


def test_admin_approves_then_deployer_promotes(
    deployer, as_admin, as_deployer, registry_admin
) -> None:  # type: ignore[no-untyped-def]
    code_version(deployer)
    response = as_admin.post("/api/models/py/versions/1/approve/")
    assert response.status_code == 200
    body = response.json()
    assert body["approved"] is True and body["needs_approval"] is True
    assert body["approved_by"] == registry_admin.username
    assert as_deployer.post("/api/models/py/versions/1/promote/").json()["state"] == "promoted"


def test_approve_twice_is_harmless(deployer, as_admin) -> None:  # type: ignore[no-untyped-def]
    code_version(deployer)
    first = as_admin.post("/api/models/py/versions/1/approve/")
    second = as_admin.post("/api/models/py/versions/1/approve/")
    assert second.status_code == 200 and second.json() == first.json()
    assert Event.objects.filter(action="approve").count() == 1


def test_approve_by_the_uploader_is_refused(registry_admin, second_admin) -> None:  # type: ignore[no-untyped-def]
    code_version(registry_admin)
    client = signed_in(registry_admin)
    body = assert_error(client.post("/api/models/py/versions/1/approve/"), 403, "self_approval")
    assert registry_admin.username in body["message"]
    assert signed_in(second_admin).post("/api/models/py/versions/1/approve/").status_code == 200


def test_approve_by_a_deployer_is_403(deployer, as_deployer) -> None:  # type: ignore[no-untyped-def]
    code_version(None)
    assert_error(as_deployer.post("/api/models/py/versions/1/approve/"), 403, "permission_denied")


def test_approve_of_a_version_without_code_is_409(as_admin) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    url = f"/api/models/{version.model.name}/versions/{version.number}/approve/"
    assert_error(as_admin.post(url), 409, "approval_not_needed")


def test_rollback_from_a_version_twice_rolls_back_once(ready_version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3):
        ready_version("m")
    for number in (1, 2, 3):
        as_deployer.post(f"/api/models/m/versions/{number}/promote/")
    first = as_deployer.post("/api/models/m/rollback/", {"from_version": 3}, format="json")
    second = as_deployer.post("/api/models/m/rollback/", {"from_version": 3}, format="json")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert first.json()["version"] == 2
    assert states("m") == {1: "retired", 2: "promoted", 3: "retired"}
    assert Event.objects.filter(action="rollback").count() == 1


def test_rollback_with_a_bad_from_version_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    ModelFactory(name="m")
    response = as_deployer.post("/api/models/m/rollback/", {"from_version": "x"}, format="json")
    assert_error(response, 400, "invalid")
