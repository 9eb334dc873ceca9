"""Tensors the sequence batcher adds to each request: control inputs and implicit state.

Control tensors (START, END, READY, CORRID) are synthesised with the encodings the config names
(``int32_false_true``, ``fp32_false_true``, ``bool_false_true``; CORRID in its ``data_type``),
one ``[1, 1]`` tensor per request so a batch of n concatenates to ``[n, 1]`` (``[1]`` when the
model does not batch). Implicit state (``state[]``): the output of request i is an input of i+1.
``null_tensor`` fills the direct strategy's null requests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repository.config.datatypes import numpy_dtype
from serving.core.types import InferResponse
from serving.errors import InvalidArgumentError

Kind = mc.ModelSequenceBatching.Control.Kind


@dataclasses.dataclass(frozen=True, slots=True)
class _Flag:
    name: str
    kind: int
    false: Any
    true: Any
    dtype: np.dtype[Any]


class SequenceControls:
    """Builds the control tensors of one request from its flags and correlation id."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self._shape = (1, 1) if config.max_batch_size > 0 else (1,)
        self._flags: list[_Flag] = []
        self._corrid: list[tuple[str, int]] = []
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                if control.kind == Kind.CONTROL_SEQUENCE_CORRID:
                    self._corrid.append((control_input.name, control.data_type))
                else:
                    self._flags.append(_flag(control_input.name, control))
        self.names = frozenset([f.name for f in self._flags] + [name for name, _ in self._corrid])

    def tensors(
        self, *, start: bool, end: bool, ready: bool, corrid: int | str
    ) -> dict[str, np.ndarray]:
        values = {
            Kind.CONTROL_SEQUENCE_START: start,
            Kind.CONTROL_SEQUENCE_END: end,
            Kind.CONTROL_SEQUENCE_READY: ready,
        }
        tensors = {
            flag.name: np.full(
                self._shape, flag.true if values[flag.kind] else flag.false, dtype=flag.dtype
            )
            for flag in self._flags
        }
        for name, data_type in self._corrid:
            tensors[name] = self._corrid_tensor(corrid, data_type)
        return tensors

    def check(self, corrid: int | str) -> None:
        """Refuse a correlation id the CORRID control cannot carry (a word for an integer type)."""
        for _, data_type in self._corrid:
            self._corrid_tensor(corrid, data_type)

    def _corrid_tensor(self, corrid: int | str, data_type: int) -> np.ndarray:
        if data_type == mc.TYPE_STRING:
            # The null request's correlation id 0 is the empty string, as Triton sends it.
            value = corrid if isinstance(corrid, str) else (str(corrid) if corrid else "")
            return np.full(self._shape, value.encode(), dtype=object)
        if isinstance(corrid, str):
            if not (corrid.isascii() and corrid.isdigit()):
                raise InvalidArgumentError(
                    f"sequence batching control CORRID expects an integer correlation ID, "
                    f"got string '{corrid}'"
                )
            corrid = int(corrid)
        return np.full(self._shape, corrid, dtype=numpy_dtype(data_type))


def null_tensor(array: np.ndarray) -> np.ndarray:
    """A tensor of ``array``'s shape and dtype holding zeros (empty strings for BYTES)."""
    if array.dtype == np.dtype(object):
        return np.full(array.shape, b"", dtype=object)
    return np.zeros_like(array)


def _flag(name: str, control: mc.ModelSequenceBatching.Control) -> _Flag:
    if len(control.int32_false_true) == 2:
        false, true = control.int32_false_true
        return _Flag(name, control.kind, false, true, np.dtype(np.int32))
    if len(control.fp32_false_true) == 2:
        false, true = control.fp32_false_true
        return _Flag(name, control.kind, false, true, np.dtype(np.float32))
    false, true = control.bool_false_true
    return _Flag(name, control.kind, false, true, np.dtype(np.bool_))


@dataclasses.dataclass(frozen=True, slots=True)
class _State:
    input_name: str
    output_name: str
    initial: np.ndarray


class SequenceStates:
    """The implicit state of a model: initial values, and capture from a response."""

    def __init__(self, config: mc.ModelConfig, *, model_dir: Path) -> None:
        batched = config.max_batch_size > 0
        declared = {output.name for output in config.output}
        self._states = [
            _State(s.input_name, s.output_name, _initial(s, batched=batched, model_dir=model_dir))
            for s in config.sequence_batching.state
        ]
        # State outputs the config does not also declare as outputs are internal to the server.
        self._hidden = frozenset(s.output_name for s in self._states) - declared

    def __bool__(self) -> bool:
        return bool(self._states)

    def initial(self) -> dict[str, np.ndarray]:
        return {state.input_name: state.initial.copy() for state in self._states}

    def capture(self, response: InferResponse) -> dict[str, np.ndarray]:
        """The next request's state inputs from this response; hidden state outputs removed."""
        captured = {
            state.input_name: np.asarray(response.outputs[state.output_name])
            for state in self._states
            if state.output_name in response.outputs
        }
        for name in self._hidden:
            response.outputs.pop(name, None)
        return captured


def _initial(
    state: mc.ModelSequenceBatching.State, *, batched: bool, model_dir: Path
) -> np.ndarray:
    dtype = numpy_dtype(state.data_type)
    dims = [max(1, int(d)) for d in state.dims]
    for initial in state.initial_state:
        dims = [max(1, int(d)) for d in initial.dims] or dims
        if initial.WhichOneof("state_data") == "data_file":
            raw = (model_dir / "initial_state" / initial.data_file).read_bytes()
            data = np.frombuffer(raw, dtype=dtype).reshape(dims)
            return data[np.newaxis, ...].copy() if batched else data.copy()
    shape = [1, *dims] if batched else dims
    if dtype == np.dtype(object):
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=dtype)
