"""The ensemble scheduler (PROTOCOL.md §5.4): a dataflow of steps over composing models.

Every step whose inputs are available starts at once; when one finishes its outputs become
ensemble tensors and newly satisfied steps start, so independent branches run concurrently. Each
step is an ordinary ``await server.infer(step_request)``: its model's own scheduler, batching and
statistics apply. Intermediate tensors stay numpy arrays in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

import numpy as np

from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import InternalError, ServingError, UnavailableError
from serving.schedulers.base import Scheduler
from serving.schedulers.ensemble_validation import step_version, validate_ensemble
from serving.schedulers.queued import STOPPING_MESSAGE


class EnsembleHost(Protocol):
    """What an ensemble needs from the server: resolve a composing model, run a request."""

    def resolve(self, name: str, version: int | None) -> Any: ...

    async def infer(self, request: InferRequest) -> InferResponse: ...


class EnsembleScheduler(Scheduler):
    """Runs an ensemble request as a dataflow of composing-model requests."""

    def __init__(self, *, spec: ModelSpec, statistics: ModelStatistics, server: EnsembleHost):
        self.spec = spec
        self.statistics = statistics
        self.server = server
        self._steps = list(spec.config.ensemble_scheduling.step)
        self._max_inflight = int(spec.config.ensemble_scheduling.max_inflight_requests)
        self._limits: list[asyncio.Semaphore] = []
        self._in_flight = 0
        self._waiting_steps = 0
        self._accepting = False
        self._idle: asyncio.Event | None = None

    async def start(self) -> None:
        validate_ensemble(self.spec.config, self.server)
        if self._max_inflight > 0:
            self._limits = [asyncio.Semaphore(self._max_inflight) for _ in self._steps]
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = True

    async def stop(self, *, drain_timeout_s: float) -> None:
        self._accepting = False
        if self._idle is not None and self._in_flight:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=drain_timeout_s)

    @property
    def queue_depth(self) -> int:
        return self._waiting_steps

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def infer(self, request: InferRequest) -> InferResponse:
        if not self._accepting:
            raise UnavailableError(STOPPING_MESSAGE)
        assert self._idle is not None
        self._in_flight += 1
        self._idle.clear()
        try:
            response = await self._run(request)
        except asyncio.CancelledError:
            self._record_failure(request, "CANCELED")
            raise
        except ServingError:
            self._record_failure(request, "OTHER")  # Triton reports ensemble failures as OTHER
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        total_ns = time.monotonic_ns() - request.arrival_ns
        self.statistics.record_success(
            total_ns=total_ns, queue_ns=0, compute_input_ns=0, compute_infer_ns=0,
            compute_output_ns=0,
        )  # fmt: skip
        batch = request.batch_size(int(self.spec.config.max_batch_size))
        self.statistics.record_execution(
            batch_size=batch, compute_input_ns=0, compute_infer_ns=total_ns, compute_output_ns=0
        )
        return response

    def _record_failure(self, request: InferRequest, reason: str) -> None:
        self.statistics.record_failure(
            reason=reason, total_ns=time.monotonic_ns() - request.arrival_ns
        )

    async def _run(self, request: InferRequest) -> InferResponse:
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        waiting = set(range(len(self._steps)))
        running: dict[asyncio.Task[InferResponse], int] = {}
        try:
            while True:
                for index in sorted(waiting):
                    if set(self._steps[index].input_map.values()) <= tensors.keys():
                        waiting.discard(index)
                        task = asyncio.create_task(self._step(index, request, tensors))
                        running[task] = index
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    index = running.pop(task)
                    outputs = self._step_result(index, task)
                    for model_output, tensor in self._steps[index].output_map.items():
                        if model_output in outputs:
                            tensors[tensor] = outputs[model_output]
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return self._response(request, tensors)

    def _step_result(self, index: int, task: asyncio.Task[InferResponse]) -> dict[str, Any]:
        try:
            return task.result().outputs
        except ServingError as exc:
            step = self._steps[index]
            raise ServingError(
                f"in ensemble '{self.spec.name}', step {index} (model '{step.model_name}'): "
                f"{exc.message}",
                code=exc.code,
            ) from exc

    async def _step(
        self, index: int, request: InferRequest, tensors: dict[str, np.ndarray]
    ) -> InferResponse:
        step = self._steps[index]
        step_request = InferRequest(
            model_name=step.model_name,
            model_version=step_version(step),
            inputs={model_input: tensors[t] for model_input, t in step.input_map.items()},
            id=request.id,
            outputs=[RequestedOutput(name) for name in step.output_map],
            parameters=dict(request.parameters),
            priority=request.priority,
            timeout_us=request.timeout_us,
            sequence_id=request.sequence_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
        )
        if not self._limits:
            return await self.server.infer(step_request)
        # Backpressure: at most max_inflight_requests of this step in flight at a time.
        self._waiting_steps += 1
        try:
            await self._limits[index].acquire()
        finally:
            self._waiting_steps -= 1
        try:
            return await self.server.infer(step_request)
        finally:
            self._limits[index].release()

    def _response(self, request: InferRequest, tensors: dict[str, np.ndarray]) -> InferResponse:
        outputs: dict[str, np.ndarray] = {}
        for output in self.spec.config.output:
            if output.name not in tensors:
                raise InternalError(
                    f"in ensemble '{self.spec.name}', output '{output.name}' was not produced"
                )
            outputs[output.name] = tensors[output.name]
        return InferResponse(
            model_name=self.spec.name,
            model_version=self.spec.version,
            outputs=outputs,
            id=request.id,
        )
