"""auto_complete_config: run once in a throw-away interpreter, Triton's ModelConfig rules."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from repository import demo_models
from serving.backends.python import autocomplete
from serving.backends.python.completion import completed_fields
from serving.backends.python.triton_python_backend_utils import ModelConfig
from serving.errors import InvalidArgumentError

pytestmark = pytest.mark.embedded

AUTO = textwrap.dedent("""\
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            cfg = auto_complete_model_config
            print("stdout noise is harmless")
            cfg.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
            cfg.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
            cfg.set_max_batch_size(8)
            cfg.set_dynamic_batching()
            cfg.add_model_warmup({"name": "w", "batch_size": 1, "inputs": {
                "INPUT0": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": True}}})
            return cfg

        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
""")


def _cfg(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_model_fills_inputs_outputs_batching_and_warmup(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_model(tmp_path, "auto", AUTO, None)
    before = _cfg('name: "auto" backend: "python"')
    after = autocomplete(before, model_dir / "1")
    assert [i.name for i in after.input] == ["INPUT0"] and list(after.input[0].dims) == [4]
    assert after.max_batch_size == 8 and after.HasField("dynamic_batching")
    assert after.model_warmup[0].name == "w"
    assert completed_fields(before, after) == [
        "max_batch_size",
        "input[INPUT0]",
        "output[OUTPUT0]",
        "dynamic_batching",
    ]


def test_conflicting_definition_fails_with_the_models_message(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_model(tmp_path, "auto", AUTO, None)
    cfg = _cfg(
        'name: "auto" backend: "python" input { name: "INPUT0" data_type: TYPE_INT32 dims: [4] }'
    )
    with pytest.raises(InvalidArgumentError, match="auto-complete-config function specified"):
        autocomplete(cfg, model_dir / "1")


def test_model_without_auto_complete_keeps_its_config(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_add_sub(tmp_path)
    cfg = _cfg((model_dir / "config.pbtxt").read_text())
    assert autocomplete(cfg, model_dir / "1") == cfg


def test_import_error_in_model_py_is_reported(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_model(tmp_path, "bad", "import no_such_module\n", None)
    with pytest.raises(InvalidArgumentError, match="no_such_module"):
        autocomplete(_cfg('name: "bad" backend: "python"'), model_dir / "1")


def test_model_config_wrapper_rules() -> None:
    cfg = ModelConfig('{"name": "m", "max_batch_size": 4, "input": []}')
    with pytest.raises(ValueError, match="specified max_batch_size 4"):
        cfg.set_max_batch_size(8)
    cfg.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
    cfg.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})  # same: fine
    with pytest.raises(ValueError, match="must set 'dims'"):
        cfg.add_output({"name": "Y", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="unknown property"):
        cfg.add_input({"name": "Z", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]})
    cfg.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="decoupled"):
        cfg.set_model_transaction_policy({"decoupled": True})
    assert cfg.as_dict()["input"] == [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}]
