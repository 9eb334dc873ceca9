"""The generated demo models run with their real runtimes and compute what they claim."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm

pytestmark = pytest.mark.embedded


def _session(model_dir: Path, version: int = 1) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(
        str(model_dir / str(version) / "model.onnx"), providers=["CPUExecutionProvider"]
    )


def _config(model_dir: Path) -> mc.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())


def test_onnx_mlp_matches_numpy_reference_with_dynamic_batch(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_mlp(tmp_path, sizes=(8, 32, 32, 4))
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    (out,) = _session(model_dir).run(["OUTPUT0"], {"INPUT0": x})
    np.testing.assert_allclose(out, dm.mlp_reference(x, (8, 32, 32, 4)), rtol=1e-4, atol=1e-4)
    cfg = _config(model_dir)
    assert cfg.max_batch_size == 64 and cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [8] and list(cfg.output[0].dims) == [4]


def test_onnx_mlp_default_sizes_and_no_config(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_mlp(tmp_path, with_config=False)
    assert not (model_dir / "config.pbtxt").exists()
    x = np.ones((2, 256), np.float32)
    (out,) = _session(model_dir).run(None, {"INPUT0": x})
    assert out.shape == (2, 16)
    np.testing.assert_allclose(out, dm.mlp_reference(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["FP32", "INT64", "BOOL", "FP16"])
def test_onnx_identity_echoes(tmp_path: Path, dtype: str) -> None:
    from repository.config.datatypes import numpy_dtype

    model_dir = dm.write_onnx_identity(tmp_path, dtype=dtype)
    x = np.arange(6).reshape(2, 3).astype(numpy_dtype(dtype))
    (out,) = _session(model_dir).run(None, {"INPUT0": x})
    np.testing.assert_array_equal(out, x)


def test_onnx_identity_bytes_uses_onnx_strings(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_identity(tmp_path, dtype="BYTES")
    x = np.array([["a", "bc"], ["d", ""]], dtype=object)
    (out,) = _session(model_dir).run(None, {"INPUT0": x})
    assert out.tolist() == x.tolist()
    assert _config(model_dir).input[0].data_type == mc.TYPE_STRING


def test_onnx_add_sub_is_tritons_simple(tmp_path: Path) -> None:
    model_dir = dm.write_onnx_add_sub(tmp_path)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    sum_, diff = _session(model_dir).run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(sum_, a + b)
    np.testing.assert_array_equal(diff, a - b)
    cfg = _config(model_dir)
    assert cfg.name == "simple" and cfg.platform == "onnxruntime_onnx" and cfg.max_batch_size == 8


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_torchscript_add_sub_uses_triton_names(tmp_path: Path) -> None:
    import torch

    model_dir = dm.write_torchscript_add_sub(tmp_path, "ts")
    module = torch.jit.load(str(model_dir / "1" / "model.pt"))
    a = torch.arange(48, dtype=torch.int32).reshape(3, 16)
    b = torch.full((3, 16), 2, dtype=torch.int32)
    sum_, diff = module(a, b)
    assert torch.equal(sum_, a + b) and torch.equal(diff, a - b)
    cfg = _config(model_dir)
    assert cfg.platform == "pytorch_libtorch"
    assert [i.name for i in cfg.input] == ["INPUT__0", "INPUT__1"]
    assert [o.name for o in cfg.output] == ["OUTPUT__0", "OUTPUT__1"]


def test_corrupt_onnx_does_not_load(tmp_path: Path) -> None:
    model_dir = dm.write_corrupt_onnx(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime raises its own error types
        _session(model_dir)


@pytest.mark.parametrize("mismatch", ["datatype", "name", "dims"])
def test_mismatched_config_disagrees_with_model(tmp_path: Path, mismatch: str) -> None:
    model_dir = dm.write_onnx_mismatched_config(tmp_path, mismatch=mismatch)
    session = _session(model_dir)
    cfg = _config(model_dir)
    real = session.get_inputs()[0]
    declared = cfg.input[0]
    assert (real.name, real.type, real.shape[1]) != (
        declared.name,
        "tensor(float)" if declared.data_type == mc.TYPE_FP32 else "other",
        declared.dims[0],
    )


# ----------------------------------------------------------------- Python sources, run in-process
# A minimal stand-in for the Python backend's utils module, enough to execute the sources here.


class _Tensor:
    def __init__(self, name: str, array: Any) -> None:
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Any:
        return self._array


class _Request:
    def __init__(self, tensors: dict[str, Any], parameters: dict[str, Any] | None = None) -> None:
        self._tensors = [_Tensor(k, v) for k, v in tensors.items()]
        self._parameters = json.dumps(parameters or {})

    def inputs(self) -> list[_Tensor]:
        return self._tensors

    def parameters(self) -> str:
        return self._parameters


class _Response:
    def __init__(self, output_tensors: list[_Tensor], error: Any = None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}


def _pb_utils() -> types.ModuleType:
    from repository.config.datatypes import numpy_dtype

    mod = types.ModuleType("triton_python_backend_utils")
    mod.Tensor = _Tensor  # type: ignore[attr-defined]
    mod.InferenceResponse = _Response  # type: ignore[attr-defined]
    mod.get_input_tensor_by_name = lambda r, n: next(  # type: ignore[attr-defined]
        (t for t in r.inputs() if t.name() == n), None
    )
    mod.get_output_config_by_name = lambda c, n: next(  # type: ignore[attr-defined]
        (o for o in c["output"] if o["name"] == n), None
    )
    mod.triton_string_to_numpy = lambda s: numpy_dtype(s)  # type: ignore[attr-defined]
    return mod


def _load_python_model(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from google.protobuf import json_format

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _pb_utils())
    namespace: dict[str, Any] = {}
    source = (model_dir / "1" / "model.py").read_text()
    exec(compile(source, "model.py", "exec"), namespace)  # noqa: S102
    model = namespace["TritonPythonModel"]()
    if hasattr(model, "initialize"):
        cfg = json_format.MessageToDict(_config(model_dir), preserving_proto_field_name=True)
        model.initialize({"model_config": json.dumps(cfg)})
    return model


def test_python_add_sub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _load_python_model(dm.write_python_add_sub(tmp_path), monkeypatch)
    a, b = np.array([1, 2, 3, 4], np.float32), np.array([4, 3, 2, 1], np.float32)
    (resp,) = model.execute([_Request({"INPUT0": a, "INPUT1": b})])
    np.testing.assert_array_equal(resp.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(resp.outputs["OUTPUT1"], a - b)


def test_python_identity_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _load_python_model(dm.write_python_identity(tmp_path), monkeypatch)
    x = np.array([[b"hello", b"world"]], dtype=object)
    (resp,) = model.execute([_Request({"INPUT0": x})])
    assert resp.outputs["OUTPUT0"].tolist() == x.tolist()


def test_python_sleep_reports_batch_and_honours_delays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    model_dir = dm.write_python_sleep(tmp_path, execute_delay_ms=10)
    assert _config(model_dir).parameters["execute_delay_ms"].string_value == "10"
    model = _load_python_model(model_dir, monkeypatch)
    x1, x2 = np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)
    start = time.monotonic()
    r1, r2 = model.execute(
        [_Request({"INPUT0": x1}), _Request({"INPUT0": x2}, {"execute_delay_ms": 60})]
    )
    assert time.monotonic() - start >= 0.06
    np.testing.assert_array_equal(r1.outputs["OUTPUT0"], x1)
    assert r1.outputs["BATCH_SIZE"].tolist() == [[3], [3]]
    assert r2.outputs["BATCH_SIZE"].tolist() == [[3]]


def test_demo_repository_pipeline_composes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mlp, preprocess, pipeline = dm.write_demo_repository(tmp_path)
    assert [p.name for p in (mlp, preprocess, pipeline)] == ["mlp", "preprocess", "pipeline"]
    ens = _config(pipeline)
    assert ens.platform == "ensemble" and ens.max_batch_size == 64
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["preprocess", "mlp"]
    assert (pipeline / "1").is_dir()
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32) * 5 + 2
    (normalized,) = [
        r.outputs["OUTPUT0"]
        for r in _load_python_model(preprocess, monkeypatch).execute([_Request({"INPUT0": x})])
    ]
    np.testing.assert_allclose(normalized, dm.preprocess_reference(x), rtol=1e-5)
    (out,) = _session(mlp).run(None, {"INPUT0": normalized})
    np.testing.assert_allclose(
        out, dm.mlp_reference(dm.preprocess_reference(x)), rtol=1e-4, atol=1e-4
    )


@pytest.mark.timeout(120)
def test_python_sources_run_in_the_real_python_backend(tmp_path: Path) -> None:
    from repository.config import complete_config, scan_model_folder
    from serving.backends.base import InstancePlacement
    from serving.backends.python.instance import PythonInstance
    from serving.core.model_spec import ModelSpec
    from serving.core.types import InferRequest

    def run(model_dir: Path, requests: list[InferRequest]) -> list[Any]:
        folder = scan_model_folder(model_dir)
        config = complete_config(
            folder.config_text, model_name=folder.name, version_dir=folder.versions[1]
        ).config
        spec = ModelSpec(folder.name, 1, config, model_dir, folder.versions[1])
        instance = PythonInstance(spec, InstancePlacement(name="cpu", kind="KIND_CPU"))
        instance.load()
        try:
            return [result.outputs for result in instance.execute(requests)]
        finally:
            instance.unload()

    x1, x2 = np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)
    slept = run(
        dm.write_python_sleep(tmp_path, execute_delay_ms=1),
        [
            InferRequest(model_name="sleep", inputs={"INPUT0": x1}),
            InferRequest(
                model_name="sleep", inputs={"INPUT0": x2}, parameters={"execute_delay_ms": 5}
            ),
        ],
    )
    assert [s["BATCH_SIZE"].tolist() for s in slept] == [[[3], [3]], [[3]]]
    np.testing.assert_array_equal(slept[0]["OUTPUT0"], x1)
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    (normalized,) = run(
        dm.write_demo_repository(tmp_path)[1],
        [InferRequest(model_name="preprocess", inputs={"INPUT0": x})],
    )
    np.testing.assert_allclose(normalized["OUTPUT0"], dm.preprocess_reference(x), rtol=1e-5)
