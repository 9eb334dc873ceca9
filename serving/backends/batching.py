"""Turn a scheduler's batch of requests into model runs and back into one result per request.

Batching models (``max_batch_size > 0``) get the requests of a batch concatenated along dim 0 and
their outputs split back by each request's batch size. Requests whose inputs cannot be concatenated
(different trailing shapes) run in separate groups. When a concatenated run fails, its requests are
run one by one so that one bad request fails alone and its neighbours still get answers.
Non-batching models run requests one by one. Config ``reshape`` is applied on the way in and out.
``BatchExecutor`` precomputes what it can from the config once per instance: this is the hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2

from serving.backends.base import ExecuteResult
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, InvalidArgumentError, ServingError

from .tensors import RequestChecker

logger = logging.getLogger(__name__)

# Runs the model: model-facing inputs and the output names wanted -> model-facing outputs.
ModelRun = Callable[[dict[str, np.ndarray], list[str]], dict[str, np.ndarray]]


class BatchExecutor:
    """Runs batches of requests through one model ``run`` function; one result per request."""

    def __init__(
        self, config: model_config_pb2.ModelConfig, *, model_version: int, run: ModelRun
    ) -> None:
        self.model_name = config.name
        self.model_version = model_version
        self.max_batch_size = config.max_batch_size
        self.run = run
        self.checker = RequestChecker(config)
        self.outputs = [o.name for o in config.output]
        self._output_names = frozenset(self.outputs)
        self.in_reshape = {
            i.name: list(i.reshape.shape) for i in config.input if i.HasField("reshape")
        }
        self.out_reshape = {o.name: list(o.dims) for o in config.output if o.HasField("reshape")}

    def __call__(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        if len(requests) == 1:  # the common case, kept short
            request = requests[0]
            try:
                self._check(request)
            except ServingError as error:
                return [error]
            return [self._run_one(request)]
        results: list[ExecuteResult | None] = [None] * len(requests)
        runnable: list[int] = []
        for index, request in enumerate(requests):
            try:
                self._check(request)
                runnable.append(index)
            except ServingError as error:
                results[index] = error
        batching = self.max_batch_size > 0
        groups = _groups(requests, runnable) if batching else [[i] for i in runnable]
        for group in groups:
            batch = [requests[i] for i in group]
            for index, result in zip(group, self._run_group(batch), strict=True):
                results[index] = result
        return [r if r is not None else InternalError("request was not executed") for r in results]

    def output_names(self, batch: Sequence[InferRequest]) -> list[str]:
        """The outputs to compute for a batch: the union of what its requests asked for."""
        if len(batch) == 1 and batch[0].outputs is not None and len(batch[0].outputs) == 1:
            name = batch[0].outputs[0].name  # the common case, without a set
            return [name] if name in self._output_names else []
        wanted: set[str] = set()
        for request in batch:
            if request.outputs is None:
                return self.outputs
            wanted.update(o.name for o in request.outputs)
        return [name for name in self.outputs if name in wanted]

    def _check(self, request: InferRequest) -> None:
        self.checker.check(request)
        if request.outputs is not None:
            for output in request.outputs:
                if output.name not in self._output_names:
                    raise InvalidArgumentError(
                        f"unexpected inference output '{output.name}' for model '{self.model_name}'"
                    )

    def _run_group(self, batch: list[InferRequest]) -> list[ExecuteResult]:
        if len(batch) == 1:
            return [self._run_one(batch[0])]
        try:
            return self._run_concatenated(batch)
        except Exception as error:  # noqa: BLE001 - isolate the failing request below
            logger.debug("batch of %d failed (%s); running its requests alone", len(batch), error)
            return [self._run_one(request) for request in batch]

    def _run_one(self, request: InferRequest) -> ExecuteResult:
        try:
            outputs = self._model(request.inputs, self.output_names((request,)))
            return self._response(request, outputs)
        except ServingError as error:
            return error
        except Exception as error:  # noqa: BLE001 - a runtime error is this request's failure
            return InternalError(
                f"model '{self.model_name}' failed: {type(error).__name__}: {error}"
            )

    def _run_concatenated(self, batch: list[InferRequest]) -> list[ExecuteResult]:
        sizes = [request.batch_size(self.max_batch_size) for request in batch]
        outputs = self._model(concat_inputs(batch), self.output_names(batch))
        parts = split_outputs(outputs, sizes)
        return [self._response(r, part) for r, part in zip(batch, parts, strict=True)]

    def _model(self, inputs: dict[str, np.ndarray], wanted: list[str]) -> dict[str, np.ndarray]:
        if self.in_reshape:
            inputs = {n: self._reshape(a, self.in_reshape.get(n)) for n, a in inputs.items()}
        outputs = self.run(inputs, wanted)
        if self.out_reshape:
            outputs = {n: self._reshape(a, self.out_reshape.get(n)) for n, a in outputs.items()}
        return outputs

    def _reshape(self, array: np.ndarray, shape: list[int] | None) -> np.ndarray:
        if shape is None:
            return array
        batch = [array.shape[0]] if self.max_batch_size > 0 and array.ndim else []
        return array.reshape(batch + shape)

    def _response(self, request: InferRequest, outputs: dict[str, np.ndarray]) -> InferResponse:
        if request.outputs is None:
            kept = {name: outputs[name] for name in self.outputs if name in outputs}
        elif len(request.outputs) == 1:  # the common case, kept short
            name = request.outputs[0].name
            kept = {name: outputs[name]} if name in outputs else {}
        else:
            wanted = {o.name for o in request.outputs}
            kept = {n: outputs[n] for n in self.outputs if n in outputs and n in wanted}
        return InferResponse(
            model_name=self.model_name,
            model_version=self.model_version,
            outputs=kept,
            id=request.id,
        )


def execute_requests(
    requests: Sequence[InferRequest],
    *,
    config: model_config_pb2.ModelConfig,
    model_version: int,
    run: ModelRun,
) -> list[ExecuteResult]:
    """Run a batch through ``run`` once (backends keep a ``BatchExecutor`` instead)."""
    return BatchExecutor(config, model_version=model_version, run=run)(requests)


def concat_inputs(batch: Sequence[InferRequest]) -> dict[str, np.ndarray]:
    """Concatenate the inputs of a batch along dim 0 (all requests carry the same input names)."""
    first = batch[0].inputs
    return {name: np.concatenate([r.inputs[name] for r in batch], axis=0) for name in first}


def split_outputs(
    outputs: dict[str, np.ndarray], sizes: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Split batched outputs back into one dict per request, by each request's batch size."""
    total = sum(sizes)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InternalError(
                f"output '{name}' has shape {list(array.shape)}, which does not split into a "
                f"batch of {total}"
            )
    bounds = np.cumsum([0, *sizes])
    return [
        {name: array[bounds[i] : bounds[i + 1]] for name, array in outputs.items()}
        for i in range(len(sizes))
    ]


def _groups(requests: Sequence[InferRequest], indexes: list[int]) -> list[list[int]]:
    """Group requests whose inputs concatenate: same names, dtypes and trailing shapes."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for index in indexes:
        inputs = requests[index].inputs
        key = tuple(sorted((n, a.dtype.str, a.shape[1:]) for n, a in inputs.items()))
        groups.setdefault(key, []).append(index)
    return list(groups.values())
