"""Auto-complete from real ONNX files (PROTOCOL §4.3) and platform detection from files."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm
from repository.config import (
    ConfigError,
    autocomplete,
    autocomplete_config,
    config_problems,
    parse_config_text,
    read_onnx_io,
)

pytestmark = pytest.mark.embedded


def _empty() -> mc.ModelConfig:
    return mc.ModelConfig()


def _write_onnx(
    path: Path, shapes: dict[str, list[int | str]], elem: int = onnx.TensorProto.FLOAT
) -> Path:
    """Identity from every INPUTi to OUTPUTi with the given full shapes."""
    path.mkdir(parents=True, exist_ok=True)
    names = sorted(shapes)
    nodes = [onnx.helper.make_node("Identity", [n], [n.replace("IN", "OUT")]) for n in names]
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info(n, elem, shapes[n]) for n in names],
        [
            onnx.helper.make_tensor_value_info(n.replace("IN", "OUT"), elem, shapes[n])
            for n in names
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "model.onnx"))
    return path


def test_batching_model_without_config_gets_default_max_batch_and_dynamic_batching(
    tmp_path: Path,
) -> None:
    model_dir = dm.write_onnx_add_sub(tmp_path, "simple", with_config=False)
    result = autocomplete(_empty(), model_name="simple", version_dir=model_dir / "1")
    cfg = result.config
    assert (cfg.name, cfg.platform, cfg.backend) == ("simple", "onnxruntime_onnx", "onnxruntime")
    assert cfg.max_batch_size == 4
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("INPUT0", mc.TYPE_INT32, [16]),
        ("INPUT1", mc.TYPE_INT32, [16]),
    ]
    assert [o.name for o in cfg.output] == ["OUTPUT0", "OUTPUT1"]
    assert cfg.HasField("dynamic_batching")
    assert result.filled == [
        "name",
        "platform",
        "backend",
        "max_batch_size",
        "input",
        "output",
        "dynamic_batching",
    ]
    assert "autofilled max_batch_size to 4" in result.warnings[0]
    assert config_problems(cfg) == []


def test_default_max_batch_size_is_configurable(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, with_config=False)
    cfg, filled = autocomplete_config(
        _empty(), model_name="identity", version_dir=model_dir / "1", default_max_batch_size=32
    )
    assert cfg.max_batch_size == 32 and "max_batch_size" in filled
    assert list(cfg.input[0].dims) == [-1]  # symbolic dims become -1


def test_configured_max_batch_size_is_kept_and_batching_added(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_mlp(tmp_path, sizes=(4, 8, 2), with_config=False)
    cfg, filled = autocomplete_config(
        parse_config_text("max_batch_size: 16"), model_name="mlp", version_dir=model_dir / "1"
    )
    assert cfg.max_batch_size == 16 and "max_batch_size" not in filled
    assert list(cfg.input[0].dims) == [4] and list(cfg.output[0].dims) == [2]
    assert cfg.HasField("dynamic_batching")


def test_max_batch_size_one_gets_no_dynamic_batching(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, with_config=False)
    cfg, filled = autocomplete_config(
        parse_config_text("max_batch_size: 1"), model_name="identity", version_dir=model_dir / "1"
    )
    assert not cfg.HasField("dynamic_batching") and "dynamic_batching" not in filled


def test_existing_scheduler_is_not_replaced(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, with_config=False)
    text = "max_batch_size: 8 sequence_batching { }"
    cfg, filled = autocomplete_config(
        parse_config_text(text), model_name="identity", version_dir=model_dir / "1"
    )
    assert cfg.HasField("sequence_batching") and "dynamic_batching" not in filled


def test_non_batching_model_keeps_full_shape_and_zero_max_batch(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(
        tmp_path, "fixed", dims=(4,), max_batch_size=0, with_config=False
    )
    cfg, filled = autocomplete_config(_empty(), model_name="fixed", version_dir=model_dir / "1")
    assert cfg.max_batch_size == 0 and "max_batch_size" not in filled
    assert list(cfg.input[0].dims) == [4] and list(cfg.output[0].dims) == [4]
    assert not cfg.HasField("dynamic_batching")


def test_non_batching_model_with_max_batch_size_is_an_error(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(
        tmp_path, "fixed", dims=(4,), max_batch_size=0, with_config=False
    )
    with pytest.raises(ConfigError) as info:
        autocomplete_config(
            parse_config_text("max_batch_size: 8"), model_name="fixed", version_dir=model_dir / "1"
        )
    assert info.value.problems == [
        "max_batch_size: autofill failed for model 'fixed': the model does not support batching "
        "while non-zero max_batch_size is specified"
    ]


def test_batch_only_tensor_becomes_dims_one_with_empty_reshape(tmp_path: Path) -> None:
    version_dir = _write_onnx(tmp_path / "scalar" / "1", {"INPUT0": ["batch"]})
    cfg, _ = autocomplete_config(_empty(), model_name="scalar", version_dir=version_dir)
    assert cfg.max_batch_size == 4
    entry = cfg.input[0]
    assert list(entry.dims) == [1] and entry.HasField("reshape") and list(entry.reshape.shape) == []
    assert config_problems(cfg) == []


def test_rank_zero_tensor_without_batching_becomes_dims_one(tmp_path: Path) -> None:
    version_dir = _write_onnx(tmp_path / "s" / "1", {"INPUT0": []})
    cfg, _ = autocomplete_config(_empty(), model_name="s", version_dir=version_dir)
    assert cfg.max_batch_size == 0
    assert list(cfg.input[0].dims) == [1] and not cfg.input[0].HasField("reshape")


def test_one_non_batch_tensor_disables_batching(tmp_path: Path) -> None:
    version_dir = _write_onnx(tmp_path / "mixed" / "1", {"INPUT0": ["b", 3], "INPUT1": [2, 3]})
    cfg, _ = autocomplete_config(_empty(), model_name="mixed", version_dir=version_dir)
    assert cfg.max_batch_size == 0
    assert [list(i.dims) for i in cfg.input] == [[-1, 3], [2, 3]]


def test_complete_io_in_config_means_no_autocomplete(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, dims=(4,))
    text = (model_dir / "config.pbtxt").read_text()
    cfg, filled = autocomplete_config(
        parse_config_text(text), model_name="identity", version_dir=model_dir / "1"
    )
    assert filled == ["backend"] and not cfg.HasField("dynamic_batching")  # I/O kept as written


def test_missing_outputs_are_filled_and_listed_inputs_completed(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_add_sub(tmp_path, with_config=False)
    text = 'max_batch_size: 8 input { name: "INPUT1" }'
    cfg, filled = autocomplete_config(
        parse_config_text(text), model_name="simple", version_dir=model_dir / "1"
    )
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("INPUT1", mc.TYPE_INT32, [16]),
        ("INPUT0", mc.TYPE_INT32, [16]),
    ]
    assert len(cfg.output) == 2 and {"input", "output"} <= set(filled)


def test_bytes_model_autocompletes_as_type_string(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, dtype="BYTES", with_config=False)
    cfg, _ = autocomplete_config(_empty(), model_name="identity", version_dir=model_dir / "1")
    assert cfg.input[0].data_type == mc.TYPE_STRING


def test_corrupt_onnx_is_a_config_error(tmp_path: Path) -> None:
    model_dir = dm.write_corrupt_onnx(tmp_path)
    (model_dir / "config.pbtxt").unlink()
    with pytest.raises(ConfigError, match="unable to load ONNX model 'model.onnx'"):
        autocomplete_config(_empty(), model_name="corrupt", version_dir=model_dir / "1")


def test_onnx_model_folder_form_is_read(tmp_path: Path) -> None:
    version_dir = _write_onnx(tmp_path / "d" / "1" / "model.onnx", {"INPUT0": ["b", 2]}).parent
    cfg, _ = autocomplete_config(_empty(), model_name="d", version_dir=version_dir)
    assert list(cfg.input[0].dims) == [2]


def test_initializers_listed_as_inputs_are_not_inputs(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_mlp(tmp_path, sizes=(4, 3), with_config=False)
    model = onnx.load(str(model_dir / "1" / "model.onnx"))
    model.graph.input.extend(
        [
            onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
            for i in model.graph.initializer
        ]
    )
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    inputs, outputs = read_onnx_io(model_dir / "1" / "model.onnx")
    assert [t.name for t in inputs] == ["INPUT0"] and [t.name for t in outputs] == ["OUTPUT0"]


@pytest.mark.parametrize(
    ("filename", "platform", "backend"),
    [
        ("model.onnx", "onnxruntime_onnx", "onnxruntime"),
        ("model.pt", "pytorch_libtorch", "pytorch"),
        ("model.plan", "tensorrt_plan", "tensorrt"),
        ("model.py", "", "python"),
        ("model.savedmodel", "tensorflow_savedmodel", "tensorflow"),
    ],
)
def test_platform_detected_from_model_file(
    tmp_path: Path, filename: str, platform: str, backend: str
) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / filename).write_bytes(b"")
    if filename == "model.onnx":
        _write_onnx(tmp_path / "1", {"INPUT0": [2]})
    cfg, filled = autocomplete_config(_empty(), model_name="m", version_dir=tmp_path / "1")
    assert (cfg.platform, cfg.backend) == (platform, backend)
    assert "backend" in filled


def test_custom_backend_from_model_name(tmp_path: Path) -> None:
    cfg, _ = autocomplete_config(_empty(), model_name="thing.mybackend", version_dir=tmp_path)
    assert (cfg.platform, cfg.backend) == ("", "mybackend")
    assert any("not supported by Portico" in p for p in config_problems(cfg))


def test_no_model_file_and_no_platform_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="platform: must specify 'platform' or 'backend'"):
        autocomplete_config(_empty(), model_name="m", version_dir=tmp_path)


def test_backend_filled_from_platform_and_platform_from_backend(tmp_path: Path) -> None:
    cfg, filled = autocomplete_config(
        parse_config_text('platform: "pytorch_libtorch"'), model_name="t", version_dir=tmp_path
    )
    assert cfg.backend == "pytorch" and filled == ["name", "backend"]
    cfg, filled = autocomplete_config(
        parse_config_text('backend: "tensorrt"'), model_name="t", version_dir=tmp_path
    )
    assert cfg.platform == "tensorrt_plan" and "platform" in filled


def test_python_models_are_not_completed_here(tmp_path: Path) -> None:
    model_dir = dm.write_python_model(tmp_path, "p", dm.PYTHON_IDENTITY, None)
    cfg, filled = autocomplete_config(_empty(), model_name="p", version_dir=model_dir / "1")
    assert cfg.backend == "python" and len(cfg.input) == 0 and filled == ["name", "backend"]
