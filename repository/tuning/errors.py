"""Errors of load tests and tuning; registry errors, so the API's edge table maps them."""

from __future__ import annotations

from repository.errors import RegistryError


class LoadTestNotAllowedError(RegistryError):
    """The version cannot be load-tested: not ready, unapproved code, or an ensemble."""

    code = "load_test_not_allowed"

    def __init__(self, name: str, version: int, reason: str) -> None:
        super().__init__(
            f"cannot load-test {name} v{version}: {reason}", model=name, version=version
        )


class SloRequiredError(RegistryError):
    code = "slo_required"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"model '{name}' has no SLO: set one, or pass slo_p95_ms with the tuning", model=name
        )


class JobNotFoundError(RegistryError):
    code = "job_not_found"

    def __init__(self, kind: str, job_id: int) -> None:
        super().__init__(f"{kind} {job_id} does not exist here", kind=kind, id=job_id)


class SampleInputNotFoundError(RegistryError):
    code = "sample_input_not_found"

    def __init__(self, name: str, version: int, sample_id: int) -> None:
        super().__init__(
            f"{name} v{version} has no sample input {sample_id}",
            model=name,
            version=version,
            id=sample_id,
        )


class JobStateError(RegistryError):
    """A move the job's state does not allow (apply an unfinished tuning, cancel a finished one)."""

    code = "invalid_job_state"

    def __init__(self, kind: str, job_id: int, *, state: str, action: str) -> None:
        super().__init__(
            f"cannot {action} {kind} {job_id}: it is {state}",
            kind=kind,
            id=job_id,
            state=state,
            action=action,
        )


class NothingToApplyError(RegistryError):
    code = "nothing_to_apply"

    def __init__(self, job_id: int, why: str) -> None:
        super().__init__(f"tuning {job_id} recommends no setting: {why}", id=job_id)


class TuningParameterError(RegistryError):
    code = "invalid_parameters"

    def __init__(self, message: str) -> None:
        super().__init__(message)
