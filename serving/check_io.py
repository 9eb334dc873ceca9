"""What ``serving.check`` compares and replays: declared I/O against the artifact, golden requests.

Golden requests carry KServe v2 JSON inputs (``[{"name", "datatype", "shape", "data"}]``, or an
object with those under ``"inputs"``) and, optionally, expected outputs ``{name: {"datatype",
"shape", "data"}}`` compared within ``rtol``/``atol`` (exact for integers, BOOL and BYTES).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from repository.config.golden import compare_outputs, flatten
from serving.backends.base import ModelInstance, TensorInfo
from serving.backends.tensors import full_shape, wire_datatype, wire_datatype_of
from serving.core.model_spec import ModelSpec
from serving.core.types import InferRequest, InferResponse
from serving.errors import InvalidArgumentError, ServingError
from serving.protocol.json_codec import tensor_from_json, tensor_to_json

__all__ = ["compare_outputs", "declared_io", "golden_request", "io_problems", "outputs_json"]


def declared_io(config: model_config_pb2.ModelConfig, kind: str) -> list[dict[str, Any]]:
    """The config's inputs or outputs for the report: name, datatype, dims, full shape."""
    return [
        {
            "name": t.name,
            "datatype": wire_datatype(t.data_type),
            "dims": [int(d) for d in t.dims],
            "shape": full_shape(t.dims, config.max_batch_size),
        }
        for t in getattr(config, kind)
    ]


def io_problems(
    config: model_config_pb2.ModelConfig,
    artifact_inputs: Sequence[TensorInfo],
    artifact_outputs: Sequence[TensorInfo],
) -> list[str]:
    """Every disagreement between the config and what the model file really declares."""
    problems = _compare("input", config.input, artifact_inputs, config.max_batch_size)
    problems += _compare("output", config.output, artifact_outputs, config.max_batch_size)
    declared = {t.name for t in config.input}
    for tensor in artifact_inputs:
        if tensor.name not in declared:
            problems.append(
                f"input '{tensor.name}': the model requires it but the config does not declare it"
            )
    return problems


def _compare(
    kind: str, declared: Any, actual: Sequence[TensorInfo], max_batch_size: int
) -> list[str]:
    by_name = {t.name: t for t in actual}
    problems = []
    for index, tensor in enumerate(declared):
        where = f"{kind}[{index}] '{tensor.name}'"
        real = by_name.get(tensor.name)
        if real is None:
            names = ", ".join(sorted(by_name)) or "none"
            problems.append(f"{where}: the model has no such {kind} (model {kind}s: {names})")
            continue
        datatype = wire_datatype(tensor.data_type)
        if datatype != real.datatype:
            problems.append(
                f"{where}: the config says data_type {datatype}, the model has {real.datatype}"
            )
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        expected = full_shape(dims, max_batch_size)
        if not _shapes_agree(expected, list(real.shape)):
            problems.append(
                f"{where}: the config implies shape {expected}, the model has {list(real.shape)}"
            )
    return problems


def _shapes_agree(expected: list[int], actual: list[int]) -> bool:
    if len(expected) != len(actual):
        return False
    return all(e == a or e == -1 or a == -1 for e, a in zip(expected, actual, strict=True))


def golden_inputs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    inputs = entry.get("inputs")
    if isinstance(inputs, dict):
        inputs = inputs.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidArgumentError("golden request: 'inputs' must be a list of KServe v2 inputs")
    return inputs


def golden_request(entry: dict[str, Any], *, model_name: str, version: int) -> InferRequest:
    arrays: dict[str, np.ndarray] = {}
    for item in golden_inputs(entry):
        name, datatype = str(item["name"]), str(item["datatype"])
        shape = [int(d) for d in item["shape"]]
        if datatype in ("FP16", "BF16"):
            arrays[name] = _half_from_json(item["data"], datatype, shape)
        else:
            arrays[name] = tensor_from_json(item["data"], datatype, shape, name=name)
    return InferRequest(
        model_name=model_name, model_version=version, inputs=arrays, id=str(entry.get("id", ""))
    )


def replay_golden(
    entry: dict[str, Any], *, spec: ModelSpec, instance: ModelInstance
) -> dict[str, Any]:
    """Run one golden request on a loaded instance: ``{"id", "ok", "message", "outputs"}``."""
    result: dict[str, Any] = {"id": entry.get("id"), "ok": False, "message": "", "outputs": {}}
    try:
        request = golden_request(entry, model_name=spec.name, version=spec.version)
        (response,) = instance.execute_checked([request])
    except ServingError as error:
        result["message"] = error.message
        return result
    if isinstance(response, ServingError):
        result["message"] = response.message
        return result
    result["outputs"] = outputs_json(response)
    expected = entry.get("outputs") or entry.get("expected_outputs")
    if expected:
        rtol, atol = float(entry.get("rtol", 1e-5)), float(entry.get("atol", 1e-6))
        problems = compare_outputs(result["outputs"], expected, rtol=rtol, atol=atol)
        result["message"] = "; ".join(problems) or "matches the expected outputs"
        result["ok"] = not problems
    else:
        result["ok"], result["message"] = True, "ran (no expected outputs to compare)"
    return result


def outputs_json(response: InferResponse) -> dict[str, dict[str, Any]]:
    """Outputs as ``{name: {"datatype", "shape", "data"}}`` (data flattened, row-major)."""
    out = {}
    for name, array in response.outputs.items():
        datatype = wire_datatype_of(array)
        if datatype in ("FP16", "BF16"):
            data = array.astype(np.float32).ravel().tolist()
        else:
            data = tensor_to_json(array, datatype, name)
        out[name] = {"datatype": datatype, "shape": list(array.shape), "data": data}
    return out


def _half_from_json(data: Any, datatype: str, shape: list[int]) -> np.ndarray:
    values = np.asarray(flatten(data), dtype=np.float32).reshape(shape)
    if datatype == "FP16":
        return values.astype(np.float16)
    from ml_dtypes import bfloat16

    return values.astype(bfloat16)
