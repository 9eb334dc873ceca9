"""The edge table: which HTTP status each registry error answers with.

Keyed by error class; the first class along the raised error's MRO that the table names wins, so a
new subclass inherits its parent's status. Any other ``RegistryError`` is a rejected request (400):
bad input never becomes a 500.
"""

from __future__ import annotations

from rest_framework import status

from repository import errors
from repository.tuning import errors as tuning_errors
from repository.tuning.sample_inputs import SampleInputTooLargeError

_TABLE: dict[type[errors.RegistryError], int] = {
    errors.ModelNotFoundError: status.HTTP_404_NOT_FOUND,
    errors.VersionNotFoundError: status.HTTP_404_NOT_FOUND,
    errors.GoldenRequestNotFoundError: status.HTTP_404_NOT_FOUND,
    errors.InvalidStateError: status.HTTP_409_CONFLICT,
    errors.ApprovalRequiredError: status.HTTP_409_CONFLICT,
    errors.NothingToRollBackError: status.HTTP_409_CONFLICT,
    errors.ApprovalNotNeededError: status.HTTP_409_CONFLICT,
    errors.SelfApprovalError: status.HTTP_403_FORBIDDEN,
    errors.CodeUploaderApprovalError: status.HTTP_403_FORBIDDEN,
    errors.PermissionDeniedError: status.HTTP_403_FORBIDDEN,
    errors.TokenInvalidError: status.HTTP_401_UNAUTHORIZED,
    errors.UploadTooLargeError: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    errors.UploadError: status.HTTP_400_BAD_REQUEST,
    errors.InvalidModelNameError: status.HTTP_400_BAD_REQUEST,
    errors.GoldenRequestError: status.HTTP_400_BAD_REQUEST,
    errors.BlobIntegrityError: status.HTTP_409_CONFLICT,
    errors.LastAdminError: status.HTTP_409_CONFLICT,
    errors.SuperuserRoleError: status.HTTP_409_CONFLICT,
    errors.TokenOutranksUserError: status.HTTP_400_BAD_REQUEST,
    errors.TokenForAnotherUserError: status.HTTP_403_FORBIDDEN,
    errors.ApprovedCodeChangedError: status.HTTP_409_CONFLICT,
    tuning_errors.JobNotFoundError: status.HTTP_404_NOT_FOUND,
    tuning_errors.LoadTestNotAllowedError: status.HTTP_409_CONFLICT,
    tuning_errors.JobStateError: status.HTTP_409_CONFLICT,
    tuning_errors.NothingToApplyError: status.HTTP_409_CONFLICT,
    tuning_errors.SloRequiredError: status.HTTP_400_BAD_REQUEST,
    tuning_errors.SampleInputNotFoundError: status.HTTP_404_NOT_FOUND,
    SampleInputTooLargeError: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
}


def domain_error_status(exc: Exception) -> int | None:
    """The status for a registry error, ``None`` when ``exc`` is not one."""
    if not isinstance(exc, errors.RegistryError):
        return None
    for klass in type(exc).__mro__:
        found = _TABLE.get(klass)  # type: ignore[call-overload]
        if found is not None:
            return found
    return status.HTTP_400_BAD_REQUEST
