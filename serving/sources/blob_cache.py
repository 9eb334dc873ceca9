"""The replica's local artifact cache: verified blobs, and model folders built from them.

Blobs are stored once under ``blobs/<sha256>`` after their checksum was verified while copying; a
version's folder (``models/<model>/<key>/``) links them in Triton layout, so backends load an
ordinary model folder. Nothing here touches Django: blobs arrive through an ``open_blob`` callable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from serving.errors import UnavailableError

CHUNK_BYTES = 1024 * 1024


class BlobRefLike(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...


class CorruptBlobError(UnavailableError):
    """A blob's content does not match its sha256; it is refused, never served."""


class BlobCache:
    """Materialises registry versions into local Triton-layout folders."""

    def __init__(self, root: Path, open_blob: Callable[[str], BinaryIO]) -> None:
        self.root = root
        self.open_blob = open_blob
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "models").mkdir(parents=True, exist_ok=True)

    def blob(self, ref: BlobRefLike, *, what: str) -> Path:
        """The verified local copy of a blob, fetched on first use."""
        target = self.root / "blobs" / ref.sha256
        if target.is_file() and target.stat().st_size == ref.size:
            return target
        partial = target.with_name(f"{ref.sha256}.{os.getpid()}.partial")
        digest = hashlib.sha256()
        size = 0
        with self.open_blob(ref.sha256) as src, partial.open("wb") as dst:
            while chunk := src.read(CHUNK_BYTES):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        if digest.hexdigest() != ref.sha256 or size != ref.size:
            partial.unlink(missing_ok=True)
            raise CorruptBlobError(
                f"{what}: blob {ref.sha256[:12]} is corrupt (sha256 {digest.hexdigest()[:12]}, "
                f"{size} bytes; expected {ref.size} bytes); refusing to load it"
            )
        partial.replace(target)
        return target

    def model_folder(
        self,
        *,
        model: str,
        version: int,
        key: str,
        files: Iterable[BlobRefLike],
        model_files: Iterable[BlobRefLike],
    ) -> Path:
        """``models/<model>/<key>/`` holding the model-level files and ``<version>/`` files."""
        model_dir = self.root / "models" / model / key
        done = model_dir / ".complete"
        if done.is_file():
            return model_dir
        shutil.rmtree(model_dir, ignore_errors=True)
        version_dir = model_dir / str(version)
        version_dir.mkdir(parents=True)
        for base, refs in ((version_dir, files), (model_dir, model_files)):
            for ref in refs:
                target = (base / ref.path).resolve()
                if not target.is_relative_to(base.resolve()):
                    raise UnavailableError(
                        f"{model} v{version}: file '{ref.path}' escapes its folder"
                    )
                source = self.blob(ref, what=f"model '{model}' version {version} file '{ref.path}'")
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(source, target)
        done.touch()
        return model_dir

    def prune(self, model: str, keep: set[str]) -> None:
        """Remove a model's folders that no current version uses."""
        folder = self.root / "models" / model
        if not folder.is_dir():
            return
        for child in folder.iterdir():
            if child.name not in keep:
                shutil.rmtree(child, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
