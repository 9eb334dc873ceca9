"""Tiny real models in Triton layout, generated locally (never downloaded).

Each ``write_*`` function writes ``<repo_dir>/<name>/config.pbtxt`` (unless told not to) and
``<repo_dir>/<name>/<version>/<model file>`` and returns the model folder. Used by the demo set that
``make run`` registers, by tests of every part, and by fixtures that need a broken artifact.
"""

from __future__ import annotations

import dataclasses
import textwrap
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository.config.datatypes import config_datatype, numpy_dtype, onnx_elem_type

ONNX_OPSET = 17
ONNX_IR_VERSION = 8


@dataclasses.dataclass(frozen=True)
class TensorDecl:
    """One config input/output: name, wire data type (``"FP32"``) and dims without the batch dim."""

    name: str
    datatype: str
    dims: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class EnsembleStep:
    """One ensemble step; ``input_map``/``output_map``: composing-model name -> ensemble name."""

    model_name: str
    input_map: dict[str, str]
    output_map: dict[str, str]
    model_version: int = -1


# --------------------------------------------------------------------------- config text


def build_config(
    name: str,
    *,
    platform: str = "",
    backend: str = "",
    max_batch_size: int = 0,
    inputs: Iterable[TensorDecl] = (),
    outputs: Iterable[TensorDecl] = (),
    dynamic_batching: bool = False,
    instance_kind: str | None = None,
    instance_count: int = 1,
    parameters: dict[str, str] | None = None,
) -> str:
    """A ``config.pbtxt`` text for the common cases of the generators below."""
    cfg = mc.ModelConfig(name=name, platform=platform, backend=backend)
    cfg.max_batch_size = max_batch_size
    for decl in inputs:
        cfg.input.add(name=decl.name, data_type=config_datatype(decl.datatype), dims=decl.dims)
    for decl in outputs:
        cfg.output.add(name=decl.name, data_type=config_datatype(decl.datatype), dims=decl.dims)
    if dynamic_batching:
        cfg.dynamic_batching.SetInParent()
    if instance_kind is not None:
        kind = mc.ModelInstanceGroup.Kind.Value(instance_kind)
        cfg.instance_group.add(kind=kind, count=instance_count)
    for key, value in (parameters or {}).items():
        cfg.parameters[key].string_value = value
    return str(text_format.MessageToString(cfg))


def _model_dir(repo_dir: Path | str, name: str, version: int) -> tuple[Path, Path]:
    model_dir = Path(repo_dir) / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    return model_dir, version_dir


def _write_config(model_dir: Path, text: str | None) -> None:
    if text is not None:
        (model_dir / "config.pbtxt").write_text(text)


# --------------------------------------------------------------------------- ONNX


def _onnx_value_info(name: str, datatype: str, shape: Sequence[int | str]) -> Any:
    import onnx

    return onnx.helper.make_tensor_value_info(name, onnx_elem_type(datatype), list(shape))


def _save_onnx(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    path: Path,
    initializers: Sequence[Any] = (),
) -> None:
    import onnx

    graph = onnx.helper.make_graph(nodes, "portico_demo", inputs, outputs, list(initializers))
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid("", ONNX_OPSET)],
        producer_name="portico",
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _batched(shape: Sequence[int | str], max_batch_size: int) -> list[int | str]:
    return (["batch"] if max_batch_size > 0 else []) + list(shape)


def mlp_weights(
    sizes: Sequence[int] = (256, 1024, 1024, 16), seed: int = 0
) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The (weight [in, out], bias [out]) pairs ``write_onnx_mlp`` uses for a given seed."""
    rng = np.random.default_rng(seed)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        weight = rng.standard_normal((fan_in, fan_out)).astype(np.float32) * np.float32(
            np.sqrt(2.0 / fan_in)
        )
        bias = (rng.standard_normal(fan_out) * 0.01).astype(np.float32)
        layers.append((weight, bias))
    return layers


def mlp_reference(
    x: np.ndarray[Any, Any], sizes: Sequence[int] = (256, 1024, 1024, 16), seed: int = 0
) -> np.ndarray[Any, Any]:
    """What the MLP written by ``write_onnx_mlp`` computes, in numpy."""
    layers = mlp_weights(sizes, seed)
    for index, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        if index < len(layers) - 1:
            x = np.maximum(x, 0)
    return x.astype(np.float32)


def write_onnx_mlp(
    repo_dir: Path | str,
    name: str = "mlp",
    version: int = 1,
    *,
    sizes: Sequence[int] = (256, 1024, 1024, 16),
    max_batch_size: int = 64,
    dynamic_batching: bool = True,
    with_config: bool = True,
    seed: int = 0,
) -> Path:
    """FP32 MLP (Gemm+Relu ... Gemm): ``INPUT0 [sizes[0]] -> OUTPUT0 [sizes[-1]]``."""
    import onnx
    from onnx import numpy_helper

    model_dir, version_dir = _model_dir(repo_dir, name, version)
    nodes, initializers, current = [], [], "INPUT0"
    layers = mlp_weights(sizes, seed)
    for index, (weight, bias) in enumerate(layers):
        last = index == len(layers) - 1
        initializers += [
            numpy_helper.from_array(weight, f"W{index}"),
            numpy_helper.from_array(bias, f"B{index}"),
        ]
        gemm_out = "OUTPUT0" if last else f"gemm{index}"
        nodes.append(onnx.helper.make_node("Gemm", [current, f"W{index}", f"B{index}"], [gemm_out]))
        if not last:
            nodes.append(onnx.helper.make_node("Relu", [gemm_out], [f"relu{index}"]))
            current = f"relu{index}"
    batch: int | str = "batch" if max_batch_size > 0 else 1
    _save_onnx(
        nodes,
        [_onnx_value_info("INPUT0", "FP32", [batch, sizes[0]])],
        [_onnx_value_info("OUTPUT0", "FP32", [batch, sizes[-1]])],
        version_dir / "model.onnx",
        initializers,
    )
    dims_in: tuple[int, ...] = (sizes[0],)
    dims_out: tuple[int, ...] = (sizes[-1],)
    if max_batch_size == 0:
        dims_in, dims_out = (1, sizes[0]), (1, sizes[-1])
    config = build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=[TensorDecl("INPUT0", "FP32", dims_in)],
        outputs=[TensorDecl("OUTPUT0", "FP32", dims_out)],
        dynamic_batching=dynamic_batching and max_batch_size > 0,
    )
    _write_config(model_dir, config if with_config else None)
    return model_dir


def write_onnx_identity(
    repo_dir: Path | str,
    name: str = "identity",
    version: int = 1,
    *,
    dtype: str = "FP32",
    dims: Sequence[int] = (-1,),
    max_batch_size: int = 8,
    dynamic_batching: bool = False,
    with_config: bool = True,
) -> Path:
    """``OUTPUT0 = Identity(INPUT0)`` (Triton's ``onnx_zero_1_<dtype>``); BYTES as ONNX strings."""
    import onnx

    model_dir, version_dir = _model_dir(repo_dir, name, version)
    shape = _batched([d if d >= 0 else f"d{i}" for i, d in enumerate(dims)], max_batch_size)
    _save_onnx(
        [onnx.helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        [_onnx_value_info("INPUT0", dtype, shape)],
        [_onnx_value_info("OUTPUT0", dtype, shape)],
        version_dir / "model.onnx",
    )
    config = build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=[TensorDecl("INPUT0", dtype, tuple(dims))],
        outputs=[TensorDecl("OUTPUT0", dtype, tuple(dims))],
        dynamic_batching=dynamic_batching,
    )
    _write_config(model_dir, config if with_config else None)
    return model_dir


def write_onnx_add_sub(
    repo_dir: Path | str,
    name: str = "simple",
    version: int = 1,
    *,
    dtype: str = "INT32",
    dims: Sequence[int] = (16,),
    max_batch_size: int = 8,
    dynamic_batching: bool = False,
    with_config: bool = True,
) -> Path:
    """Triton's ``simple``: ``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``."""
    import onnx

    model_dir, version_dir = _model_dir(repo_dir, name, version)
    shape = _batched([d if d >= 0 else f"d{i}" for i, d in enumerate(dims)], max_batch_size)
    _save_onnx(
        [
            onnx.helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            onnx.helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [_onnx_value_info(n, dtype, shape) for n in ("INPUT0", "INPUT1")],
        [_onnx_value_info(n, dtype, shape) for n in ("OUTPUT0", "OUTPUT1")],
        version_dir / "model.onnx",
    )
    config = build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=[TensorDecl(n, dtype, tuple(dims)) for n in ("INPUT0", "INPUT1")],
        outputs=[TensorDecl(n, dtype, tuple(dims)) for n in ("OUTPUT0", "OUTPUT1")],
        dynamic_batching=dynamic_batching,
    )
    _write_config(model_dir, config if with_config else None)
    return model_dir


def write_corrupt_onnx(repo_dir: Path | str, name: str = "corrupt", version: int = 1) -> Path:
    """A ``model.onnx`` that is not an ONNX model, with a plausible config."""
    model_dir, version_dir = _model_dir(repo_dir, name, version)
    (version_dir / "model.onnx").write_bytes(b"\x08\x07this is not an onnx model\xff\xfe" * 8)
    config = build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=8,
        inputs=[TensorDecl("INPUT0", "FP32", (-1,))],
        outputs=[TensorDecl("OUTPUT0", "FP32", (-1,))],
    )
    _write_config(model_dir, config)
    return model_dir


def write_onnx_mismatched_config(
    repo_dir: Path | str, name: str = "mismatch", version: int = 1, *, mismatch: str = "datatype"
) -> Path:
    """An FP32 identity ONNX model whose config disagrees with it.

    ``mismatch``: ``"datatype"`` (config says INT32), ``"name"`` (config input ``WRONG_INPUT``)
    or ``"dims"`` (model is ``[batch, 4]``, config says ``[8]``). The config itself is valid.
    """
    write_onnx_identity(repo_dir, name, version, dims=(4,), with_config=False)
    decl_in, decl_out = TensorDecl("INPUT0", "FP32", (4,)), TensorDecl("OUTPUT0", "FP32", (4,))
    if mismatch == "datatype":
        decl_in, decl_out = (
            TensorDecl("INPUT0", "INT32", (4,)),
            TensorDecl("OUTPUT0", "INT32", (4,)),
        )
    elif mismatch == "name":
        decl_in = TensorDecl("WRONG_INPUT", "FP32", (4,))
    elif mismatch == "dims":
        decl_in, decl_out = TensorDecl("INPUT0", "FP32", (8,)), TensorDecl("OUTPUT0", "FP32", (8,))
    else:
        raise ValueError(f"unknown mismatch {mismatch!r}")
    model_dir = Path(repo_dir) / name
    config = build_config(
        name, platform="onnxruntime_onnx", max_batch_size=8, inputs=[decl_in], outputs=[decl_out]
    )
    _write_config(model_dir, config)
    return model_dir


# --------------------------------------------------------------------------- TorchScript


def write_torchscript_add_sub(
    repo_dir: Path | str,
    name: str = "simple_torch",
    version: int = 1,
    *,
    dtype: str = "INT32",
    dims: Sequence[int] = (16,),
    max_batch_size: int = 8,
    dynamic_batching: bool = False,
    with_config: bool = True,
) -> Path:
    """TorchScript ``model.pt``: ``OUTPUT__0/1 = INPUT__0 +/- INPUT__1`` (Triton's naming)."""
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    model_dir, version_dir = _model_dir(repo_dir, name, version)
    example_shape = ([2] if max_batch_size > 0 else []) + [d if d > 0 else 3 for d in dims]
    example = torch.from_numpy(np.ones(example_shape, dtype=numpy_dtype(dtype)))
    with warnings.catch_warnings():
        # NOTE: torch 2.13 deprecates TorchScript, but Triton's pytorch_libtorch needs it.
        warnings.filterwarnings("ignore", message=r"`torch\.jit", category=DeprecationWarning)
        traced = torch.jit.trace(AddSub().eval(), (example, example))  # type: ignore[no-untyped-call]
        torch.jit.save(traced, str(version_dir / "model.pt"))
    config = build_config(
        name,
        platform="pytorch_libtorch",
        max_batch_size=max_batch_size,
        inputs=[TensorDecl(n, dtype, tuple(dims)) for n in ("INPUT__0", "INPUT__1")],
        outputs=[TensorDecl(n, dtype, tuple(dims)) for n in ("OUTPUT__0", "OUTPUT__1")],
        dynamic_batching=dynamic_batching,
    )
    _write_config(model_dir, config if with_config else None)
    return model_dir


# --------------------------------------------------------------------------- Python backend

PYTHON_ADD_SUB = textwrap.dedent('''\
    """Triton's python_backend add_sub example: OUTPUT0/OUTPUT1 = INPUT0 +/- INPUT1."""
    import json

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.model_config = model_config = json.loads(args["model_config"])
            output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
            output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
            self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
            self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

        def execute(self, requests):
            responses = []
            for request in requests:
                in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                out_0 = pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype(self.output0_dtype))
                out_1 = pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype(self.output1_dtype))
                responses.append(pb_utils.InferenceResponse(output_tensors=[out_0, out_1]))
            return responses

        def finalize(self):
            pass
''')

PYTHON_ADD_SUB_CONFIG = build_config(
    "add_sub",
    backend="python",
    inputs=[TensorDecl("INPUT0", "FP32", (4,)), TensorDecl("INPUT1", "FP32", (4,))],
    outputs=[TensorDecl("OUTPUT0", "FP32", (4,)), TensorDecl("OUTPUT1", "FP32", (4,))],
    instance_kind="KIND_CPU",
)

PYTHON_IDENTITY = textwrap.dedent('''\
    """Identity over any tensor (Triton's simple_identity / string_identity)."""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
                responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
            return responses
''')

PYTHON_IDENTITY_CONFIG = build_config(
    "identity",
    backend="python",
    max_batch_size=8,
    inputs=[TensorDecl("INPUT0", "BYTES", (-1,))],
    outputs=[TensorDecl("OUTPUT0", "BYTES", (-1,))],
)

PYTHON_SLEEP = textwrap.dedent('''\
    """Sleeps, then echoes INPUT0 to OUTPUT0 and reports the batch size it executed as BATCH_SIZE.

    The delay is the config parameter ``execute_delay_ms``, overridden by a request parameter of the
    same name (the largest in the batch wins). One sleep per ``execute`` call, like a batched model.
    BATCH_SIZE is INT32 [1] per batch row: the sum of the batch dims of every request in the call
    (the number of requests when the model does not batch).
    """
    import json
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            config = json.loads(args["model_config"])
            self.batching = int(config.get("max_batch_size", 0)) > 0
            param = config.get("parameters", {}).get("execute_delay_ms", {})
            self.delay_ms = float(param.get("string_value", "0") or 0)

        def _delay_ms(self, requests):
            delay = self.delay_ms
            for request in requests:
                params = json.loads(request.parameters() or "{}")
                if "execute_delay_ms" in params:
                    delay = max(delay, float(params["execute_delay_ms"]))
            return delay

        def execute(self, requests):
            inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
            batch = sum(int(x.shape[0]) for x in inputs) if self.batching else len(requests)
            time.sleep(self._delay_ms(requests) / 1000.0)
            responses = []
            for x in inputs:
                shape = (x.shape[0], 1) if self.batching else (1,)
                size = np.full(shape, batch, dtype=np.int32)
                responses.append(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("BATCH_SIZE", size)]))
            return responses
''')

PREPROCESS = textwrap.dedent('''\
    """Normalises each FP32 row to zero mean and unit variance (the demo pipeline's first step)."""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                mean = x.mean(axis=-1, keepdims=True)
                std = x.std(axis=-1, keepdims=True)
                y = ((x - mean) / (std + 1e-6)).astype(np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
            return responses
''')


def preprocess_reference(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What ``PREPROCESS`` computes, in numpy."""
    mean = x.mean(axis=-1, keepdims=True)
    std = x.std(axis=-1, keepdims=True)
    normalized: np.ndarray[Any, Any] = ((x - mean) / (std + 1e-6)).astype(np.float32)
    return normalized


def python_sleep_config(
    name: str = "sleep",
    *,
    max_batch_size: int = 8,
    datatype: str = "FP32",
    dims: Sequence[int] = (-1,),
    execute_delay_ms: int = 0,
    dynamic_batching: bool = True,
    instance_count: int = 1,
) -> str:
    """Config for ``PYTHON_SLEEP``."""
    return build_config(
        name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[TensorDecl("INPUT0", datatype, tuple(dims))],
        outputs=[
            TensorDecl("OUTPUT0", datatype, tuple(dims)),
            TensorDecl("BATCH_SIZE", "INT32", (1,)),
        ],
        dynamic_batching=dynamic_batching and max_batch_size > 0,
        instance_kind="KIND_CPU",
        instance_count=instance_count,
        parameters={"execute_delay_ms": str(execute_delay_ms)},
    )


def write_python_model(
    repo_dir: Path | str, name: str, source: str, config_text: str | None, version: int = 1
) -> Path:
    """``<name>/<version>/model.py`` from ``source`` and ``config.pbtxt`` (its name set to name)."""
    model_dir, version_dir = _model_dir(repo_dir, name, version)
    (version_dir / "model.py").write_text(source)
    if config_text is not None:
        cfg = text_format.Parse(config_text, mc.ModelConfig())
        cfg.name = name
        config_text = str(text_format.MessageToString(cfg))
    _write_config(model_dir, config_text)
    return model_dir


def write_python_add_sub(repo_dir: Path | str, name: str = "add_sub", version: int = 1) -> Path:
    """Triton's python ``add_sub`` example (FP32 [4], no batching)."""
    return write_python_model(repo_dir, name, PYTHON_ADD_SUB, PYTHON_ADD_SUB_CONFIG, version)


def write_python_identity(
    repo_dir: Path | str, name: str = "string_identity", version: int = 1
) -> Path:
    """BYTES identity, max_batch_size 8, dims [-1]."""
    return write_python_model(repo_dir, name, PYTHON_IDENTITY, PYTHON_IDENTITY_CONFIG, version)


def write_python_sleep(
    repo_dir: Path | str, name: str = "sleep", version: int = 1, **config: Any
) -> Path:
    """``PYTHON_SLEEP`` with ``python_sleep_config(**config)``."""
    return write_python_model(
        repo_dir, name, PYTHON_SLEEP, python_sleep_config(name, **config), version
    )


# --------------------------------------------------------------------------- ensembles, demo set


def write_ensemble(
    repo_dir: Path | str,
    name: str,
    steps: Sequence[EnsembleStep],
    *,
    inputs: Sequence[TensorDecl],
    outputs: Sequence[TensorDecl],
    max_batch_size: int = 0,
    version: int = 1,
) -> Path:
    """An ensemble config over existing models (with an empty version folder, as Triton wants)."""
    model_dir, _ = _model_dir(repo_dir, name, version)
    cfg = text_format.Parse(
        build_config(
            name, platform="ensemble", max_batch_size=max_batch_size, inputs=inputs, outputs=outputs
        ),
        mc.ModelConfig(),
    )
    for step in steps:
        added = cfg.ensemble_scheduling.step.add(
            model_name=step.model_name, model_version=step.model_version
        )
        added.input_map.update(step.input_map)
        added.output_map.update(step.output_map)
    _write_config(model_dir, str(text_format.MessageToString(cfg)))
    return model_dir


DEMO_FEATURES = 256
DEMO_CLASSES = 16
DEMO_MAX_BATCH_SIZE = 64


def write_demo_repository(repo_dir: Path | str) -> list[Path]:
    """The demo set: ``mlp`` (ONNX, dynamic batching), ``preprocess`` (Python), ``pipeline``."""
    features, mbs = DEMO_FEATURES, DEMO_MAX_BATCH_SIZE
    mlp = write_onnx_mlp(
        repo_dir, "mlp", sizes=(features, 1024, 1024, DEMO_CLASSES), max_batch_size=mbs
    )
    preprocess_config = build_config(
        "preprocess",
        backend="python",
        max_batch_size=mbs,
        inputs=[TensorDecl("INPUT0", "FP32", (features,))],
        outputs=[TensorDecl("OUTPUT0", "FP32", (features,))],
        dynamic_batching=True,
        instance_kind="KIND_CPU",
    )
    preprocess = write_python_model(repo_dir, "preprocess", PREPROCESS, preprocess_config)
    pipeline = write_ensemble(
        repo_dir,
        "pipeline",
        [
            EnsembleStep("preprocess", {"INPUT0": "INPUT0"}, {"OUTPUT0": "normalized"}),
            EnsembleStep("mlp", {"INPUT0": "normalized"}, {"OUTPUT0": "OUTPUT0"}),
        ],
        inputs=[TensorDecl("INPUT0", "FP32", (features,))],
        outputs=[TensorDecl("OUTPUT0", "FP32", (DEMO_CLASSES,))],
        max_batch_size=mbs,
    )
    return [mlp, preprocess, pipeline]
