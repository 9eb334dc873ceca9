"""Upload intake: archive layouts, single files, and every way an upload is refused."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from repository.errors import UploadError, UploadTooLargeError
from repository.uploads import stage_archive, stage_directory, stage_files, stage_single_file
from tests.repository.archives import make_tar_gz, make_zip

pytestmark = pytest.mark.embedded

CONFIG = b'name: "m"\nbackend: "onnxruntime"\n'


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"
    return settings.UPLOAD_DIR


def staging_left(upload_dir: Path) -> list[Path]:
    return list(upload_dir.iterdir()) if upload_dir.exists() else []


@pytest.mark.parametrize("make", [make_zip, make_tar_gz])
def test_archive_with_numeric_folder_splits_config_version_and_model_files(make) -> None:  # type: ignore[no-untyped-def]
    data = make(
        {
            "config.pbtxt": CONFIG,
            "1/model.onnx": b"onnx",
            "labels.txt": b"a\nb\n",
            "1/sub/extra.bin": b"x",
        }
    )
    staged = stage_archive(io.BytesIO(data), filename="m.zip")
    try:
        assert staged.config_text == CONFIG.decode()
        assert [f.path for f in staged.version_files] == ["model.onnx", "sub/extra.bin"]
        assert [f.path for f in staged.model_files] == ["labels.txt"]
        assert staged.version_hint == 1
        assert staged.version_files[0].source.read_bytes() == b"onnx"
    finally:
        staged.cleanup()
    assert not staged.root.exists()


def test_archive_with_files_at_root_and_no_config() -> None:
    staged = stage_archive(io.BytesIO(make_zip({"model.onnx": b"onnx"})))
    try:
        assert staged.config_text is None
        assert [f.path for f in staged.version_files] == ["model.onnx"]
        assert staged.model_files == []
    finally:
        staged.cleanup()


def test_archive_wrapped_in_one_folder_is_unwrapped() -> None:
    data = make_tar_gz({"mymodel/config.pbtxt": CONFIG, "mymodel/3/model.pt": b"pt"})
    staged = stage_archive(io.BytesIO(data))
    try:
        assert staged.config_text == CONFIG.decode()
        assert [f.path for f in staged.version_files] == ["model.pt"]
        assert staged.version_hint == 3
    finally:
        staged.cleanup()


@pytest.mark.parametrize("make", [make_zip, make_tar_gz])
@pytest.mark.parametrize("bad", ["../evil.py", "1/../../evil.py", "/etc/passwd"])
def test_archive_entry_escaping_the_folder_is_rejected_and_leaves_nothing(  # type: ignore[no-untyped-def]
    make, bad: str, upload_dir: Path
) -> None:
    data = make({"config.pbtxt": CONFIG, "1/model.onnx": b"onnx", bad: b"pwned"})
    with pytest.raises(UploadError) as info:
        stage_archive(io.BytesIO(data))
    assert info.value.reason == "unsafe_path"
    assert bad in info.value.message
    assert staging_left(upload_dir) == []


@pytest.mark.parametrize("make", [make_zip, make_tar_gz])
def test_archive_with_a_symlink_is_rejected(make, upload_dir: Path) -> None:  # type: ignore[no-untyped-def]
    data = make({"1/model.onnx": b"onnx"}, symlinks={"1/link": "/etc/passwd"})
    with pytest.raises(UploadError, match="links") as info:
        stage_archive(io.BytesIO(data))
    assert info.value.reason == "unsafe_path"
    assert staging_left(upload_dir) == []


def test_oversize_archive_is_rejected(settings, upload_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_MAX_UPLOAD_BYTES = 1000
    data = make_tar_gz({"1/model.onnx": os.urandom(4000)})
    assert len(data) > 1000
    with pytest.raises(UploadTooLargeError) as info:
        stage_archive(io.BytesIO(data))
    assert info.value.code == "upload_too_large"
    assert info.value.extra["limit_bytes"] == 1000
    assert staging_left(upload_dir) == []


def test_zip_bomb_is_stopped_at_the_unpacked_limit(settings, upload_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_MAX_UPLOAD_BYTES = 1_000_000
    settings.PORTICO_MAX_UNPACKED_BYTES = 5_000_000
    data = make_zip({"1/model.onnx": b"\0" * 50_000_000})  # ~50 kB compressed
    assert len(data) < 1_000_000
    with pytest.raises(UploadTooLargeError, match="unpacked"):
        stage_archive(io.BytesIO(data))
    assert staging_left(upload_dir) == []


def test_unknown_format_is_rejected(upload_dir: Path) -> None:
    with pytest.raises(UploadError) as info:
        stage_archive(io.BytesIO(b"just some bytes, not an archive" * 30), filename="m.rar")
    assert info.value.reason == "unknown_format"
    assert staging_left(upload_dir) == []


def test_truncated_zip_is_a_clear_error() -> None:
    data = make_zip({"1/model.onnx": b"x" * 10000})
    with pytest.raises(UploadError) as info:
        stage_archive(io.BytesIO(data[: len(data) // 2]))
    assert info.value.reason in ("corrupt_archive", "unknown_format")


def test_archive_with_several_versions_is_rejected() -> None:
    data = make_zip({"1/model.onnx": b"a", "2/model.onnx": b"b"})
    with pytest.raises(UploadError, match="several version folders"):
        stage_archive(io.BytesIO(data))


def test_archive_without_model_files_is_rejected() -> None:
    with pytest.raises(UploadError) as info:
        stage_archive(io.BytesIO(make_zip({"1/": b""})))
    assert info.value.reason == "no_model_file"


def test_ensemble_archive_with_config_and_empty_version_folder_is_accepted() -> None:
    staged = stage_archive(io.BytesIO(make_zip({"config.pbtxt": b'platform: "ensemble"'})))
    try:
        assert staged.version_files == []
    finally:
        staged.cleanup()


def test_single_file_keeps_its_name_and_takes_config_text() -> None:
    staged = stage_single_file(
        io.BytesIO(b"pt"), filename="C:\\models\\model.pt", config_text="backend: 'pytorch'"
    )
    try:
        assert [f.path for f in staged.version_files] == ["model.pt"]
        assert staged.config_text == "backend: 'pytorch'"
    finally:
        staged.cleanup()


def test_single_oversize_file_is_rejected(settings, upload_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_MAX_UPLOAD_BYTES = 10
    with pytest.raises(UploadTooLargeError):
        stage_single_file(io.BytesIO(b"x" * 11), filename="model.onnx")
    assert staging_left(upload_dir) == []


def test_separate_files_are_laid_out_like_an_archive() -> None:
    staged = stage_files([("config.pbtxt", io.BytesIO(CONFIG)), ("1/model.onnx", io.BytesIO(b"o"))])
    try:
        assert staged.config_text == CONFIG.decode()
        assert [f.path for f in staged.version_files] == ["model.onnx"]
    finally:
        staged.cleanup()


def test_separate_file_with_parent_path_is_rejected(upload_dir: Path) -> None:
    with pytest.raises(UploadError, match="escapes"):
        stage_files([("../model.onnx", io.BytesIO(b"o"))])
    assert staging_left(upload_dir) == []


def test_stage_directory_takes_one_version_and_model_files(tmp_path: Path) -> None:
    model_dir = tmp_path / "repo" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "2").mkdir()
    (model_dir / "config.pbtxt").write_bytes(CONFIG)
    (model_dir / "labels.txt").write_text("a")
    (model_dir / "1" / "model.onnx").write_bytes(b"one")
    (model_dir / "2" / "model.onnx").write_bytes(b"two")
    staged = stage_directory(model_dir, model_dir / "2")
    try:
        assert staged.version_hint == 2
        assert [f.source.read_bytes() for f in staged.version_files] == [b"two"]
        assert [f.path for f in staged.model_files] == ["labels.txt"]
    finally:
        staged.cleanup()
