"""A loaded version's input/output signature and the checks every request goes through.

Built once per loaded version from its config, so checking a request is a few dict lookups. Error
texts keep Triton's wording (PROTOCOL.md §1.2-1.3): clients match substrings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from serving.core.datatypes import NumpyArray, wire_from_numpy
from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

# Accepted (name, dtype, shape) triples a signature remembers before it starts again.
MAX_ACCEPTED_INPUTS = 256

_WIRE_BY_CONFIG: dict[int, str] = {
    value: ("BYTES" if name == "TYPE_STRING" else name.removeprefix("TYPE_"))
    for name, value in model_config_pb2.DataType.items()
    if name != "TYPE_INVALID"
}


def wire_of_config_type(data_type: int) -> str:
    return _WIRE_BY_CONFIG.get(data_type, "INVALID")


@dataclasses.dataclass(frozen=True, slots=True)
class TensorSignature:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False
    label_file: str = ""

    def full_shape(self, max_batch_size: int) -> list[int]:
        return ([-1] if max_batch_size > 0 else []) + list(self.dims)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSignature:
    """What a version accepts and produces, precomputed from its config."""

    model_name: str
    platform: str
    max_batch_size: int
    inputs: dict[str, TensorSignature]
    outputs: dict[str, TensorSignature]
    required_inputs: frozenset[str]
    decoupled: bool
    labels: dict[str, list[str]]
    # (name, dtype, shape) of inputs that passed ``check_request``: the checks of one input depend
    # on nothing else, so a triple that passed once passes again (bounded: variable dims vary).
    accepted_inputs: set[tuple[str, object, tuple[int, ...]]] = dataclasses.field(
        default_factory=set, compare=False, repr=False
    )

    @classmethod
    def from_config(
        cls, config: model_config_pb2.ModelConfig, *, model_dir: Path | None = None
    ) -> ModelSignature:
        inputs = {
            i.name: TensorSignature(
                i.name, wire_of_config_type(i.data_type), tuple(i.dims), optional=i.optional
            )
            for i in config.input
        }
        outputs = {
            o.name: TensorSignature(
                o.name, wire_of_config_type(o.data_type), tuple(o.dims), label_file=o.label_filename
            )
            for o in config.output
        }
        labels: dict[str, list[str]] = {}
        for output in outputs.values():
            if output.label_file and model_dir is not None:
                path = model_dir / output.label_file
                if path.is_file():
                    labels[output.name] = path.read_text(encoding="utf-8").splitlines()
        return cls(
            model_name=config.name,
            platform=config.platform or config.backend,
            max_batch_size=config.max_batch_size,
            inputs=inputs,
            outputs=outputs,
            required_inputs=frozenset(n for n, s in inputs.items() if not s.optional),
            decoupled=config.model_transaction_policy.decoupled,
            labels=labels,
        )

    def tensor_metadata(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        mbs = self.max_batch_size
        return (
            [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(mbs)}
                for s in self.inputs.values()
            ],
            [
                {"name": s.name, "datatype": s.datatype, "shape": s.full_shape(mbs)}
                for s in self.outputs.values()
            ],
        )


def check_request(request: InferRequest, signature: ModelSignature, model_name: str) -> None:
    """Raise InvalidArgumentError when the request does not fit the model (names, types, shapes)."""
    batching = signature.max_batch_size > 0
    batch = -1
    accepted = signature.accepted_inputs
    for name, array in request.inputs.items():
        key = (name, array.dtype, array.shape)
        if key in accepted:  # NOTE: the common case: one client's requests repeat their inputs
            if batching:
                this_batch = array.shape[0]
                if batch not in (-1, this_batch):
                    _same_batch(this_batch, batch, name, model_name)  # raises
                batch = this_batch
            continue
        batch = _check_input(name, array, signature, batch, model_name)
        if len(accepted) >= MAX_ACCEPTED_INPUTS:
            accepted.clear()
        accepted.add(key)
    if not signature.required_inputs.issubset(request.inputs.keys()):
        _raise_missing(request, signature, model_name)
    if request.outputs is not None:
        for output in request.outputs:
            if output.name not in signature.outputs:
                raise InvalidArgumentError(
                    f"unexpected inference output '{output.name}' for model '{model_name}'"
                )


def _check_input(
    name: str, array: NumpyArray, signature: ModelSignature, batch: int, model_name: str
) -> int:
    expected = signature.inputs.get(name)
    if expected is None:
        raise InvalidArgumentError(f"unexpected inference input '{name}' for model '{model_name}'")
    datatype = wire_from_numpy(array.dtype)
    if datatype != expected.datatype:
        raise InvalidArgumentError(
            f"inference input '{name}' data-type is '{datatype}', but model "
            f"'{model_name}' expects '{expected.datatype}'"
        )
    return _check_shape(array, expected, signature.max_batch_size, batch, model_name)


def _same_batch(this_batch: int, batch: int, name: str, model_name: str) -> int:
    if batch not in (-1, this_batch):
        raise InvalidArgumentError(
            f"input '{name}' batch size does not match other inputs for '{model_name}'"
        )
    return this_batch


def _check_shape(
    array: NumpyArray, expected: TensorSignature, mbs: int, batch: int, model_name: str
) -> int:
    shape = array.shape
    dims = expected.dims
    if mbs > 0:
        if len(shape) == 0:
            _raise_shape(array, expected, mbs, model_name)
        this_batch = shape[0]
        if this_batch < 1 or this_batch > mbs:
            raise InvalidArgumentError(
                f"inference request batch-size must be <= {mbs} for '{model_name}'"
            )
        batch = _same_batch(this_batch, batch, expected.name, model_name)
        shape = shape[1:]
    if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape, strict=True)):
        _raise_shape(array, expected, mbs, model_name)
    return batch


def _raise_shape(array: NumpyArray, expected: TensorSignature, mbs: int, model_name: str) -> None:
    want = ",".join(str(d) for d in expected.full_shape(mbs))
    got = ",".join(str(d) for d in array.shape)
    raise InvalidArgumentError(
        f"unexpected shape for input '{expected.name}' for model '{model_name}'. "
        f"Expected [{want}], got [{got}]"
    )


def _raise_missing(request: InferRequest, signature: ModelSignature, model_name: str) -> None:
    got = sorted(request.inputs)
    missing = sorted(signature.required_inputs - request.inputs.keys())
    raise InvalidArgumentError(
        f"expected {len(signature.required_inputs)} inputs but got {len(request.inputs)} inputs "
        f"for model '{model_name}'. Got input(s) {got}, but missing required input(s) "
        f"{missing}. Please provide all required input(s)."
    )
