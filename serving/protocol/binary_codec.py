"""The binary tensor extension's framing (PROTOCOL.md §1.4): JSON header, then raw tensor bytes.

``Inference-Header-Content-Length`` splits a body into its JSON header and binary section; a
response with binary outputs is framed the same way. A header length of 0 is a raw binary request:
the whole body is the single input of the model.
"""

from __future__ import annotations

import numpy as np

from serving.core.datatypes import NUMPY_BY_WIRE, NumpyArray, element_count, tensor_from_bytes
from serving.core.signature import ModelSignature
from serving.errors import InvalidArgumentError

HEADER_LENGTH_MISSING = -1


def parse_header_length(value: bytes | None, body_length: int) -> int:
    """The JSON header's length, or ``HEADER_LENGTH_MISSING`` when the header is absent."""
    if value is None:
        return HEADER_LENGTH_MISSING
    try:
        length = int(value)
    except ValueError:
        length = -2
    if length < 0 or length > body_length:
        raise InvalidArgumentError(
            f"must specify valid 'Infer-Header-Content-Length' in request header and it must be "
            f"in [0, {body_length}], got '{value.decode('latin-1')}'"
        )
    return length


def split_body(
    body: bytes | bytearray | memoryview, header_length: int
) -> tuple[memoryview, memoryview]:
    view = memoryview(body)
    if header_length == HEADER_LENGTH_MISSING:
        return view, view[len(view) :]
    return view[:header_length], view[header_length:]


def raw_input(
    signature: ModelSignature, body: memoryview, model_name: str
) -> tuple[str, NumpyArray]:
    """Decode a raw binary request: one input, shape deduced from its size, batch 1.

    Error texts are Triton's (its HTTP QA tests match them).
    """
    if len(signature.inputs) != 1:
        raise InvalidArgumentError(
            f"Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(signature.inputs)} inputs in '{model_name}' model configuration"
        )
    sig = next(iter(signature.inputs.values()))
    batch = [1] if signature.max_batch_size > 0 else []
    if sig.datatype == "BYTES":
        if list(sig.dims) != [1]:
            raise InvalidArgumentError(
                f"For BYTE datatype raw input '{sig.name}', the model must have input shape [1]"
            )
        # The whole body is the one element (no length prefix), as in Triton.
        array = np.empty(1, dtype=object)
        array[0] = bytes(body)
        return sig.name, array.reshape(batch + [1])
    dims = list(sig.dims)
    if dims.count(-1) > 1:
        raise InvalidArgumentError(
            f"The shape of the raw input '{sig.name}' can not be deduced because there are more "
            "than one variable-sized dimension"
        )
    if -1 in dims:
        known = element_count([d for d in dims if d != -1]) * NUMPY_BY_WIRE[sig.datatype].itemsize
        if known == 0 or len(body) % known:
            raise InvalidArgumentError(
                f"The shape of the raw input '{sig.name}' can not be deduced because the raw "
                f"input size {len(body)} is not a multiple of the known element size {known}"
            )
        dims[dims.index(-1)] = len(body) // known
    return sig.name, tensor_from_bytes(
        body, sig.datatype, batch + dims, name=sig.name, model_name=model_name
    )
