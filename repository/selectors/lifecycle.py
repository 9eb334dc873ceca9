"""Which moves a version's state allows, and to whom: the rules the promotion services enforce,
read here too so a page offers exactly the actions those services would accept."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from repository.models import ModelVersion, Role, VersionState
from repository.selectors.approvals import user_may_approve
from repository.selectors.roles import role_rank, user_role

PROMOTABLE_STATES = (VersionState.READY, VersionState.RETIRED)
APPROVABLE_STATES = (
    VersionState.UPLOADED,
    VersionState.VALIDATING,
    VersionState.READY,
    VersionState.RETIRED,
)


def model_rollback_target(*, promoted: ModelVersion | None) -> ModelVersion | None:
    """The version a rollback from ``promoted`` re-promotes: the retired one it replaced."""
    target = promoted.previous_promoted if promoted is not None else None
    return target if target is not None and target.state == VersionState.RETIRED else None


def model_version_allowed_actions(*, version: ModelVersion, user: Any) -> dict[str, bool]:
    """``promote`` / ``approve``: whether ``user`` may do it now; ``awaits_approval``: code
    not yet reviewed. The services check again (and say why) when an action is taken."""
    return model_versions_allowed_actions(versions=[version], user=user)[version.pk]


def model_versions_allowed_actions(
    *, versions: Iterable[ModelVersion], user: Any
) -> dict[int, dict[str, bool]]:
    """``model_version_allowed_actions`` for many versions by id, reading the user's role once."""
    role = user_role(user)
    deployer = role is not None and role_rank(role) >= role_rank(Role.DEPLOYER)
    admin = role == Role.ADMIN
    return {v.pk: _allowed(v, user, deployer=deployer, admin=admin) for v in versions}


def _allowed(version: ModelVersion, user: Any, *, deployer: bool, admin: bool) -> dict[str, bool]:
    awaits_approval = version.needs_approval and not version.approved
    return {
        "promote": deployer and version.state in PROMOTABLE_STATES and not awaits_approval,
        "approve": admin
        and awaits_approval
        and version.state in APPROVABLE_STATES
        and user_may_approve(version=version, user=user),
        "awaits_approval": awaits_approval,
    }
