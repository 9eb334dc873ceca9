"""The environment a process running model code gets: allow-listed variables only.

Model code (a Python model's process, its ``auto_complete_config``, a validation check) must not
see the platform's secrets: database URLs, ``SECRET_KEY``, Redis, storage keys, cloud credentials.
Rather than removing what is known to be secret, only what a runtime needs is kept: locale, the
search path, thread and GPU selection. Pure standard library, so serving and the registry can both
import it.
"""

from __future__ import annotations

from collections.abc import Mapping

# Kept as they are: what an interpreter and numeric or GPU runtimes read.
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "LD_LIBRARY_PATH",
    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING",
    "PYTHONFAULTHANDLER", "VIRTUAL_ENV",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
})  # fmt: skip
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUBLAS_", "CUDNN_", "NCCL_", "TRT_")

# NOTE: dropped even when a prefix above matches (e.g. a credential someone named NVIDIA_API_KEY).
_SECRET_MARKERS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "KEY", "AUTH")


def allowed(name: str) -> bool:
    """Whether variable ``name`` may reach model code."""
    upper = name.upper()
    if any(marker in upper for marker in _SECRET_MARKERS):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def child_env(
    source: Mapping[str, str], *, home: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed part of ``source`` with ``HOME`` set to ``home`` plus ``extra``.

    ``extra`` is what the caller itself sets (``PYTHONPATH`` for the stub); it is not filtered.
    """
    env = {name: value for name, value in source.items() if allowed(name)}
    env["HOME"] = home
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra or {})
    return env
