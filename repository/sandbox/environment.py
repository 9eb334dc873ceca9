"""The check child's environment: an allow-list, never the worker's own variables.

The worker holds ``DATABASE_URL``, ``SECRET_KEY``, ``REDIS_URL``, storage and cloud credentials;
none of them is copied. Only the names below are set, plus the ones an admin names in
``PORTICO_VALIDATION_SANDBOX_PASS_ENV`` (GPU selection, a test's scripted check).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# Values that are the same for every check; HOME and TMPDIR point at the private scratch folder.
FIXED = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}
# Harmless selectors passed through when the worker has them (which GPU, how many threads).
PASSED_IF_SET = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def check_env(
    *, pythonpath: str, home: str, tmpdir: str, pass_env: Iterable[str] = ()
) -> dict[str, str]:
    """The complete environment of the check child."""
    env = dict(FIXED, PYTHONPATH=pythonpath, HOME=home, TMPDIR=tmpdir)
    for name in (*PASSED_IF_SET, *pass_env):
        if name in os.environ and name not in env:
            env[name] = os.environ[name]
    return env
