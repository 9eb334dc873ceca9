"""TensorRT backend (``tensorrt_plan``): a serialised engine ``model.plan`` on one GPU.

A plan only runs on a GPU: on a CPU placement, or where no GPU or no ``tensorrt`` package exists,
the load fails UNAVAILABLE with a reason saying so. Device buffers are torch CUDA tensors (torch is
already a dependency), bound by name with TensorRT's name-based I/O API (``set_tensor_address``,
``execute_async_v3``) on the instance's own CUDA stream. Dynamic shapes run within the instance's
optimisation profile (its group's first ``profile``, else 0): a config whose ``max_batch_size``
the profile cannot take fails the load, a request outside it fails alone.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from serving.backends.artifacts import model_file
from serving.backends.base import ExecuteResult, ModelInstance, TensorInfo
from serving.backends.batching import BatchExecutor
from serving.core.types import InferRequest
from serving.errors import InternalError, InvalidArgumentError, UnavailableError

_TRT_TO_WIRE = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "UINT8": "UINT8",
}


class TensorRTInstance(ModelInstance):
    """One deserialised engine and execution context on ``cuda:<device_id>``."""

    _engine: Any = None
    _context: Any = None

    def load(self) -> None:
        if self.placement.kind != "KIND_GPU":
            raise self._needs_gpu("this instance is placed on the CPU (no GPU available)")
        path = model_file(self.spec, "model.plan")
        try:
            import torch
        except ImportError as error:  # pragma: no cover - torch is a dependency
            raise self._needs_gpu(f"torch with CUDA is not installed ({error})") from error
        if not torch.cuda.is_available():
            raise self._needs_gpu("no GPU is available on this server")
        try:
            import tensorrt as trt
        except ImportError as error:
            raise self._needs_gpu(f"the tensorrt package is not installed ({error})") from error
        self._trt, self._torch = trt, torch
        self._device = torch.device(f"cuda:{self.placement.device_id}")
        with torch.cuda.device(self._device):
            self._stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
            runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            self._engine = runtime.deserialize_cuda_engine(path.read_bytes())
            if self._engine is None:
                raise UnavailableError(
                    f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                    f"TensorRT could not deserialise '{path.name}' (built for another GPU or "
                    f"TensorRT version?)"
                )
            self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        mode = trt.TensorIOMode.INPUT
        self._inputs = [n for n in names if self._engine.get_tensor_mode(n) == mode]
        self._outputs = [n for n in names if self._engine.get_tensor_mode(n) != mode]
        self._profiles = self._select_profile()
        self._lock = threading.Lock()
        self._executor = BatchExecutor(
            self.spec.config, model_version=self.spec.version, run=self._run
        )

    @classmethod
    def gpu_unusable_reason(cls) -> str | None:
        try:
            import tensorrt  # noqa: F401
            import torch
        except ImportError as error:
            return f"the tensorrt package is not installed ({error})"
        return None if torch.cuda.is_available() else "torch has no usable CUDA"

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        with self._lock:
            return self._executor(requests)

    def unload(self) -> None:
        self._context = None
        self._engine = None

    def artifact_io(self) -> tuple[list[TensorInfo], list[TensorInfo]] | None:
        if self._engine is None:
            return None
        return [self._info(n) for n in self._inputs], [self._info(n) for n in self._outputs]

    def _select_profile(self) -> dict[str, ProfileShapes]:
        engine, profile = self._engine, self.placement.profile
        if profile >= engine.num_optimization_profiles:
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: instance "
                f"'{self.placement.name}' asks for optimisation profile {profile}; the engine has "
                f"{engine.num_optimization_profiles}"
            )
        self._context.set_optimization_profile_async(profile, self._stream.cuda_stream)
        shapes = {
            name: ProfileShapes(*(tuple(int(d) for d in s)
                                  for s in engine.get_tensor_profile_shape(name, profile)))
            for name in self._inputs
            if any(int(d) < 0 for d in engine.get_tensor_shape(name))
        }  # fmt: skip
        problems = batch_problems(shapes, self.spec.config.max_batch_size, profile)
        if problems:
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                + "; ".join(problems)
            )
        return shapes

    def _info(self, name: str) -> TensorInfo:
        dtype = self._engine.get_tensor_dtype(name).name
        shape = tuple(int(d) for d in self._engine.get_tensor_shape(name))
        return TensorInfo(name=name, datatype=_TRT_TO_WIRE.get(dtype, dtype), shape=shape)

    def _run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        torch, context = self._torch, self._context
        if context is None:
            raise UnavailableError(f"model '{self.spec.name}' instance is not loaded")
        keep: list[Any] = []
        with torch.cuda.device(self._device):
            for name in self._inputs:
                if name not in inputs:
                    raise InternalError(f"TensorRT engine input '{name}' is missing")
                array = inputs[name]
                if name in self._profiles:
                    problem = shape_problem(name, array.shape, self._profiles[name])
                    if problem:
                        raise InvalidArgumentError(problem)
                tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self._device)
                keep.append(tensor)
                context.set_input_shape(name, tuple(tensor.shape))
                context.set_tensor_address(name, tensor.data_ptr())
            produced: dict[str, Any] = {}
            for name in self._outputs:
                shape = tuple(context.get_tensor_shape(name))
                numpy_type = self._trt.nptype(self._engine.get_tensor_dtype(name))
                dtype = torch.from_numpy(np.empty(0, dtype=numpy_type)).dtype
                tensor = torch.empty(shape, dtype=dtype, device=self._device)
                produced[name] = tensor
                context.set_tensor_address(name, tensor.data_ptr())
            if not context.execute_async_v3(self._stream.cuda_stream):
                raise InternalError(f"TensorRT execution of model '{self.spec.name}' failed")
            self._stream.synchronize()
        return {name: produced[name].cpu().numpy() for name in outputs if name in produced}

    def _needs_gpu(self, why: str) -> UnavailableError:
        return UnavailableError(
            f"failed to load model '{self.spec.name}' version {self.spec.version}: "
            f"TensorRT plans (tensorrt_plan) require a GPU; {why}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ProfileShapes:
    """One input's shapes in an optimisation profile: the least, the tuned-for and the most."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


def shape_problem(name: str, shape: tuple[int, ...], profile: ProfileShapes) -> str:
    """Why ``shape`` cannot run within the profile; "" when it can."""
    if len(shape) == len(profile.min) and all(
        lo <= d <= hi for d, lo, hi in zip(shape, profile.min, profile.max, strict=True)
    ):
        return ""
    return (
        f"input '{name}': shape {list(shape)} is outside the engine's optimisation profile "
        f"(min {list(profile.min)}, max {list(profile.max)})"
    )


def batch_problems(
    shapes: dict[str, ProfileShapes], max_batch_size: int, profile: int
) -> list[str]:
    """Inputs whose profile cannot take the batches the config lets the batcher form."""
    return [
        f"input '{name}': max_batch_size {max_batch_size} exceeds the batch dimension of "
        f"optimisation profile {profile} (at most {shape.max[0]})"
        for name, shape in shapes.items()
        if max_batch_size > 0 and shape.max and shape.max[0] < max_batch_size
    ]
