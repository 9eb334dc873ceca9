"""Triton's ``triton_python_backend_utils`` for models run by Portico's Python backend.

A model's process registers this module under the name ``triton_python_backend_utils``, so an
unchanged Triton ``model.py`` (``import triton_python_backend_utils as pb_utils``) runs here.
Implemented: Tensor, InferenceRequest (with BLS: ``exec()``, ``await async_exec()`` and, for any
number of responses, ``exec(decoupled=True)`` / ``stream_exec()`` run a request on another model
of the same server), InferenceResponse, the decoupled
``InferenceResponseSender``, TritonError, TritonModelException, the config helpers, the type
converters, BYTES (de)serialisation, ModelConfig for ``auto_complete_config`` and Logger. Not
supported (they raise ``TritonModelException`` saying so): request rescheduling and model
management from Python.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

_TYPE_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# Triton's numeric type codes (TRITONSERVER_DataType) for numpy_to_triton_type & co.
_TRITON_TYPE_CODES = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}

_logger = logging.getLogger("triton_python_backend_utils")

# The model process's ``ServerLink`` (BLS requests, decoupled responses); the stub installs it.
_server_link: Any = None


class TritonError:
    """An error a model attaches to one response (fails that request only)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    CODE_NAMES = {
        0: "UNKNOWN",
        1: "INTERNAL",
        2: "NOT_FOUND",
        3: "INVALID_ARG",
        4: "UNAVAILABLE",
        5: "UNSUPPORTED",
        6: "ALREADY_EXISTS",
        7: "CANCELLED",
    }

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = str(message)
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self.CODE_NAMES.get(self._code, 'UNKNOWN')}: {self._message!r})"


class TritonModelException(Exception):
    """Raise from a model to fail the requests of the call."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class Tensor:
    """A named tensor; BYTES tensors are numpy object arrays of ``bytes``."""

    def __init__(self, name: str, data: Any, dtype: Any = None) -> None:
        array = np.asarray(data) if not isinstance(data, np.ndarray) else data
        if array.dtype.kind in ("U", "S"):
            converted = np.empty(array.shape, dtype=object)
            converted[...] = array.astype(object)
            array = converted
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor from a DLPack capsule (``torch.utils.dlpack.to_dlpack``) or exporter (CPU)."""
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (RuntimeError, TypeError, BufferError) as error:
            raise TritonModelException(f"Tensor.from_dlpack('{name}'): {error}") from error

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class _Capsule:
    """Presents a bare DLPack capsule through the ``__dlpack__`` protocol numpy expects."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: this server hands models CPU tensors only


class InferenceRequest:
    """A request handed to ``execute``, or one a model builds to call another model (BLS)."""

    def __init__(
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        timeout: int = 0,
        parameters: dict[str, Any] | str | None = None,
        model_version: int = -1,
        **_: Any,
    ) -> None:
        self._model_name = model_name
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        if isinstance(parameters, str):
            self._parameters = parameters
        else:
            self._parameters = json.dumps(parameters or {})
        self._model_version = model_version
        self._stream: int | None = None  # set by the stub on a decoupled model's requests
        self._sender: InferenceResponseSender | None = None

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def get_input_tensor_by_name(self, name: str) -> Tensor | None:
        return next((t for t in self._inputs if t.name() == name), None)

    def requested_output_names(self) -> list[str]:
        return list(self._requested)

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return self._parameters

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def is_cancelled(self) -> bool:
        """True once the client of this (decoupled) request went away."""
        return _stream_cancelled(self._stream)

    def trace(self) -> None:
        return None

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by this server")

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses (decoupled models only)."""
        if self._stream is None:
            raise TritonModelException(
                "get_response_sender() is only available to a decoupled model "
                "(model_transaction_policy { decoupled: true }) on the requests of its execute"
            )
        if self._sender is None:
            self._sender = InferenceResponseSender(self._stream)
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` and wait for its response (BLS).

        Failures (unknown model, bad input, timeout) come back as a response with an error.
        ``decoupled=True``: an iterator over every response the model sends (any number).
        """
        if decoupled:
            return self.stream_exec()
        response, _ = _link_for_bls().infer(self).result()
        return response

    def stream_exec(self) -> Iterator[InferenceResponse]:
        """``exec(decoupled=True)``: each response as it arrives."""
        stream: Iterator[InferenceResponse] = _link_for_bls().stream(self)
        return stream

    async def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` for an ``async def execute``: other coroutines run while this one waits.

        ``decoupled=True``, as Triton's: returns once the first response has come, the iterator
        of ``exec(decoupled=True)`` (which ``async for`` also takes, without holding up the
        loop while it waits for the next).
        """
        if decoupled:
            stream = _link_for_bls().stream(self)
            await stream.first()
            return stream
        response, _ = await asyncio.wrap_future(_link_for_bls().infer(self))
        return response


def _link_for_bls() -> Any:
    if _server_link is None:
        raise TritonModelException("BLS requests can only be made by a model the server runs")
    return _server_link


class InferenceResponseSender:
    """Sends a decoupled model's responses for one request, from ``execute`` or any thread.

    Any number of ``send(response)`` calls, then one with
    ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (with or without a last response).
    """

    def __init__(self, stream: int) -> None:
        self._stream = stream
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException(f"unknown response flags {flags}")
        if response is None and flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() expects an InferenceResponse, got a {type(response).__name__}"
            )
        # NOTE: one sender may be shared by threads; the final flag must stay the last message.
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if _server_link is None:
                raise TritonModelException("responses can only be sent in a model the server runs")
            _server_link.send(self._stream, response, flags)
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True

    def is_cancelled(self) -> bool:
        """True once the client went away: the model may stop producing responses."""
        return _stream_cancelled(self._stream)


def _stream_cancelled(stream: int | None) -> bool:
    return stream is not None and _server_link is not None and _server_link.is_cancelled(stream)


class InferenceResponse:
    """The response to one request: output tensors, or an error that fails only that request."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | str | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._outputs = list(output_tensors or [])
        self._error = TritonError(error) if isinstance(error, str) else error
        loaded = json.loads(parameters or "{}") if isinstance(parameters, str) else parameters
        self._parameters: dict[str, Any] = dict(loaded or {})

    def output_tensors(self) -> list[Tensor]:
        return list(self._outputs)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


# --------------------------------------------------------------------------- helpers


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return request.get_input_tensor_by_name(name)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((i for i in model_config.get("input", []) if i.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((o for o in model_config.get("output", []) if o.get("name") == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    if triton_type_string == "TYPE_BF16":
        from ml_dtypes import bfloat16

        return bfloat16
    return _TYPE_TO_NUMPY[triton_type_string]


def _wire_of_numpy(dtype: Any) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    for type_string, np_type in _TYPE_TO_NUMPY.items():
        if np_type is not np.object_ and np.dtype(np_type) == dtype:
            return type_string.removeprefix("TYPE_")
    raise TritonModelException(f"unsupported numpy dtype {dtype}")


def numpy_to_triton_type(data_type: Any) -> int:
    return _TRITON_TYPE_CODES[_wire_of_numpy(data_type)]


def triton_to_numpy_type(data_type: int) -> Any:
    for wire, code in _TRITON_TYPE_CODES.items():
        if code == data_type:
            return triton_string_to_numpy("TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}")
    return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray | None:
    """BYTES tensor -> flat uint8 array in Triton's <uint32 length><bytes> layout."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.uint8)
    parts = []
    for item in input_tensor.ravel(order="C"):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)) + data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes | np.ndarray) -> np.ndarray:
    raw = encoded_tensor.tobytes() if isinstance(encoded_tensor, np.ndarray) else encoded_tensor
    items: list[bytes] = []
    offset = 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


# --------------------------------------------------------------------------- auto-complete


class ModelConfig:
    """The config a model's ``auto_complete_config`` may complete (Triton's JSON form)."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        loaded = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._model_config: dict[str, Any] = dict(loaded)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 0:
            raise ValueError("configuration specified max_batch_size must be an integer >= 0")
        current = int(self._model_config.get("max_batch_size", 0))
        if current not in (0, max_batch_size):
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._model_config:
            raise ValueError(
                f"Configuration specified scheduling_choice as 'sequence_batching', but "
                f"auto-complete-config function for model '{self._name()}' tries to set "
                f"scheduling_choice as 'dynamic_batching'"
            )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's signature
        self._add_tensor("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        decoupled = bool(transaction_policy_dict.get("decoupled", False))
        current = self._model_config.get("model_transaction_policy", {})
        if "decoupled" in current and bool(current["decoupled"]) != decoupled:
            raise ValueError(
                f"trying to change decoupled property in auto-complete-config for model "
                f"'{self._name()}', which is already set to {current['decoupled']}"
            )
        self._model_config["model_transaction_policy"] = {"decoupled": decoupled}

    def add_model_warmup(self, model_warmup: dict[str, Any]) -> None:
        for key in ("name", "batch_size", "inputs"):
            if key not in model_warmup:
                raise ValueError(f"model warm-up for model '{self._name()}' must set '{key}'")
        names = {w.get("name") for w in self._model_config.get("model_warmup", [])}
        if model_warmup["name"] in names:
            raise ValueError(f"model warm-up '{model_warmup['name']}' is already defined")
        self._model_config.setdefault("model_warmup", []).append(dict(model_warmup))

    def _add_tensor(self, kind: str, tensor: dict[str, Any]) -> None:
        if not isinstance(tensor, dict) or "name" not in tensor:
            raise ValueError(f"model {kind} must be a dict with at least a 'name'")
        for key in tensor:
            if key not in ("name", "data_type", "dims", "optional", "reshape", "is_shape_tensor"):
                raise ValueError(f"model {kind} '{tensor['name']}' has an unknown property '{key}'")
        existing = next(
            (t for t in self._model_config.setdefault(kind, []) if t.get("name") == tensor["name"]),
            None,
        )
        if existing is None:
            for key in ("data_type", "dims"):
                if key not in tensor:
                    raise ValueError(f"model {kind} '{tensor['name']}' must set '{key}'")
            self._model_config[kind].append(dict(tensor))
            return
        for key in ("data_type", "dims"):
            if key not in tensor:
                continue
            have, want = existing.get(key), tensor[key]
            if key == "dims" and have is not None:
                have, want = [int(d) for d in have], [int(d) for d in want]
            if have is not None and have != want:
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects "
                    f"{key} {have} but auto-complete-config function specified {key} {want}"
                )
            existing[key] = tensor[key]


# --------------------------------------------------------------------------- logging


class Logger:
    """``pb_utils.Logger.log_info(msg)`` and friends, on the model process's stderr."""

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        _logger.log(level, message)

    @staticmethod
    def log_info(message: str) -> None:
        _logger.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        _logger.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        _logger.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _logger.debug(message)


def load_model(model_name: str, config: str = "", files: Any = None) -> None:
    raise TritonModelException("model management from a Python model is not supported")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise TritonModelException("model management from a Python model is not supported")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise TritonModelException("model management from a Python model is not supported")
