"""The request bodies a load test sends: a version's golden requests (real inputs) at one fixed
shape, inputs given with the job, or, failing both, zeros shaped from the config. No Django."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from repository.config.datatypes import wire_datatype
from repository.config.parse import parse_config_text


def request_bodies(
    *,
    config_text: str,
    candidates: Sequence[Sequence[dict[str, Any]]],
    kind: str = "recorded request(s)",
) -> tuple[list[bytes], str]:
    """JSON infer bodies and where they came from. Only candidates with the first one's shape are
    kept, so every request of a run has the same shape (batching results stay comparable)."""
    if candidates:
        shape = _shape_of(candidates[0])
        same = [inputs for inputs in candidates if _shape_of(inputs) == shape]
        return [_body(inputs) for inputs in same], f"{len(same)} {kind} {shape}"
    synthetic = synthetic_inputs(config_text)
    return [_body(synthetic)], f"zeros shaped from the config {_shape_of(synthetic)}"


def synthetic_inputs(config_text: str) -> list[dict[str, Any]]:
    """One request of zeros (empty strings for BYTES) per config input, variable dims as 1."""
    cfg = parse_config_text(config_text)
    batch = [1] if cfg.max_batch_size > 0 else []
    inputs = []
    for entry in cfg.input:
        shape = batch + [d if d > 0 else 1 for d in entry.dims]
        count = 1
        for d in shape:
            count *= d
        datatype = wire_datatype(entry.data_type)
        zero: Any = "" if datatype == "BYTES" else (False if datatype == "BOOL" else 0)
        inputs.append(
            {"name": entry.name, "datatype": datatype, "shape": shape, "data": [zero] * count}
        )
    return inputs


def _shape_of(inputs: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{i['name']}{list(i['shape'])}" for i in inputs)


def _body(inputs: Sequence[dict[str, Any]]) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()
