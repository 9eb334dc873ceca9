"""Scanning a Triton model folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from repository import demo_models as dm
from repository.config import (
    ConfigError,
    check_model_name,
    model_file,
    scan_model_folder,
    version_number,
)

pytestmark = pytest.mark.embedded


def test_scan_finds_config_and_integer_versions(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "m", version=1)
    dm.write_onnx_identity(tmp_path, "m", version=10)
    for name in ("01", "abc", "warmup", "configs", "-1"):
        (model_dir / name).mkdir()
    (model_dir / "labels.txt").write_text("a\n")
    folder = scan_model_folder(model_dir)
    assert folder.name == "m" and folder.path == model_dir
    assert folder.config_text is not None and 'name: "m"' in folder.config_text
    assert folder.versions == {1: model_dir / "1", 10: model_dir / "10"}
    assert sorted(folder.warnings) == [
        "ignoring '-1': not a valid version directory name",
        "ignoring '01': not a valid version directory name",
        "ignoring 'abc': not a valid version directory name",
    ]


def test_scan_without_config(tmp_path: Path) -> None:
    folder = scan_model_folder(dm.write_onnx_identity(tmp_path, "m", with_config=False))
    assert folder.config_text is None and list(folder.versions) == [1]


def test_alternative_config_by_name(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "m")
    (model_dir / "configs").mkdir()
    (model_dir / "configs" / "big.pbtxt").write_text('name: "m" max_batch_size: 64')
    assert "64" in (scan_model_folder(model_dir, config_name="big").config_text or "")
    assert "64" not in (scan_model_folder(model_dir, config_name="other").config_text or "")


VERSION_NAMES = [("0", 0), ("1", 1), ("42", 42), ("007", None), ("1.5", None), ("x", None)]


@pytest.mark.parametrize(("name", "expected"), [*VERSION_NAMES, ("\u0663", None)])
def test_version_number(name: str, expected: int | None) -> None:
    assert version_number(name) == expected


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b"])
def test_bad_model_names(name: str) -> None:
    with pytest.raises(ConfigError, match="name: invalid model name"):
        check_model_name(name)


def test_model_file_paths(tmp_path: Path) -> None:
    assert model_file(tmp_path, "onnxruntime") == tmp_path / "model.onnx"
    assert model_file(tmp_path, "pytorch") == tmp_path / "model.pt"
    assert model_file(tmp_path, "python", "custom.py") == tmp_path / "custom.py"
    (tmp_path / "model.onnx").mkdir()
    assert model_file(tmp_path, "onnxruntime") == tmp_path / "model.onnx" / "model.onnx"
