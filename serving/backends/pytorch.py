"""PyTorch backend (``pytorch_libtorch``): a TorchScript ``model.pt`` (``torch.jit.load``).

Triton's naming convention applies: inputs named ``<name>__<i>`` are passed positionally by ``i``
(otherwise in config order), outputs named ``<name>__<i>`` are taken from the ``i``-th returned
tensor (otherwise in config order). torch is imported only when a PyTorch model loads. The intra-op
thread count (``torch.set_num_threads``) is set in the thread that executes, from the placement or
the ``INTRA_OP_THREAD_COUNT`` parameter; GPU placements run on ``cuda:<device_id>``, and fail to
load where torch has no CUDA (never a silent CPU fallback).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from serving.backends.artifacts import model_file
from serving.backends.base import ExecuteResult, ModelInstance
from serving.backends.batching import BatchExecutor
from serving.core.types import InferRequest
from serving.errors import InternalError, UnavailableError, UnsupportedError

_INDEXED = re.compile(r"^.+__(\d+)$")


def _order(names: list[str]) -> list[int]:
    """Positions of config tensors: their ``__<i>`` suffixes if all have one, else in order."""
    matches = [_INDEXED.match(name) for name in names]
    if names and all(matches):
        return [int(m.group(1)) for m in matches if m]
    return list(range(len(names)))


class TorchScriptInstance(ModelInstance):
    """One TorchScript module on the CPU or one GPU."""

    _module: Any = None

    def load(self) -> None:
        config = self.spec.config
        if any(t.data_type == 13 for t in [*config.input, *config.output]):  # TYPE_STRING
            raise UnsupportedError(
                f"model '{self.spec.name}': BYTES tensors are not supported by the pytorch backend"
            )
        path = model_file(self.spec, "model.pt")
        try:
            import torch
        except ImportError as error:
            raise UnavailableError(f"the pytorch backend needs torch: {error}") from error
        self._torch = torch
        self._device = self._pick_device(torch)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated
                module = torch.jit.load(str(path), map_location=self._device)  # type: ignore[no-untyped-call]
        except Exception as error:  # noqa: BLE001 - torch raises RuntimeError and friends
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                f"torch.jit.load failed: {error}"
            ) from error
        module.eval()
        self._module = module
        self._input_order = _order([i.name for i in config.input])
        self._output_order = _order([o.name for o in config.output])
        self._threads = self.placement.intra_op_threads
        self._lock = threading.Lock()
        self._executor = BatchExecutor(
            self.spec.config, model_version=self.spec.version, run=self._run
        )

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        with self._lock:
            return self._executor(requests)

    def can_run_inline(self) -> bool:
        # A CUDA module waits on the device; only CPU runs have a cost that follows the inputs.
        device = getattr(self, "_device", None)
        return device is not None and device.type == "cpu"

    def unload(self) -> None:
        self._module = None

    def _run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        torch = self._torch
        if self._module is None:
            raise UnavailableError(f"model '{self.spec.name}' instance is not loaded")
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        config = self.spec.config
        args: list[Any] = [None] * len(config.input)
        for position, declared in zip(self._input_order, config.input, strict=True):
            if position >= len(args):
                raise InternalError(f"input '{declared.name}': index {position} out of range")
            if declared.name in inputs:
                args[position] = torch.from_numpy(_writable_contiguous(inputs[declared.name]))
        args = [a.to(self._device) if a is not None else None for a in args]
        with torch.inference_mode():
            result = self._module(*args)
        values = list(result) if isinstance(result, list | tuple) else [result]
        produced: dict[str, np.ndarray] = {}
        for position, declared in zip(self._output_order, config.output, strict=True):
            if declared.name not in outputs:
                continue
            if position >= len(values):
                raise InternalError(
                    f"model '{self.spec.name}' returned {len(values)} outputs; output "
                    f"'{declared.name}' expects index {position}"
                )
            produced[declared.name] = values[position].detach().cpu().numpy()
        return produced

    @classmethod
    def gpu_unusable_reason(cls) -> str | None:
        try:
            import torch
        except ImportError as error:
            return f"torch cannot be imported ({error})"
        if torch.cuda.is_available():
            return None
        build = "a CPU-only build" if torch.version.cuda is None else "no usable CUDA device"
        return f"torch {torch.__version__} has {build} (torch.cuda.is_available() is False)"

    def _pick_device(self, torch: Any) -> Any:
        if self.placement.kind != "KIND_GPU":
            return torch.device("cpu")
        self.require_usable_gpu()
        return torch.device(f"cuda:{self.placement.device_id}")


def _writable_contiguous(array: np.ndarray) -> np.ndarray:
    """The array itself when torch can wrap it, else a C-ordered copy.

    NOTE: tensors decoded from the wire are read-only views of the request body, and
    torch.from_numpy warns on (and must not write through) a read-only buffer.
    """
    if array.flags.writeable and array.flags.c_contiguous:
        return array
    return np.array(array, order="C", copy=True)
