"""Safe unpacking of a bundle read from stdin, and a stdout kept for frames: shared by every pod
that is fed a version over its attached stdin (the check, ``serving.check_bundle``, and the load
test, ``repository.tuning.pod``). Pure standard library.

Only plain files and folders are unpacked (no absolute names, no ``..``, no links or devices, no
member twice), within a byte and a member budget.
"""

from __future__ import annotations

import json
import os
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


class BundleRefused(Exception):
    """The bundle breaks a rule; the message names the member and the rule."""


def bundle_header_read(stdin: IO[bytes], *, program: str) -> tuple[str, int] | None:
    """The header's ``(nonce, size)``; None, said on stderr, when the input is not a bundle (there
    is no nonce to frame an answer with)."""
    try:
        return parse_bundle_header(stdin.readline(MAX_HEADER_BYTES))
    except WireError as error:
        sys.stderr.write(f"{program}: {error}\n")
        return None


def frame_writer(out: IO[bytes], nonce: str) -> Callable[[dict[str, Any]], None]:
    """Write one ``step`` frame and flush it, so the worker sees it at once."""

    def emit(payload: dict[str, Any]) -> None:
        out.write(frame(nonce, "step", payload))
        out.flush()

    return emit


def bundle_receive(
    stream: IO[bytes], size: int, scratch: Path, *, max_bytes: int
) -> tuple[Path, dict[str, Path | None]]:
    """Unpack the ``size``-byte tar at the head of ``stream`` into ``scratch/bundle``; that folder
    and its manifest's paths (``bundle_manifest``)."""
    if size > max_bytes:
        raise BundleRefused(f"the bundle is {size} bytes, over the limit of {max_bytes}")
    root = scratch / "bundle"
    root.mkdir(parents=True)
    _unpack(_Exactly(stream, size), root, max_bytes=max_bytes)
    return root, bundle_manifest(root)


def private_stdout() -> IO[bytes]:
    """The process's stdout for frames only; fd 1 (inherited by everything the model starts) then
    points at stderr. The duplicate is not inheritable, so child processes never hold it."""
    sys.stdout.flush()
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return frames


def bundle_manifest(root: Path) -> dict[str, Path | None]:
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
