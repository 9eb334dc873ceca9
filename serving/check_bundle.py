"""``python -m serving.check --bundle-stdin``: the check as its own pod, fed over stdin.

The pod has no network and no shared volume, so the version arrives as a bundle on stdin
(``repository.config.check_wire``): it is unpacked into ``--scratch`` with only plain files and
folders allowed (no absolute names, no ``..``, no links or devices) and within
``--max-bundle-bytes``, then checked exactly as ``--model-dir`` would be. Steps and the report go
out as frames on the real stdout; everything else (model prints, subprocesses, log lines) is moved
to stderr before any uploaded byte is parsed.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from repository.config.bundle_unpack import (
    BundleRefused,
    bundle_header_read,
    bundle_receive,
    frame_writer,
)
from repository.config.check_wire import frame

# ``--rlimit NAME=VALUE``: the bubblewrap runner's per-process limits, which a pod's cgroup does
# not give (process counts are left to the pod's PID limit: RLIMIT_NPROC would count every process
# of the same user on the node).
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
}


def bundle_main(
    stdin: IO[bytes],
    out: IO[bytes],
    *,
    scratch: Path,
    max_bytes: int,
    run_check: Callable[..., dict[str, Any]],
    rlimits: list[tuple[int, int]] | None = None,
) -> int:
    """Read, unpack and check one bundle; 0 when every step passed, 1 otherwise, 2 when the input
    is not a bundle at all (no nonce to frame an answer with)."""
    header = bundle_header_read(stdin, program="serving.check")
    if header is None:
        return 2
    nonce, size = header
    emit = frame_writer(out, nonce)
    try:
        root, manifest = bundle_receive(stdin, size, scratch, max_bytes=max_bytes)
        # NOTE: after unpacking: a model file may be larger than the file-size limit allows the
        # model to write; from here on, everything runs under the limits.
        for which, value in rlimits or []:
            resource.setrlimit(which, (value, value))
        report = run_check(root=root, manifest=manifest, emit=emit)
    except BundleRefused as refused:
        step = {"name": "bundle", "status": "failed", "message": str(refused), "duration_ms": 0}
        emit(step)
        report = {"ok": False, "steps": [step]}
    out.write(frame(nonce, "report", report))
    out.flush()
    return 0 if report.get("ok") else 1


def parse_rlimit(text: str) -> tuple[int, int]:
    """``"nofile=4096"`` as ``(resource.RLIMIT_NOFILE, 4096)``; ValueError when it is not one."""
    name, _, value = text.partition("=")
    if name not in RLIMITS or not value.isdigit():
        raise ValueError(f"--rlimit {text}: expected one of {sorted(RLIMITS)}=<number>")
    return RLIMITS[name], int(value)
