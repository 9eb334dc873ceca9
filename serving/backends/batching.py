"""Turn a scheduler's batch of requests into model runs and back into one result per request.

Batching models (``max_batch_size > 0``) get the requests of a batch concatenated along dim 0 and
their outputs split back by each request's batch size. Requests whose inputs cannot be concatenated
(different trailing shapes) run in separate groups. When a concatenated run fails, its requests are
run one by one so that one bad request fails alone and its neighbours still get answers.
Non-batching models run requests one by one. Config ``reshape`` is applied on the way in and out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2

from serving.backends.base import ExecuteResult
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, InvalidArgumentError, ServingError

from .tensors import check_request

logger = logging.getLogger(__name__)

# Runs the model: model-facing inputs and the output names wanted -> model-facing outputs.
ModelRun = Callable[[dict[str, np.ndarray], list[str]], dict[str, np.ndarray]]


def execute_requests(
    requests: Sequence[InferRequest],
    *,
    config: model_config_pb2.ModelConfig,
    model_version: int,
    run: ModelRun,
) -> list[ExecuteResult]:
    """Run a batch through ``run``; one result per request, same order."""
    results: list[ExecuteResult | None] = [None] * len(requests)
    runnable: list[int] = []
    for index, request in enumerate(requests):
        try:
            check_request(request, config)
            _check_requested_outputs(request, config)
            runnable.append(index)
        except ServingError as error:
            results[index] = error
    groups = _groups(requests, runnable) if config.max_batch_size > 0 else [[i] for i in runnable]
    for group in groups:
        batch = [requests[i] for i in group]
        for index, result in zip(group, _run_group(batch, config, model_version, run), strict=True):
            results[index] = result
    return [r if r is not None else InternalError("request was not executed") for r in results]


def _run_group(
    batch: list[InferRequest],
    config: model_config_pb2.ModelConfig,
    model_version: int,
    run: ModelRun,
) -> list[ExecuteResult]:
    if len(batch) == 1:
        return [_run_one(batch[0], config, model_version, run)]
    try:
        return _run_concatenated(batch, config, model_version, run)
    except Exception as error:  # noqa: BLE001 - isolate the failing request below
        logger.debug("batch of %d failed (%s); running its requests alone", len(batch), error)
        return [_run_one(request, config, model_version, run) for request in batch]


def _run_one(
    request: InferRequest, config: model_config_pb2.ModelConfig, model_version: int, run: ModelRun
) -> ExecuteResult:
    try:
        wanted = output_names(config, [request])
        outputs = _from_model(run(_to_model(request.inputs, config), wanted), config)
        return _response(request, outputs, config, model_version)
    except ServingError as error:
        return error
    except Exception as error:  # noqa: BLE001 - a runtime error is this request's failure
        return InternalError(f"model '{config.name}' failed: {type(error).__name__}: {error}")


def _run_concatenated(
    batch: list[InferRequest],
    config: model_config_pb2.ModelConfig,
    model_version: int,
    run: ModelRun,
) -> list[ExecuteResult]:
    sizes = [request.batch_size(config.max_batch_size) for request in batch]
    inputs = concat_inputs(batch)
    outputs = _from_model(run(_to_model(inputs, config), output_names(config, batch)), config)
    parts = split_outputs(outputs, sizes)
    return [
        _response(request, part, config, model_version)
        for request, part in zip(batch, parts, strict=True)
    ]


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


def output_names(config: model_config_pb2.ModelConfig, batch: Sequence[InferRequest]) -> list[str]:
    """The outputs to compute for a batch: the union of what its requests asked for."""
    if any(request.outputs is None for request in batch):
        return [o.name for o in config.output]
    wanted = {o.name for request in batch for o in request.outputs or ()}
    return [o.name for o in config.output if o.name in wanted]


def _groups(requests: Sequence[InferRequest], indexes: list[int]) -> list[list[int]]:
    """Group requests whose inputs concatenate: same names, dtypes and trailing shapes."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for index in indexes:
        inputs = requests[index].inputs
        key = tuple(sorted((n, a.dtype.str, a.shape[1:]) for n, a in inputs.items()))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def _check_requested_outputs(request: InferRequest, config: model_config_pb2.ModelConfig) -> None:
    if request.outputs is None:
        return
    declared = {o.name for o in config.output}
    for output in request.outputs:
        if output.name not in declared:
            raise InvalidArgumentError(
                f"unexpected inference output '{output.name}' for model '{config.name}'"
            )


def _to_model(
    inputs: dict[str, np.ndarray], config: model_config_pb2.ModelConfig
) -> dict[str, np.ndarray]:
    reshaped = {i.name: list(i.reshape.shape) for i in config.input if i.HasField("reshape")}
    if not reshaped:
        return inputs
    return {
        name: _reshape(a, reshaped.get(name), config.max_batch_size) for name, a in inputs.items()
    }


def _from_model(
    outputs: dict[str, np.ndarray], config: model_config_pb2.ModelConfig
) -> dict[str, np.ndarray]:
    reshaped = {o.name: list(o.dims) for o in config.output if o.HasField("reshape")}
    if not reshaped:
        return outputs
    return {
        name: _reshape(a, reshaped.get(name), config.max_batch_size) for name, a in outputs.items()
    }


def _reshape(array: np.ndarray, shape: list[int] | None, max_batch_size: int) -> np.ndarray:
    if shape is None:
        return array
    target = ([array.shape[0]] if max_batch_size > 0 and array.ndim else []) + shape
    return array.reshape(target)


def _response(
    request: InferRequest,
    outputs: dict[str, np.ndarray],
    config: model_config_pb2.ModelConfig,
    model_version: int,
) -> InferResponse:
    wanted = None if request.outputs is None else {o.name for o in request.outputs}
    kept = {
        o.name: outputs[o.name]
        for o in config.output
        if o.name in outputs and (wanted is None or o.name in wanted)
    }
    return InferResponse(
        model_name=config.name, model_version=model_version, outputs=kept, id=request.id
    )
