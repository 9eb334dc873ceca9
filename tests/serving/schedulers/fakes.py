"""Small in-test model instances that honour the real ModelInstance contract.

They run in the scheduler's threads like real backends, record every batch they were given and
answer each request with ``OUT = IN * 2`` (plus any control inputs echoed), so tests can assert on
batch composition without a runtime.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from serving.backends.base import ExecuteResult, InstancePlacement, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, ServingError


def make_spec(config_text: str, *, name: str = "m", version: int = 1) -> ModelSpec:
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    if not config.name:
        config.name = name
    return ModelSpec(
        name=config.name, version=version, config=config, model_dir=Path("."), version_dir=Path(".")
    )


class RecordingInstance(ModelInstance):
    """Doubles ``IN`` into ``OUT``, sleeps ``delay_s`` per batch, records batches' request ids."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        delay_s: float = 0.0,
        index: int = 0,
        fail_batch: Callable[[Sequence[InferRequest]], BaseException | None] | None = None,
        fail_request: Callable[[InferRequest], ServingError | None] | None = None,
    ) -> None:
        super().__init__(spec, InstancePlacement(name=f"{spec.name}_0", kind="KIND_CPU"))
        self.delay_s = delay_s
        self.index = index
        self.fail_batch = fail_batch
        self.fail_request = fail_request
        self.batches: list[list[str]] = []
        self.inputs_seen: list[list[dict[str, np.ndarray]]] = []
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        pass

    def unload(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        with self._lock:
            self.batches.append([r.id for r in requests])
            self.inputs_seen.append([dict(r.inputs) for r in requests])
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_batch is not None:
            error = self.fail_batch(requests)
            if error is not None:
                raise error
        results: list[ExecuteResult] = []
        for request in requests:
            failure = self.fail_request(request) if self.fail_request else None
            if failure is not None:
                results.append(failure)
                continue
            outputs = (
                {"OUT": np.asarray(request.inputs["IN"]) * 2} if "IN" in request.inputs else {}
            )
            for name, value in request.inputs.items():
                if name != "IN":
                    outputs[name] = np.asarray(value)
            outputs["INSTANCE"] = np.array([self.index], dtype=np.int32)
            results.append(
                InferResponse(
                    model_name=self.spec.name,
                    model_version=self.spec.version,
                    outputs=outputs,
                    id=request.id,
                )
            )
        return results


def boom(message: str = "boom") -> Callable[[Sequence[InferRequest]], BaseException]:
    return lambda requests: InternalError(message)


def request(
    request_id: str,
    *,
    model: str = "m",
    batch: int = 1,
    width: int = 4,
    value: float = 1.0,
    **fields: object,
) -> InferRequest:
    data = np.full((batch, width), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs={"IN": data}, id=request_id, **fields)  # type: ignore[arg-type]


class FunctionInstance(ModelInstance):
    """Answers each request with ``fn(inputs)``, after sleeping ``delay_s`` per batch."""

    def __init__(
        self,
        spec: ModelSpec,
        fn: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
        *,
        delay_s: float = 0.0,
    ) -> None:
        super().__init__(spec, InstancePlacement(name=f"{spec.name}_0", kind="KIND_CPU"))
        self.fn = fn
        self.delay_s = delay_s

    def load(self) -> None:
        pass

    def unload(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        if self.delay_s:
            time.sleep(self.delay_s)
        results: list[ExecuteResult] = []
        for req in requests:
            try:
                outputs = self.fn(dict(req.inputs))
            except ServingError as exc:
                results.append(exc)
                continue
            results.append(
                InferResponse(self.spec.name, self.spec.version, outputs=outputs, id=req.id)
            )
        return results
