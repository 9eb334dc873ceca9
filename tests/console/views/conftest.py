"""Fixtures for the console page tests: users of each role, signed-in clients, a small registry."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from repository.models import VersionState
from tests.factories import (
    ModelFactory,
    ModelVersionFactory,
    UserFactory,
    VersionFileFactory,
)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_user(db):  # type: ignore[no-untyped-def]
    return UserFactory(username="alice-admin", role="admin")


@pytest.fixture
def second_admin(db):  # type: ignore[no-untyped-def]
    return UserFactory(username="bob-admin", role="admin")


@pytest.fixture
def roleless(db):  # type: ignore[no-untyped-def]
    return UserFactory(username="nobody")


@pytest.fixture
def viewer_client(viewer):  # type: ignore[no-untyped-def]
    return signed_in(viewer)


@pytest.fixture
def deployer_client(deployer):  # type: ignore[no-untyped-def]
    return signed_in(deployer)


@pytest.fixture
def admin_client(admin_user):  # type: ignore[no-untyped-def]
    return signed_in(admin_user)


@pytest.fixture
def catalog(deployer):  # type: ignore[no-untyped-def]
    """``mlp``: v1 retired, v2 promoted (after v1), v3 ready; ``pyfn``: v1 ready, needs approval."""
    mlp = ModelFactory(name="mlp", backend="onnxruntime")
    v1 = ModelVersionFactory(model=mlp, number=1, state=VersionState.RETIRED, uploaded_by=deployer)
    v2 = ModelVersionFactory(
        model=mlp,
        number=2,
        state=VersionState.PROMOTED,
        uploaded_by=deployer,
        previous_promoted=v1,
        config_text='name: "mlp"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [\n  {\n    name: "INPUT0"\n    data_type: TYPE_FP32\n    dims: [ 4 ]\n  }\n]\n'
        'output [\n  {\n    name: "OUTPUT0"\n    data_type: TYPE_FP32\n    dims: [ 2 ]\n  }\n]\n',
    )
    v3 = ModelVersionFactory(
        model=mlp,
        number=3,
        state=VersionState.READY,
        uploaded_by=deployer,
        config_text=v2.config_text.replace("max_batch_size: 8", "max_batch_size: 16")
        + "dynamic_batching {\n}\n",
        autocompleted_fields=["dynamic_batching"],
        validation_steps=[
            {"name": "config", "status": "passed", "message": "ok", "duration_ms": 3},
            {"name": "load", "status": "passed", "message": "loaded", "duration_ms": 120},
        ],
    )
    for version in (v1, v2, v3):
        VersionFileFactory(version=version)
    pyfn = ModelFactory(name="pyfn", backend="python")
    p1 = ModelVersionFactory(
        model=pyfn,
        number=1,
        state=VersionState.READY,
        uploaded_by=deployer,
        needs_approval=True,
        backend="python",
    )
    return {"mlp": mlp, "v1": v1, "v2": v2, "v3": v3, "pyfn": pyfn, "p1": p1}
