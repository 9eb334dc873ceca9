"""Read uploaded sample inputs (one KServe v2 JSON request, or one ``.npy`` file per input) and
check them against a version's config: every input named once, its datatype, its shape, and as
many values as the shape holds. No Django.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

import numpy as np

from repository.config.datatypes import datatype_from_numpy, wire_datatype
from repository.config.errors import ConfigError
from repository.config.parse import parse_config_text
from repository.errors import RegistryError


class SampleInputError(RegistryError):
    """An upload that cannot be a request to this version; the message says what and where."""

    code = "invalid_sample_input"

    def __init__(self, message: str) -> None:
        super().__init__(message)


class SampleInputTooLargeError(SampleInputError):
    code = "sample_input_too_large"


def sample_inputs_read(
    files: Sequence[tuple[str, bytes]], *, config_text: str, max_bytes: int
) -> list[dict[str, Any]]:
    """The KServe v2 JSON inputs the files hold, checked against ``config_text``."""
    if not files:
        raise SampleInputError("choose a .json file, or one .npy file per input")
    size = sum(len(content) for _, content in files)
    if size > max_bytes:
        raise SampleInputTooLargeError(
            f"the upload holds {size} bytes; sample inputs may hold at most {max_bytes}"
        )
    suffixes = {PurePath(name).suffix.lower() for name, _ in files}
    if suffixes == {".json"} and len(files) == 1:
        inputs = _from_json(files[0][1])
    elif suffixes == {".npy"}:
        inputs = [_from_npy(name, content) for name, content in files]
    else:
        raise SampleInputError(
            "upload one .json file (a KServe v2 JSON request) or one .npy file per input"
        )
    check_inputs(inputs, config_text=config_text)
    return inputs


def check_inputs(inputs: Sequence[dict[str, Any]], *, config_text: str) -> None:
    """Refuse inputs this version could not take as one request."""
    cfg = parse_config_text(config_text)
    expected = {entry.name: entry for entry in cfg.input}
    names = [str(entry.get("name", "")) for entry in inputs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    unknown = sorted(set(names) - set(expected))
    missing = sorted(set(expected) - set(names))
    if duplicated or unknown or missing:
        parts = [
            f"{label}: {', '.join(found)}"
            for label, found in (
                ("given twice", duplicated),
                ("not inputs of this model", unknown),
                ("missing", missing),
            )
            if found
        ]
        raise SampleInputError(
            f"the inputs must be exactly {', '.join(sorted(expected))} ({'; '.join(parts)})"
        )
    batches = set()
    for entry in inputs:
        spec = expected[entry["name"]]
        datatype = wire_datatype(spec.data_type)
        if entry.get("datatype") != datatype:
            raise SampleInputError(
                f"input {entry['name']}: datatype {entry.get('datatype')}, "
                f"the model takes {datatype}"
            )
        shape = _shape(entry)
        dims = list(spec.dims)
        if cfg.max_batch_size > 0:
            if len(shape) != len(dims) + 1 or not 1 <= shape[0] <= cfg.max_batch_size:
                raise SampleInputError(
                    f"input {entry['name']}: shape {shape}, the model takes "
                    f"[1..{cfg.max_batch_size}, {', '.join(map(str, dims))}] (batch first)"
                )
            batches.add(shape[0])
            shape = shape[1:]
        if len(shape) != len(dims) or any(
            d >= 0 and d != s for d, s in zip(dims, shape, strict=True)
        ):
            raise SampleInputError(
                f"input {entry['name']}: shape {_shape(entry)}, the model takes dims {dims}"
            )
        count = len(_flat(entry.get("data")))
        if count != math.prod(_shape(entry)):
            raise SampleInputError(
                f"input {entry['name']}: {count} values for shape {_shape(entry)} "
                f"({math.prod(_shape(entry))} expected)"
            )
        _check_values(entry["name"], datatype, entry["data"])
    if len(batches) > 1:
        raise SampleInputError(f"the inputs disagree on the batch size: {sorted(batches)}")


def _from_json(content: bytes) -> list[dict[str, Any]]:
    try:
        document = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SampleInputError(f"the .json file is not JSON: {exc}") from exc
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        raise SampleInputError('the .json file must be a KServe v2 request: {"inputs": [...]}')
    return [
        {k: i.get(k) for k in ("name", "datatype", "shape", "data")}
        for i in inputs  # parameters and the like are not kept
    ]


def _from_npy(name: str, content: bytes) -> dict[str, Any]:
    stem = PurePath(name).stem
    try:
        array = np.load(io.BytesIO(content), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise SampleInputError(f"{name} is not a .npy array: {exc}") from exc
    try:
        datatype = datatype_from_numpy(array.dtype)
    except ConfigError as exc:
        raise SampleInputError(f"{name}: {exc}") from exc
    data = array.astype(str) if datatype == "BYTES" else array
    return {
        "name": stem,
        "datatype": datatype,
        "shape": list(array.shape),
        "data": data.ravel().tolist(),
    }


def _shape(entry: dict[str, Any]) -> list[int]:
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise SampleInputError(f"input {entry.get('name')}: shape must be a list of sizes")
    return shape


def _flat(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise SampleInputError("every input needs its data as a list")
    return [v for d in data for v in (_flat(d) if isinstance(d, list) else [d])]


def _check_values(name: str, datatype: str, data: list[Any]) -> None:
    def fits(v: Any) -> bool:
        if datatype == "BYTES":
            return isinstance(v, str)
        if datatype == "BOOL":
            return isinstance(v, bool)
        if datatype.startswith(("FP", "BF")):
            return isinstance(v, int | float) and not isinstance(v, bool)
        return isinstance(v, int) and not isinstance(v, bool)

    for value in _flat(data):
        if not fits(value):
            raise SampleInputError(f"input {name}: {value!r} is not a {datatype} value")
