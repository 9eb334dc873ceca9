"""The check child's environment: an allow-list, never the worker's own variables.

The worker holds ``DATABASE_URL``, ``SECRET_KEY``, ``REDIS_URL``, storage and cloud credentials;
none of them is copied. The allow-list is the one every process running model code gets
(``repository.config.child_env``); on top of it the values below are fixed, and the names an admin
lists in ``PORTICO_VALIDATION_SANDBOX_PASS_ENV`` are copied (a test's scripted check).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from repository.config.child_env import child_env

# The same for every check; PYTHONPATH, HOME and TMPDIR are the caller's (the sandbox's view).
FIXED = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}


def check_env(
    *, pythonpath: str, home: str, tmpdir: str, pass_env: Iterable[str] = ()
) -> dict[str, str]:
    """The complete environment of the check child."""
    extra = {**FIXED, "PYTHONPATH": pythonpath, "TMPDIR": tmpdir}
    env = child_env(os.environ, home=home, extra=extra)
    for name in pass_env:
        if name in os.environ:
            env[name] = os.environ[name]
    return env
