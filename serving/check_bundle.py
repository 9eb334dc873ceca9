"""``python -m serving.check --bundle-stdin``: the check as its own pod, fed over stdin.

The pod has no network and no shared volume, so the version arrives as a bundle on stdin
(``repository.config.check_wire``): it is unpacked into ``--scratch`` with only plain files and
folders allowed (no absolute names, no ``..``, no links or devices) and within
``--max-bundle-bytes``, then checked exactly as ``--model-dir`` would be. Steps and the report go
out as frames on the real stdout; everything else (model prints, subprocesses, log lines) is moved
to stderr before any uploaded byte is parsed.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any

from repository.config.check_wire import (
    MANIFEST_NAME,
    MAX_HEADER_BYTES,
    WireError,
    frame,
    parse_bundle_header,
)

MAX_MEMBERS = 10_000
CHUNK_BYTES = 1 << 20
# ``--rlimit NAME=VALUE``: the bubblewrap runner's per-process limits, which a pod's cgroup does
# not give (process counts are left to the pod's PID limit: RLIMIT_NPROC would count every process
# of the same user on the node).
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
}


class BundleRefused(Exception):
    """The bundle breaks a rule; the message names the member and the rule."""


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
    try:
        nonce, size = parse_bundle_header(stdin.readline(MAX_HEADER_BYTES))
    except WireError as error:
        sys.stderr.write(f"serving.check: {error}\n")
        return 2

    def emit(step: dict[str, Any]) -> None:
        out.write(frame(nonce, "step", step))
        out.flush()

    try:
        if size > max_bytes:
            raise BundleRefused(f"the bundle is {size} bytes, over the limit of {max_bytes}")
        root = scratch / "bundle"
        root.mkdir(parents=True)
        _unpack(_Exactly(stdin, size), root, max_bytes=max_bytes)
        manifest = _manifest(root)
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


def private_stdout() -> IO[bytes]:
    """The process's stdout for frames only; fd 1 (inherited by everything the model starts) then
    points at stderr. The duplicate is not inheritable, so child processes never hold it."""
    sys.stdout.flush()
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return frames


class _Exactly:
    """A reader that ends after ``size`` bytes of ``stream``, or fails if the stream ends first."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self._stream = stream
        self._left = size

    def read(self, n: int = -1) -> bytes:
        want = self._left if n < 0 else min(n, self._left)
        if want == 0:
            return b""
        data = self._stream.read(want)
        if not data:
            raise BundleRefused(f"the bundle ended {self._left} bytes early")
        self._left -= len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK_BYTES):
            pass


def _unpack(source: _Exactly, root: Path, *, max_bytes: int) -> None:
    total = 0
    try:
        with tarfile.open(fileobj=source, mode="r|") as archive:  # type: ignore[call-overload]
            for count, member in enumerate(archive, start=1):
                if count > MAX_MEMBERS:
                    raise BundleRefused(f"the bundle has more than {MAX_MEMBERS} members")
                target = _target(root, member)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += member.size
                if total > max_bytes:
                    raise BundleRefused(f"the bundle's files exceed {max_bytes} bytes")
                _write(archive, member, target)
    except tarfile.TarError as error:
        raise BundleRefused(f"the bundle is not a readable tar: {error}") from None
    except OSError as error:
        raise BundleRefused(f"the bundle could not be unpacked: {error}") from None
    source.drain()  # the tar's end padding


def _target(root: Path, member: tarfile.TarInfo) -> Path:
    name = member.name
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise BundleRefused(f"member '{name}': names must be relative and stay inside the bundle")
    if not (member.isreg() or member.isdir()):
        raise BundleRefused(f"member '{name}': only plain files and folders are allowed")
    return root.joinpath(*path.parts)


def _write(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # NOTE: O_EXCL and O_NOFOLLOW: a second member of the same name, or anything already there,
    # is refused rather than written through.
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise BundleRefused(f"member '{member.name}': appears twice") from None
    data = archive.extractfile(member)
    assert data is not None
    with os.fdopen(fd, "wb") as dst:
        while chunk := data.read(CHUNK_BYTES):
            dst.write(chunk)


def _manifest(root: Path) -> dict[str, Path | None]:
    """``check.json``: which unpacked paths are the model folder, the version folder, the
    config and the golden requests. Every path must be one the bundle brought."""
    try:
        data = json.loads((root / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise BundleRefused(f"{MANIFEST_NAME}: {error}") from None
    if not isinstance(data, dict):
        raise BundleRefused(f"{MANIFEST_NAME}: not an object")
    paths: dict[str, Path | None] = {}
    for key, required in (("model_dir", True), ("version_dir", True), ("config", False),
                          ("golden", False)):  # fmt: skip
        value = data.get(key)
        if value is None and not required:
            paths[key] = None
            continue
        if not isinstance(value, str):
            raise BundleRefused(f"{MANIFEST_NAME}: '{key}' must be a path in the bundle")
        path = (root / value).resolve()
        if not path.is_relative_to(root.resolve()) or not path.exists() or path.is_symlink():
            raise BundleRefused(f"{MANIFEST_NAME}: '{key}' is not a path the bundle brought")
        paths[key] = path
    return paths
