"""Warm a version up before it is reported READY.

``model_warmup`` entries of the config run on every instance (``zero_data``, ``random_data`` or
``input_data_file`` from the model's ``warmup/`` folder), each ``count`` times; a failure fails the
load, as in Triton. A model without entries gets one generated request of its declared shapes
(-1 dims as 1); by default its failure is only logged, since zeros may be meaningless to a model.
Stateful (sequence-batching) models get no generated request.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2

from serving.backends.base import ModelInstance
from serving.backends.tensors import config_type_name, numpy_dtype
from serving.core.model_spec import ModelSpec
from serving.core.types import InferRequest
from serving.errors import ServingError, UnavailableError

logger = logging.getLogger(__name__)


def run_warmup(
    spec: ModelSpec, instances: Sequence[ModelInstance], *, strict_generated: bool = False
) -> int:
    """Warm every instance up; returns the number of warm-up requests executed."""
    executed = 0
    if spec.config.model_warmup:
        for warmup in spec.config.model_warmup:
            request = warmup_request(spec, warmup)
            for instance in instances:
                for _ in range(max(warmup.count, 1)):
                    _execute(instance, request, f"model warmup '{warmup.name}'", spec)
                    executed += 1
        return executed
    if spec.config.HasField("sequence_batching"):
        # NOTE: a stray request would start (or corrupt) sequence state; only explicit entries run.
        return 0
    request = generated_request(spec)
    for instance in instances:
        try:
            _execute(instance, request, "generated warm-up", spec)
            executed += 1
        except ServingError as error:
            if strict_generated:
                raise
            logger.warning("%s", error.message)
            break
    return executed


def _execute(instance: ModelInstance, request: InferRequest, what: str, spec: ModelSpec) -> None:
    (result,) = instance.execute_checked([request])
    if isinstance(result, ServingError):
        raise UnavailableError(
            f"{what} of model '{spec.name}' version {spec.version} failed: {result.message}"
        )


def generated_request(
    spec: ModelSpec, *, batch_size: int = 1, random: bool = False
) -> InferRequest:
    """A request with data of the declared shapes (-1 as 1): zeros, or random values."""
    config = spec.config
    rng = np.random.default_rng(0)
    inputs: dict[str, np.ndarray] = {}
    for declared in config.input:
        dims = [d if d > 0 else 1 for d in declared.dims]
        shape = ([batch_size] if config.max_batch_size > 0 else []) + dims
        inputs[declared.name] = _data(declared.data_type, shape, random=random, rng=rng)
    return InferRequest(
        model_name=spec.name, model_version=spec.version, inputs=inputs, id="warmup"
    )


def warmup_request(spec: ModelSpec, warmup: model_config_pb2.ModelWarmup) -> InferRequest:
    """The request a ``model_warmup`` entry describes."""
    config = spec.config
    batch = max(warmup.batch_size, 1) if config.max_batch_size > 0 else 0
    rng = np.random.default_rng(0)
    inputs: dict[str, np.ndarray] = {}
    for name, data in warmup.inputs.items():
        shape = ([batch] if batch else []) + [int(d) for d in data.dims]
        kind = data.WhichOneof("input_data_type")
        if kind == "input_data_file":
            array = _from_file(spec.model_dir / "warmup" / data.input_data_file, data, shape)
        else:
            array = _data(data.data_type, shape, random=kind == "random_data", rng=rng)
        inputs[name] = array
    return InferRequest(
        model_name=spec.name, model_version=spec.version, inputs=inputs, id="warmup"
    )


def _data(
    data_type: int, shape: list[int], *, random: bool, rng: np.random.Generator
) -> np.ndarray:
    dtype = numpy_dtype(data_type)
    if dtype.kind == "O":
        array = np.empty(shape, dtype=object)
        array.fill(b"")
        return array
    if not random:
        return np.zeros(shape, dtype=dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.random(size=shape).astype(dtype)


def _from_file(
    path: Path, data: model_config_pb2.ModelWarmup.Input, shape: list[int]
) -> np.ndarray:
    if not path.is_file():
        raise UnavailableError(f"warmup data file '{path.name}' not found in the warmup folder")
    raw = path.read_bytes()
    dtype = numpy_dtype(data.data_type)
    count = int(np.prod(shape)) if shape else 1
    if dtype.kind == "O":
        items: list[bytes] = []
        offset = 0
        while offset < len(raw) and len(items) < count:
            (length,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + length])
            offset += 4 + length
        if len(items) < count:
            raise UnavailableError(f"warmup data file '{path.name}' holds too few strings")
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)
    needed = count * dtype.itemsize
    if len(raw) < needed:
        raise UnavailableError(
            f"warmup data file '{path.name}' has {len(raw)} bytes, "
            f"{config_type_name(data.data_type)} {shape} needs {needed}"
        )
    return np.frombuffer(raw[:needed], dtype=dtype).reshape(shape).copy()
