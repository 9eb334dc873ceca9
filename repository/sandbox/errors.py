"""Why the sandbox could not be set up, worded for the person who has to fix it."""

from __future__ import annotations

from repository.errors import RegistryError


class SandboxUnavailableError(RegistryError):
    """bubblewrap is missing or cannot create its namespaces; validation fails closed."""

    code = "sandbox_unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the validation sandbox is unavailable: {reason}. Install bubblewrap "
            "(apt-get install bubblewrap, or `make install`) and allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu also "
            "kernel.apparmor_restrict_unprivileged_userns=0); or point "
            "PORTICO_VALIDATION_BWRAP_PATH at a working bwrap",
            reason=reason,
        )
