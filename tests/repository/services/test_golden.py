"""Golden request services: checks on the request, states, delete."""

from __future__ import annotations

import pytest

from repository.errors import GoldenRequestError, InvalidStateError
from repository.models import Event, GoldenRequest, GoldenState, VersionState
from repository.services import golden_request_delete, golden_request_record
from tests.factories import ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

INPUTS = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]


def test_record_stores_the_request_in_recording_and_enqueues_on_commit(  # type: ignore[no-untyped-def]
    deployer, django_capture_on_commit_callbacks
) -> None:
    version = ModelVersionFactory()
    with django_capture_on_commit_callbacks() as callbacks:
        golden = golden_request_record(
            model=version.model,
            name="g",
            inputs=INPUTS,
            version=version,
            rtol=0.01,
            atol=0.001,
            actor=deployer,
        )
    assert len(callbacks) == 1
    assert golden.state == GoldenState.RECORDING
    assert (golden.recorded_from, golden.rtol, golden.atol) == (version, 0.01, 0.001)
    assert Event.objects.filter(action="golden_record").exists()


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"inputs": []}, "inputs"),
        ({"inputs": [{"name": "x"}]}, "inputs[0]"),
        ({"name": ""}, "name"),
        ({"rtol": -1.0}, "rtol"),
    ],
)
def test_bad_golden_requests_are_refused_naming_the_field(deployer, kwargs, problem) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    args = {
        "model": version.model,
        "name": "g",
        "inputs": INPUTS,
        "version": version,
        "actor": deployer,
        **kwargs,
    }
    with pytest.raises(GoldenRequestError, match=problem.replace("[", r"\[")):
        golden_request_record(**args)
    assert not GoldenRequest.objects.exists()


def test_golden_request_names_are_unique_per_model(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    golden_request_record(model=version.model, name="g", inputs=INPUTS, version=version)
    with pytest.raises(GoldenRequestError, match="already has"):
        golden_request_record(model=version.model, name="g", inputs=INPUTS, version=version)


def test_recording_on_a_failed_version_is_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(state=VersionState.FAILED)
    with pytest.raises(InvalidStateError):
        golden_request_record(model=version.model, name="g", inputs=INPUTS, version=version)


def test_delete_writes_an_event(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    golden = golden_request_record(model=version.model, name="g", inputs=INPUTS, version=version)
    golden_request_delete(golden=golden, actor=deployer)
    assert not GoldenRequest.objects.exists()
    assert Event.objects.get(action="golden_delete").detail == {"golden": "g"}
