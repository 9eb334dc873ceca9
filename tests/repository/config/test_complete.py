"""complete_config: parse, auto-complete, validate and normalise in one call."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm
from repository.config import ConfigError, complete_config, config_to_json, scan_model_folder

pytestmark = pytest.mark.embedded


def test_demo_repository_completes(tmp_path: Path) -> None:
    for model_dir in dm.write_demo_repository(tmp_path):
        folder = scan_model_folder(model_dir)
        done = complete_config(
            folder.config_text, model_name=folder.name, version_dir=folder.versions[1]
        )
        assert done.config.name == folder.name
    assert config_to_json(done.config)["max_batch_size"] == 64


def test_onnx_without_config_is_autocompleted_and_normalised(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_add_sub(tmp_path, with_config=False)
    done = complete_config(None, model_name="simple", version_dir=model_dir / "1")
    assert done.config.max_batch_size == 4
    assert list(done.config.dynamic_batching.preferred_batch_size) == [4]
    assert done.config.instance_group[0].name == "simple"
    assert "input" in done.autocompleted_fields and done.warnings


def test_name_must_match_directory(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "identity")
    with pytest.raises(ConfigError) as info:
        complete_config(
            (model_dir / "config.pbtxt").read_text(),
            model_name="other",
            version_dir=model_dir / "1",
        )
    assert info.value.problems == [
        "name: unexpected directory name 'other' for model 'identity', "
        "directory name must equal model name"
    ]


def test_auto_complete_off_detects_platform_and_normalises_only(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "m", with_config=False)
    version_dir = model_dir / "1"
    done = complete_config(None, model_name="m", version_dir=version_dir, auto_complete=False)
    assert done.config.platform == "onnxruntime_onnx"
    assert len(done.config.input) == 0 and done.config.max_batch_size == 0
    assert done.config.instance_group[0].count == 2


def test_all_problems_reported_together(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, "m")
    text = (model_dir / "config.pbtxt").read_text() + "\ninstance_group { count: -1 passive: true }"
    with pytest.raises(ConfigError) as info:
        complete_config(text, model_name="m", version_dir=model_dir / "1")
    assert len(info.value.problems) == 2


def test_unknown_field_fails_completion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="failed to read text proto"):
        complete_config('name: "m" colour: "red"', model_name="m", version_dir=tmp_path)


def test_torchscript_config_completes(tmp_path: Path) -> None:
    model_dir = dm.write_torchscript_add_sub(tmp_path, "ts")
    done = complete_config(
        (model_dir / "config.pbtxt").read_text(), model_name="ts", version_dir=model_dir / "1"
    )
    assert done.config.backend == "pytorch"
    assert done.config.instance_group[0].count == 1


def test_python_autocomplete_hook_is_validated_and_normalised(tmp_path: Path) -> None:
    model_dir = dm.write_python_model(tmp_path, "p", dm.PYTHON_IDENTITY, None)

    def fills_io(cfg: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        assert version_dir == model_dir / "1"
        out = mc.ModelConfig()
        out.CopyFrom(cfg)
        out.max_batch_size = 8
        out.input.add(name="INPUT0", data_type=mc.TYPE_STRING, dims=[-1])
        out.output.add(name="OUTPUT0", data_type=mc.TYPE_STRING, dims=[-1])
        out.dynamic_batching.SetInParent()
        return out

    done = complete_config(
        None, model_name="p", version_dir=model_dir / "1", python_autocomplete=fills_io
    )
    assert done.autocompleted_fields == [
        "name",
        "backend",
        "max_batch_size",
        "input",
        "output",
        "dynamic_batching",
    ]
    assert list(done.config.dynamic_batching.preferred_batch_size) == [8]

    def breaks(cfg: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        out = fills_io(cfg, version_dir)
        out.input[0].dims[:] = [0]
        return out

    with pytest.raises(ConfigError, match=r"input\[0\].dims"):
        complete_config(
            None, model_name="p", version_dir=model_dir / "1", python_autocomplete=breaks
        )
    untouched = complete_config(
        None,
        model_name="p",
        version_dir=model_dir / "1",
        python_autocomplete=breaks,
        auto_complete=False,
    )
    assert len(untouched.config.input) == 0
