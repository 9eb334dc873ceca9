"""The bundle a check pod reads on stdin: one version's files, re-hashed against the registry as
they are packed, plus the worker's config and golden requests and the manifest naming them.

The files were copied out of the blob store with their checksums verified; they are hashed again
here, as the bytes go into the tar, so what leaves the worker is exactly what the registry holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from repository.config.check_wire import MANIFEST_NAME
from repository.errors import BlobIntegrityError

if TYPE_CHECKING:
    from repository.validation.runner import CheckInput

CHUNK_BYTES = 1 << 20


def bundle_write(check: CheckInput, target: IO[bytes]) -> None:
    """Write the tar for ``check`` to ``target``; ``BlobIntegrityError`` if a file changed."""
    root = check.input_dir
    with tarfile.open(fileobj=target, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for folder in (check.model_dir, check.version_dir):
            tar.addfile(_dir_info(_relative(root, folder)))
        for rel, sha256 in check.files:
            _add_verified(tar, root / rel, rel, sha256)
        for extra in (check.config_file, check.golden_file):
            if extra is not None:  # written by the worker itself, from its own database rows
                _add_bytes(tar, _relative(root, extra), extra.read_bytes())
        _add_bytes(tar, MANIFEST_NAME, json.dumps(_manifest(check)).encode())


def _manifest(check: CheckInput) -> dict[str, str | None]:
    root = check.input_dir

    def rel(path: Path | None) -> str | None:
        return _relative(root, path) if path is not None else None

    return {
        "model_dir": rel(check.model_dir),
        "version_dir": rel(check.version_dir),
        "config": rel(check.config_file),
        "golden": rel(check.golden_file),
    }


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


class _Hashing:
    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._stream.read(n)
        self.digest.update(data)
        return data


def _add_verified(tar: tarfile.TarFile, path: Path, rel: str, sha256: str) -> None:
    info = tarfile.TarInfo(rel)
    info.size = path.stat().st_size
    info.mode = 0o644
    with path.open("rb") as src:
        hashing = _Hashing(src)
        tar.addfile(info, hashing)  # type: ignore[arg-type]
    if hashing.digest.hexdigest() != sha256:
        raise BlobIntegrityError(sha256, hashing.digest.hexdigest())


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info
