"""The replica's local artifact cache: verified blobs, and model folders built from them.

Blobs are stored once under ``blobs/<sha256>`` after their checksum was verified while copying; a
version's folder (``models/<model>/<key>/``) holds read-only copies of them in Triton layout, so
backends load an ordinary model folder. Nothing here touches Django: blobs arrive through an
``open_blob`` callable.

Model code runs as the server's user, so the cache trusts nothing it finds on disk: the folder must
be private (0700, this user's), a blob cached by an earlier process is hashed again before this
process first uses it, and each model folder is built afresh once per process from verified blobs.
Folders get copies, never links: a model writing to its own files cannot reach a shared blob.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from serving.errors import UnavailableError

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
_READ_ONLY = 0o444


class BlobRefLike(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...


class CorruptBlobError(UnavailableError):
    """A blob's content does not match its sha256; it is refused, never served."""


class UnsafeCacheDirError(UnavailableError):
    """The cache folder is another user's, or others may read or write it."""


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if missing; refused when it is not a private folder of this user."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    problem = ""
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a folder"
    elif info.st_uid != os.geteuid():
        problem = f"belongs to uid {info.st_uid}, not this process's uid {os.geteuid()}"
    elif info.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}; it must be 700 (chmod 700 it)"
    if problem:
        raise UnsafeCacheDirError(f"serving cache folder '{path}' {problem}; refusing to use it")
    return path


class BlobCache:
    """Materialises registry versions into local Triton-layout folders."""

    def __init__(self, root: Path, open_blob: Callable[[str], BinaryIO]) -> None:
        self.root = private_dir(root)
        self.open_blob = open_blob
        private_dir(root / "blobs")
        private_dir(root / "models")
        self._verified: set[str] = set()  # blobs hashed by this process
        self._built: set[Path] = set()  # model folders built by this process

    def blob(self, ref: BlobRefLike, *, what: str) -> Path:
        """The verified local copy of a blob, fetched (or hashed again) on first use."""
        target = self.root / "blobs" / ref.sha256
        if target.is_file() and (ref.sha256 in self._verified or self._still_intact(target, ref)):
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
        partial.chmod(_READ_ONLY)
        partial.replace(target)
        self._verified.add(ref.sha256)
        return target

    def _still_intact(self, target: Path, ref: BlobRefLike) -> bool:
        """Hash a blob an earlier process cached; a changed one is removed (then fetched again)."""
        if _file_digest(target) == (ref.sha256, ref.size):
            self._verified.add(ref.sha256)
            return True
        logger.warning("cached blob %s was changed on disk; fetching it again", ref.sha256[:12])
        target.unlink(missing_ok=True)
        return False

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
        if model_dir in self._built and done.is_file():
            return model_dir
        _remove_tree(model_dir)
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
                _copy_read_only(source, target)
        done.touch()
        self._built.add(model_dir)
        return model_dir

    def prune(self, model: str, keep: set[str]) -> None:
        """Remove a model's folders that no current version uses."""
        folder = self.root / "models" / model
        if not folder.is_dir():
            return
        for child in folder.iterdir():
            if child.name not in keep:
                _remove_tree(child)


def _remove_tree(path: Path) -> None:
    """Remove a model folder, even one whose model made its folders read-only."""

    def unlock_and_retry(function: Callable[[str], object], name: str, _: object) -> None:
        os.chmod(os.path.dirname(name), 0o700)
        function(name)

    if path.is_dir():
        shutil.rmtree(path, onerror=unlock_and_retry)


def _copy_read_only(source: Path, target: Path) -> None:
    # NOTE: a copy, never a hard link: a model that chmods and rewrites its own file must not
    # change the blob other versions are built from.
    shutil.copyfile(source, target)
    target.chmod(_READ_ONLY)


def _file_digest(path: Path) -> tuple[str, int]:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest(), os.fstat(f.fileno()).st_size
