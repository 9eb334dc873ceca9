"""First-start steps of `make run`: an admin account and the demo models, each done once."""

import os
import secrets
import tempfile
from pathlib import Path
from typing import TextIO

from django.contrib.auth import get_user_model
from django.core.management import CommandError

from repository.importing import repository_import
from repository.models import Role
from repository.selectors import model_get, model_list
from repository.services import model_version_approve_demo, user_role_grant
from repository.tuning.services import slo_set

DEMO_MLP_SLO = {"latency_ms": 50.0, "percentile": 95, "max_error_rate": 0.001,
                "expected_rate_per_s": 200.0}  # fmt: skip


def ensure_admin_account(*, stdout: TextIO) -> None:
    """Create the first admin unless one exists; print generated credentials exactly once."""
    user_model = get_user_model()
    if user_model.objects.filter(is_superuser=True).exists():
        return
    username = os.environ.get("PORTICO_ADMIN_USER", "admin")
    password = os.environ.get("PORTICO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
    user = user_model.objects.create_superuser(username=username, email="", password=password)
    user_role_grant(user=user, role=Role.ADMIN)
    if "PORTICO_ADMIN_PASSWORD" in os.environ:
        stdout.write(f"Admin account '{username}' created with the environment's password.")
    else:
        stdout.write(
            f"Admin account created: user '{username}', password '{password}' (shown once)."
        )


def ensure_demo_models(*, stdout: TextIO) -> None:
    """Register, validate and promote the generated demo models on an empty registry.

    The demo's Python model is Portico's own source (``repository.demo_models``), written into a
    private temporary folder here, so it is approved as shipped (the audit log says "demo") rather
    than in the name of an admin who never reviewed it.
    """
    from repository.demo_models import write_demo_repository

    if model_list().exists():
        return
    with tempfile.TemporaryDirectory(prefix="portico-demo-") as folder:
        write_demo_repository(Path(folder))
        stdout.write("Registering the demo models (validated and promoted)...")
        result = repository_import(
            Path(folder),
            sync=True,
            approve=lambda version: model_version_approve_demo(version=version),
        )
    result.report(out=stdout, err=stdout)
    if result.failed:
        raise CommandError(f"{len(result.failed)} demo version(s) failed validation")
    # The demo MLP carries an SLO, so its dashboard, the models list and the tuner have a target.
    slo_set(model=model_get(name="mlp"), actor=None, **DEMO_MLP_SLO)
