"""Can bubblewrap create its namespaces here? Asked before every check, so a broken host fails
each validation with the reason instead of running the model unconfined."""

from __future__ import annotations

import os
import subprocess

from repository.sandbox.errors import SandboxUnavailableError
from repository.sandbox.policy import SandboxPolicy

PROBE_TIMEOUT_S = 30
STDERR_CHARS = 300


def sandbox_probe(policy: SandboxPolicy) -> None:
    """Raise ``SandboxUnavailableError`` unless ``bwrap`` runs a command in fresh namespaces."""
    path = policy.bwrap_path
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SandboxUnavailableError(f"{path} is not an executable file")
    cmd = [
        str(path),
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--",
        "/bin/true",
    ]
    try:
        result = subprocess.run(
            cmd, capture_output=True, timeout=PROBE_TIMEOUT_S, env={}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailableError(f"{path} could not be run: {exc}") from None
    if result.returncode != 0:
        why = result.stderr.decode("utf-8", "replace").strip()[-STDERR_CHARS:]
        raise SandboxUnavailableError(f"{path} failed ({why or f'status {result.returncode}'})")
