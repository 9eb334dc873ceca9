"""ONNX Runtime backend (``onnxruntime_onnx``).

Runs on the CPU execution provider; a GPU placement runs on the CUDA provider (and TensorRT's, when
the config asks for it in ``optimization.execution_accelerators``, see ``ort_providers``), and
fails to load, never falls back to the CPU, where the runtime has no CUDA. Sessions
are sized by the instance's placement (intra-op threads) and config ``parameters``:
``intra_op_thread_count``, ``inter_op_thread_count``, ``enable_mem_arena``, ``allow_spinning``,
``thread_pool_nice`` and ``graph_optimization_level`` (same meaning as
``optimization.graph.level``: -1 basic, 1 extended, otherwise all). Only the outputs a batch asked
for are computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from repository.config.accelerators import CUDA_PROVIDER, provider_options
from serving.backends.artifacts import engine_cache_dir, model_file
from serving.backends.base import ExecuteResult, ModelInstance, TensorInfo
from serving.backends.batching import BatchExecutor
from serving.backends.registry import bool_parameter, int_parameter
from serving.backends.thread_priority import MAX_NICE, built_at_nice
from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError, UnavailableError

CPU_PROVIDER = "CPUExecutionProvider"

# ORT's pool threads spin between runs; at this nice value above the serving process's they spin
# only on cores nothing else wants, so under load the protocol work gets the cores and a lone
# client keeps the spin's latency (docs/backends.md has the figures; 0 turns it off).
DEFAULT_THREAD_POOL_NICE = 10

ORT_TO_WIRE = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(bfloat16)": "BF16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


class OnnxRuntimeInstance(ModelInstance):
    """One ``InferenceSession``; the scheduler sends it one batch at a time."""

    _session: ort.InferenceSession | None = None
    _string_inputs: frozenset[str] = frozenset()
    _string_outputs: frozenset[str] = frozenset()
    _cpu_only = False
    # The session's run: (output names, feed, run options) -> output values.
    _session_run: Callable[[list[str], dict[str, Any], Any], list[Any]] | None = None

    def load(self) -> None:
        path = model_file(self.spec, "model.onnx")
        if path.is_dir():
            path = path / "model.onnx"
        nice = self._thread_pool_nice()
        try:
            # ORT creates its pool threads with the session: built at ``thread_pool_nice``,
            # they run at that priority, and the threads that call ``run`` keep theirs.
            self._session = built_at_nice(
                lambda: ort.InferenceSession(
                    str(path), sess_options=self._session_options(), providers=self._providers()
                ),
                nice,
                name=f"load-{self.spec.name}",
            )
        except Exception as error:  # noqa: BLE001 - ORT raises its own exception types
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                f"onnxruntime could not load the model: {error}"
            ) from error
        self._string_inputs = frozenset(
            i.name for i in self._session.get_inputs() if i.type == "tensor(string)"
        )
        self._string_outputs = frozenset(
            o.name for o in self._session.get_outputs() if o.type == "tensor(string)"
        )
        self._cpu_only = self._session.get_providers() == [CPU_PROVIDER]
        # NOTE: a CPU session runs through ORT's binding itself. The Python ``run`` around it
        # checks the feed (``RequestChecker`` has, for every request) and retries a failed
        # provider on the next one (a CPU session has none after it): four Python calls a run.
        self._session_run = self._session._sess.run if self._cpu_only else self._session.run
        self._executor = BatchExecutor(
            self.spec.config, model_version=self.spec.version, run=self._run
        )

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        return self._executor(requests)

    def execute_checked(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        # NOTE: the batch executor answers each request once, so the base class's count check
        # (and its call to ``execute``) has nothing to catch: two calls less on every run.
        return self._executor(requests)

    @classmethod
    def gpu_unusable_reason(cls) -> str | None:
        if CUDA_PROVIDER in ort.get_available_providers():
            return None
        return (
            f"onnxruntime {ort.__version__} has no {CUDA_PROVIDER} "
            "(the CPU build is installed; install the GPU requirements)"
        )

    def can_run_inline(self) -> bool:
        # A GPU session waits on the device; only the CPU provider's cost follows the inputs.
        return self._cpu_only

    def unload(self) -> None:
        self._session = None
        self._session_run = None

    def artifact_io(self) -> tuple[list[TensorInfo], list[TensorInfo]] | None:
        session = self._require_session()
        return (
            [_tensor_info(i) for i in session.get_inputs()],
            [_tensor_info(o) for o in session.get_outputs()],
        )

    @property
    def providers(self) -> list[str]:
        """The execution providers the session really uses, best first."""
        return list(self._require_session().get_providers())

    def _run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        run = self._session_run
        if run is None:
            raise self._not_loaded()
        if not self._string_inputs and not self._string_outputs:  # the common case, kept short
            return dict(zip(outputs, run(outputs, inputs, None), strict=True))
        feed = {
            name: _to_strings(array, name) if name in self._string_inputs else array
            for name, array in inputs.items()
        }
        values = run(outputs, feed, None)
        return {
            name: _to_bytes(value) if name in self._string_outputs else value
            for name, value in zip(outputs, values, strict=True)
        }

    def _require_session(self) -> ort.InferenceSession:
        if self._session is None:
            raise self._not_loaded()
        return self._session

    def _not_loaded(self) -> UnavailableError:
        return UnavailableError(f"model '{self.spec.name}' instance is not loaded")

    def _session_options(self) -> ort.SessionOptions:
        config = self.spec.config
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.placement.intra_op_threads
        inter = int_parameter(config, "inter_op_thread_count") or 1
        options.inter_op_num_threads = inter
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if inter > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        level = int_parameter(config, "graph_optimization_level")
        if level is None:
            level = config.optimization.graph.level
        options.graph_optimization_level = {
            -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        arena = bool_parameter(config, "enable_mem_arena")
        if arena is not None:
            options.enable_cpu_mem_arena = arena
        spinning = bool_parameter(config, "allow_spinning")
        if spinning is not None:
            # ORT's pool threads spin between runs so the next one starts at once: a lone
            # client's latency is lower, but under load the spinning takes cores the protocol
            # work needs (docs/backends.md has the figures).
            for pool in ("intra_op", "inter_op"):
                options.add_session_config_entry(
                    f"session.{pool}.allow_spinning", str(int(spinning))
                )
        options.log_severity_level = 3
        return options

    def _thread_pool_nice(self) -> int:
        config = self.spec.config
        nice = int_parameter(config, "thread_pool_nice")
        if nice is None:
            return DEFAULT_THREAD_POOL_NICE
        if not 0 <= nice <= MAX_NICE:
            raise UnavailableError(
                f"model '{config.name}': parameter 'thread_pool_nice' must be from 0 to "
                f"{MAX_NICE}, got '{nice}'"
            )
        return nice

    def _providers(self) -> list[str | tuple[str, dict[str, str]]]:
        if self.placement.kind != "KIND_GPU":
            return [CPU_PROVIDER]
        self.require_usable_gpu()
        cache_dir = engine_cache_dir(self.spec)
        providers = provider_options(
            self.spec.config, device_id=self.placement.device_id, cache_dir=cache_dir
        )
        missing = [p for p, _ in providers if p not in ort.get_available_providers()]
        if missing:
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                f"onnxruntime {ort.__version__} lacks {', '.join(missing)}"
            )
        return [*providers, CPU_PROVIDER]


def _tensor_info(value: Any) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in value.shape)
    return TensorInfo(
        name=value.name, datatype=ORT_TO_WIRE.get(value.type, value.type), shape=shape
    )


def _to_strings(array: np.ndarray, name: str) -> np.ndarray:
    # NOTE: ORT's Python binding stringifies bytes objects ("b'x'"); it needs str, UTF-8 inside.
    try:
        items = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.ravel()]
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"input '{name}': BYTES elements must be UTF-8 text") from None
    return np.array(items, dtype=object).reshape(array.shape)


def _to_bytes(array: np.ndarray) -> np.ndarray:
    items = [v.encode("utf-8") if isinstance(v, str) else v for v in array.ravel()]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(array.shape)
