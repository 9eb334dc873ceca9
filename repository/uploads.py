"""Upload intake: turn an archive, a single file or a set of files into a staged version folder.

Accepted shapes (see docs/uploads.md):

- an archive (.zip, .tar.gz, .tar) of a Triton model folder: ``config.pbtxt`` optional at its root,
  the version's files at its root or under one numeric folder (``1/model.onnx``); other root files
  and folders (labels, ``warmup/``) are model-level files. A single top-level folder wrapping all of
  that (``mymodel/...``) is unwrapped.
- one model file (its name kept) plus optional ``config.pbtxt`` text.
- separate files with their relative paths, laid out as in an archive.

Everything is streamed to a private staging folder under ``settings.UPLOAD_DIR`` with the sizes
counted as they are written (headers are never trusted), and the folder is removed on any error so a
rejected upload leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from django.conf import settings

from repository.errors import UploadError, UploadTooLargeError

CHUNK_BYTES = 1024 * 1024
CONFIG_NAME = "config.pbtxt"
MAX_ENTRIES = 10_000
# Triton never treats these as version folders (PROTOCOL.md §4.1).
MODEL_LEVEL_DIRS = frozenset({"warmup", "initial_state", "configs"})


@dataclasses.dataclass(frozen=True)
class StagedFile:
    """A staged file: ``path`` relative to the version (or model) folder, ``source`` on disk."""

    path: str
    source: Path


@dataclasses.dataclass
class StagedUpload:
    """An upload laid out on disk, ready to become a version. Call ``cleanup()`` when done."""

    root: Path
    config_text: str | None
    version_files: list[StagedFile]
    model_files: list[StagedFile]
    version_hint: int | None = None

    @property
    def size(self) -> int:
        return sum(f.source.stat().st_size for f in [*self.version_files, *self.model_files])

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def max_upload_bytes() -> int:
    return int(settings.PORTICO_MAX_UPLOAD_BYTES)


def max_unpacked_bytes() -> int:
    # A decompressed-size cap is what stops a zip bomb; default: twice the upload limit.
    return int(getattr(settings, "PORTICO_MAX_UNPACKED_BYTES", 2 * max_upload_bytes()))


def _staging_root() -> Path:
    base = Path(settings.UPLOAD_DIR)
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="upload-", dir=base))


class _Budget:
    """Counts bytes written across a whole upload and raises once the limit is passed."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit, self.what, self.used = limit, what, 0

    def add(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise UploadTooLargeError(
                f"{self.what} is larger than the limit of {self.limit} bytes",
                limit_bytes=self.limit,
            )


def _copy(src: IO[bytes], target: Path, budget: _Budget) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as dst:
        while chunk := src.read(CHUNK_BYTES):
            budget.add(len(chunk))
            dst.write(chunk)


def safe_relative_path(name: str) -> str:
    """Normalise an archive entry or file name; reject anything that could escape the folder."""
    if not name or "\\" in name or "\x00" in name:
        raise UploadError(f"unsafe path {name!r} in upload", reason="unsafe_path", path=name)
    pure = PurePosixPath(name)
    if pure.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise UploadError(f"absolute path {name!r} in upload", reason="unsafe_path", path=name)
    parts = [p for p in pure.parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UploadError(
            f"path {name!r} escapes the model folder", reason="unsafe_path", path=name
        )
    if not parts:
        raise UploadError(f"empty path {name!r} in upload", reason="unsafe_path", path=name)
    return "/".join(parts)


def stage_archive(fileobj: BinaryIO, *, filename: str = "") -> StagedUpload:
    """Stage a .zip / .tar.gz / .tar archive of a model folder (see the module docstring)."""
    root = _staging_root()
    try:
        archive = root / "archive"
        _copy(fileobj, archive, _Budget(max_upload_bytes(), "the upload"))
        tree = root / "tree"
        tree.mkdir()
        _extract(archive, tree, filename=filename)
        archive.unlink()
        return _layout(root, tree)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def stage_single_file(
    fileobj: BinaryIO, *, filename: str, config_text: str | None = None
) -> StagedUpload:
    """Stage one model file (its base name kept) with optional config.pbtxt text."""
    name = safe_relative_path(PurePosixPath(filename.replace("\\", "/")).name or "")
    if name == CONFIG_NAME:
        raise UploadError(
            "the model file cannot be config.pbtxt; send the config as 'config'",
            reason="no_model_file",
        )
    root = _staging_root()
    try:
        target = root / "tree" / name
        _copy(fileobj, target, _Budget(max_upload_bytes(), "the upload"))
        return StagedUpload(
            root=root,
            config_text=config_text or None,
            version_files=[StagedFile(name, target)],
            model_files=[],
        )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def stage_files(files: Iterable[tuple[str, BinaryIO]]) -> StagedUpload:
    """Stage separate files given with their relative paths, laid out like an archive."""
    root = _staging_root()
    try:
        tree = root / "tree"
        tree.mkdir()
        budget = _Budget(max_upload_bytes(), "the upload")
        for count, (name, fileobj) in enumerate(files, start=1):
            if count > MAX_ENTRIES:
                raise UploadError(f"more than {MAX_ENTRIES} files", reason="too_many_files")
            _copy(fileobj, tree / safe_relative_path(name), budget)
        return _layout(root, tree)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def stage_directory(model_dir: Path, version_dir: Path) -> StagedUpload:
    """Stage one version of a Triton-layout model folder on disk (used by import_repository)."""
    root = _staging_root()
    try:
        tree = root / "tree"
        tree.mkdir()
        budget = _Budget(max_upload_bytes(), f"{model_dir.name}/{version_dir.name}")
        (tree / version_dir.name).mkdir()  # kept even when empty (an ensemble's version folder)
        for path in sorted(_walk_files(model_dir)):
            rel = path.relative_to(model_dir)
            if rel.parts[0].isdigit() and rel.parts[0] != version_dir.name:
                continue  # another version's files
            with path.open("rb") as f:
                _copy(f, tree / rel, budget)
        return _layout(root, tree)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _walk_files(folder: Path) -> Iterator[Path]:
    for path in folder.rglob("*"):
        if path.is_symlink():
            raise UploadError(f"{path.name}: links are not accepted", reason="unsafe_path")
        if path.is_file():
            yield path


def _extract(archive: Path, tree: Path, *, filename: str) -> None:
    with archive.open("rb") as f:
        magic = f.read(4)
    if magic.startswith(b"PK\x03\x04") or magic.startswith(b"PK\x05\x06"):
        _extract_zip(archive, tree)
    elif magic.startswith(b"\x1f\x8b") or _is_plain_tar(archive):
        _extract_tar(archive, tree)
    else:
        raise UploadError(
            f"{filename or 'the archive'} is not a .zip, .tar.gz or .tar archive",
            reason="unknown_format",
            filename=filename,
        )


def _is_plain_tar(archive: Path) -> bool:
    try:
        return tarfile.is_tarfile(archive)
    except OSError:
        return False


def _extract_zip(archive: Path, tree: Path) -> None:
    budget = _Budget(max_unpacked_bytes(), "the unpacked archive")
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise UploadError(f"corrupt zip archive: {exc}", reason="corrupt_archive") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise UploadError(f"more than {MAX_ENTRIES} entries", reason="too_many_files")
        for info in infos:
            rel = safe_relative_path(info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise UploadError(
                    f"{info.filename}: links are not accepted",
                    reason="unsafe_path",
                    path=info.filename,
                )
            if info.is_dir():
                (tree / rel).mkdir(parents=True, exist_ok=True)
                continue
            try:
                with zf.open(info) as src:
                    _copy(src, tree / rel, budget)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise UploadError(
                    f"corrupt zip entry {info.filename}: {exc}", reason="corrupt_archive"
                ) from exc


def _extract_tar(archive: Path, tree: Path) -> None:
    budget = _Budget(max_unpacked_bytes(), "the unpacked archive")
    try:
        with tarfile.open(archive, mode="r:*") as tf:
            for count, member in enumerate(tf, start=1):
                if count > MAX_ENTRIES:
                    raise UploadError(f"more than {MAX_ENTRIES} entries", reason="too_many_files")
                rel = safe_relative_path(member.name)
                if member.isdir():
                    (tree / rel).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise UploadError(
                        f"{member.name}: links and special files are not accepted",
                        reason="unsafe_path",
                        path=member.name,
                    )
                src = tf.extractfile(member)
                assert src is not None  # a regular file always has content
                _copy(src, tree / rel, budget)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UploadError(f"corrupt tar archive: {exc}", reason="corrupt_archive") from exc


def _layout(root: Path, tree: Path) -> StagedUpload:
    """Split a staged model folder into config, version files and model-level files."""
    entries = [p for p in tree.iterdir() if not _ignored(p.name)]
    only = entries[0] if len(entries) == 1 else None
    wrapped = only is not None and only.is_dir() and not _is_version_name(only.name)
    if only is not None and wrapped and only.name not in MODEL_LEVEL_DIRS:
        tree = only  # a wrapping folder: mymodel/config.pbtxt, mymodel/1/model.onnx
    config_path = tree / CONFIG_NAME
    config_text = _read_config(config_path) if config_path.is_file() else None
    numeric = sorted(p for p in tree.iterdir() if p.is_dir() and _is_version_name(p.name))
    if len(numeric) > 1:
        names = ", ".join(p.name for p in numeric)
        raise UploadError(
            f"the archive holds several version folders ({names}); upload one version at a time",
            reason="several_versions",
        )
    version_dir = numeric[0] if numeric else tree
    version_files: list[StagedFile] = []
    model_files: list[StagedFile] = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree)
        if _ignored_parts(rel.parts) or rel.as_posix() == CONFIG_NAME:
            continue
        if numeric and rel.parts[0] == version_dir.name:
            version_files.append(StagedFile(path.relative_to(version_dir).as_posix(), path))
        elif numeric or rel.parts[0] in MODEL_LEVEL_DIRS:
            model_files.append(StagedFile(rel.as_posix(), path))
        else:
            version_files.append(StagedFile(rel.as_posix(), path))
    if not version_files and config_text is None:
        # An ensemble has an empty version folder, but it needs its config to say so.
        raise UploadError(
            "the upload holds no model files (expected e.g. model.onnx, model.pt or model.py)",
            reason="no_model_file",
        )
    hint = int(version_dir.name) if numeric else None
    return StagedUpload(root, config_text, version_files, model_files, version_hint=hint)


def _is_version_name(name: str) -> bool:
    # PROTOCOL.md §4.1: decimal integers, no leading zero except "0" itself.
    return name.isdigit() and (name == "0" or not name.startswith("0"))


def _ignored(name: str) -> bool:
    # Archive tools' droppings (macOS resource forks, Finder metadata).
    return name in ("__MACOSX", ".DS_Store") or name.startswith("._")


def _ignored_parts(parts: tuple[str, ...]) -> bool:
    return any(_ignored(p) or p == "__pycache__" for p in parts)


def _read_config(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UploadError("config.pbtxt is not UTF-8 text", reason="bad_config_encoding") from exc
