"""Run ``python -m serving.check`` on uploaded bytes inside bubblewrap.

Everything that parses or runs a version before a person approved it goes through here: the
check child sees an allow-listed environment, no network, the interpreter and the modules it
needs read-only, a read-only copy of the one version it checks and a size-bounded scratch folder;
it runs under resource limits in its own PID namespace, so every process it starts dies with it.
Where bubblewrap cannot be set up, ``SandboxUnavailableError`` says why and how to fix it.
"""

from repository.sandbox.command import SandboxLayout, sandboxed_argv
from repository.sandbox.errors import SandboxUnavailableError
from repository.sandbox.limits import CheckLimits
from repository.sandbox.policy import SandboxPolicy, sandbox_disabled
from repository.sandbox.probe import sandbox_probe

__all__ = [
    "CheckLimits",
    "SandboxLayout",
    "SandboxPolicy",
    "SandboxUnavailableError",
    "sandbox_disabled",
    "sandbox_probe",
    "sandboxed_argv",
]
