"""Where a check runs: in bubblewrap beside the worker (the default) or, with
``PORTICO_VALIDATION_RUNNER=kubernetes``, in a Job of its own. Validation and golden recording both
come through here, so neither can run uploaded code anywhere the setting does not say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from repository.models import ModelVersion
from repository.sandbox import CheckLimits
from repository.validation.runner import CheckInput, CheckOutcome, run_check

RUNNER_BUBBLEWRAP = "bubblewrap"
RUNNER_KUBERNETES = "kubernetes"


def check_runner() -> str:
    """The configured runner; anything but an exact "kubernetes" is bubblewrap."""
    value = str(settings.PORTICO_VALIDATION_RUNNER).strip().lower()
    return RUNNER_KUBERNETES if value == RUNNER_KUBERNETES else RUNNER_BUBBLEWRAP


def check_run(
    check: CheckInput, *, limits: CheckLimits, on_step: Callable[[dict[str, Any]], None]
) -> CheckOutcome:
    """Run the check where the setting says. Raises ``SandboxUnavailableError`` when that place
    cannot be had, and (Kubernetes) ``BlobIntegrityError`` when a file no longer matches."""
    if check_runner() == RUNNER_KUBERNETES:
        from repository.validation.check_job.launcher import run_check_job

        return run_check_job(check, limits=limits, on_step=on_step)
    return run_check(check, limits=limits, on_step=on_step)


def registry_files(
    version: ModelVersion, root: Path, model_dir: Path, version_dir: Path
) -> tuple[tuple[str, str], ...]:
    """Each materialised file's path under ``root`` and the sha256 the registry holds for it."""
    return tuple(
        (
            ((model_dir if f.model_level else version_dir) / f.path).relative_to(root).as_posix(),
            f.blob_id,
        )
        for f in version.files.all()
    )
