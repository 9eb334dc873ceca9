"""The registry's domain errors. Each has a stable ``code`` and structured ``extra`` fields; none
knows about HTTP (the API maps codes to status codes in one table)."""

from __future__ import annotations

from typing import Any


class RegistryError(Exception):
    """Base of every registry error: ``code`` is stable, ``extra`` is JSON-serialisable."""

    code = "registry_error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class ModelNotFoundError(RegistryError):
    code = "model_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"model '{name}' does not exist", model=name)


class VersionNotFoundError(RegistryError):
    code = "version_not_found"

    def __init__(self, name: str, version: int) -> None:
        super().__init__(f"model '{name}' has no version {version}", model=name, version=version)


class InvalidStateError(RegistryError):
    """A state move that the current state does not allow (promote a failed version...)."""

    code = "invalid_state"

    def __init__(
        self, name: str, version: int, *, state: str, action: str, allowed: list[str]
    ) -> None:
        super().__init__(
            f"cannot {action} {name} v{version}: it is {state} "
            f"(allowed from: {', '.join(allowed)})",
            model=name,
            version=version,
            state=state,
            action=action,
            allowed=allowed,
        )


class ApprovalRequiredError(RegistryError):
    code = "approval_required"

    def __init__(self, name: str, version: int) -> None:
        super().__init__(
            f"{name} v{version} carries Python code and must be approved before it is promoted",
            model=name,
            version=version,
        )


class SelfApprovalError(RegistryError):
    code = "self_approval"

    def __init__(self, name: str, version: int, user: str) -> None:
        super().__init__(
            f"{name} v{version} was uploaded by {user}; someone else must approve it",
            model=name,
            version=version,
            user=user,
        )


class CodeUploaderApprovalError(RegistryError):
    """The approver uploaded some of the version's code (in this version or the one a config
    change was derived from): a second person has to look at it."""

    code = "code_uploader_approval"

    def __init__(self, name: str, version: int, user: str) -> None:
        super().__init__(
            f"{name} v{version} carries code that {user} uploaded; "
            "an admin who uploaded none of its files must approve it",
            model=name,
            version=version,
            user=user,
        )


class ApprovedCodeChangedError(RegistryError):
    """A version's files are no longer the ones approved: it may not be promoted or served."""

    code = "approved_code_changed"

    def __init__(self, name: str, version: int, changed: list[str]) -> None:
        super().__init__(
            f"{name} v{version}: files differ from the ones approved ({', '.join(changed)}); "
            "it cannot be promoted or served",
            model=name,
            version=version,
            changed=changed,
        )


class ImportApproverError(RegistryError):
    """``import_repository --approved-by`` names someone who cannot vouch for the code."""

    code = "import_approver"

    def __init__(self, user: str, reason: str) -> None:
        super().__init__(f"--approved-by {user}: {reason}", user=user, reason=reason)


class ApprovalNotNeededError(RegistryError):
    code = "approval_not_needed"

    def __init__(self, name: str, version: int) -> None:
        super().__init__(
            f"{name} v{version} carries no code and needs no approval", model=name, version=version
        )


class PermissionDeniedError(RegistryError):
    code = "permission_denied"

    def __init__(self, action: str, role: str) -> None:
        super().__init__(f"{action} needs the {role} role", action=action, role=role)


class LastAdminError(RegistryError):
    """Lowering this role would leave nobody able to manage roles, tokens or approvals."""

    code = "last_admin"

    def __init__(self, user: str, role: str) -> None:
        super().__init__(
            f"{user} is the last admin; make someone else admin before making {user} {role}",
            user=user,
            role=role,
        )


class SuperuserRoleError(RegistryError):
    code = "superuser_role"

    def __init__(self, user: str) -> None:
        super().__init__(
            f"{user} is a superuser and so holds every role; change that in the Django admin",
            user=user,
        )


class NothingToRollBackError(RegistryError):
    code = "nothing_to_roll_back"

    def __init__(self, name: str, current: int | None) -> None:
        what = f"v{current} is promoted" if current else "no version is promoted"
        super().__init__(
            f"model '{name}' has no earlier promoted version to roll back to ({what})",
            model=name,
            current=current,
        )


class UploadError(RegistryError):
    """An upload that cannot become a version: bad archive, unsafe entry, too large, no files."""

    code = "invalid_upload"

    def __init__(self, message: str, *, reason: str, **extra: Any) -> None:
        super().__init__(message, reason=reason, **extra)
        self.reason = reason


class UploadTooLargeError(UploadError):
    code = "upload_too_large"

    def __init__(self, message: str, *, limit_bytes: int) -> None:
        super().__init__(message, reason="too_large", limit_bytes=limit_bytes)


class InvalidModelNameError(RegistryError):
    code = "invalid_model_name"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"'{name}' is not a valid model name (letters, digits, '_', '-', '.'; no path)",
            model=name,
        )


class GoldenRequestNotFoundError(RegistryError):
    code = "golden_not_found"

    def __init__(self, name: str, golden_id: int) -> None:
        super().__init__(
            f"model '{name}' has no golden request {golden_id}", model=name, golden_id=golden_id
        )


class GoldenRequestError(RegistryError):
    code = "invalid_golden_request"


class TokenOutranksUserError(RegistryError):
    """A token acts with the lower of its role and its user's, so a higher one would mislead."""

    code = "token_outranks_user"

    def __init__(self, user: str, held: str | None, role: str) -> None:
        super().__init__(
            f"user '{user}' holds role {held or 'none'}; a token cannot carry more ({role})",
            user=user,
            held=held,
            role=role,
        )


class TokenSettingsError(RegistryError):
    """A token's scope, quotas or expiry that cannot hold (every problem listed)."""

    code = "invalid_token_settings"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems), problems=problems)


class TokenForAnotherUserError(RegistryError):
    """A token for someone else carries more than viewing: whoever holds it could act (and
    approve) as that person."""

    code = "token_for_another_user"

    def __init__(self, actor: str, user: str, role: str, allowed: list[str]) -> None:
        super().__init__(
            f"{actor} may create a token for {user} only with the role "
            f"{' or '.join(allowed)}, not {role}; {user} creates their own",
            actor=actor,
            user=user,
            role=role,
            allowed=allowed,
        )


class TokenInvalidError(RegistryError):
    code = "invalid_token"

    def __init__(self) -> None:
        super().__init__("the API token is unknown, revoked or expired")


class BlobIntegrityError(RegistryError):
    code = "blob_corrupt"

    def __init__(self, sha256: str, actual: str) -> None:
        super().__init__(
            f"blob {sha256[:12]} does not match its checksum (got {actual[:12]})",
            sha256=sha256,
            actual=actual,
        )
