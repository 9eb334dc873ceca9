"""Presenting a version's ``config.pbtxt``: marked lines, a diff, the I/O table, a sample request.

Display only: the registry has already validated and completed the config text shown here.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

# The top-level field a line belongs to: ``name: ...``, ``input [``, ``dynamic_batching {``.
FIELD_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:{\[]?")


@dataclasses.dataclass(frozen=True)
class ConfigLine:
    text: str
    autocompleted: bool


@dataclasses.dataclass(frozen=True)
class DiffLine:
    text: str
    kind: str  # "add", "del", "hunk" or ""


@dataclasses.dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    dims: str
    extra: str


def parse_config(text: str) -> Any | None:
    """The ModelConfig message, or None when there is no (parsable) text to show."""
    if not text:
        return None
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError:
        return None
    return config


def config_lines(text: str, autocompleted: list[str]) -> list[ConfigLine]:
    """Each line of the config, marked when its top-level field was filled in by auto-complete."""
    marked = {field.split(".")[0].split("[")[0] for field in autocompleted}
    lines: list[ConfigLine] = []
    depth = 0
    current = ""
    for line in text.splitlines():
        if depth == 0:
            match = FIELD_RE.match(line)
            current = match.group(1) if match else ""
        lines.append(ConfigLine(line, current in marked))
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        depth = max(depth, 0)
    return lines


def config_diff(old: str, new: str, *, old_label: str, new_label: str) -> list[DiffLine]:
    """A unified diff of two configs (empty when they are the same)."""
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), fromfile=old_label, tofile=new_label, lineterm=""
    )
    lines = []
    for line in diff:
        if line.startswith(("+++", "---")) or line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = ""
        lines.append(DiffLine(line, kind))
    return lines


def _datatype(value: int) -> str:
    name = model_config_pb2.DataType.Name(value)
    return "BYTES" if name == "TYPE_STRING" else name.removeprefix("TYPE_")


def tensors(config: Any | None) -> tuple[list[Tensor], list[Tensor]]:
    """Inputs and outputs as rows (dims include the batch dimension as ``-1`` when batching)."""
    if config is None:
        return [], []
    batch = ["-1"] if config.max_batch_size > 0 else []

    def row(t: Any, extra: str) -> Tensor:
        dims = batch + [str(d) for d in t.dims]
        return Tensor(t.name, _datatype(t.data_type), "[" + ", ".join(dims) + "]", extra)

    inputs = [row(t, "optional" if t.optional else "") for t in config.input]
    outputs = [row(t, t.label_filename) for t in config.output]
    return inputs, outputs


def sample_request(config: Any | None) -> dict[str, Any]:
    """A KServe v2 JSON request with one batch row of zeros, to start the "Try it" form from."""
    if config is None:
        return {"inputs": []}
    batch = [1] if config.max_batch_size > 0 else []
    inputs = []
    for t in config.input:
        shape = batch + [d if d > 0 else 1 for d in t.dims]
        count = 1
        for d in shape:
            count *= d
        datatype = _datatype(t.data_type)
        value: Any = "" if datatype == "BYTES" else (False if datatype == "BOOL" else 0)
        inputs.append(
            {"name": t.name, "shape": shape, "datatype": datatype, "data": [value] * count}
        )
    return {"inputs": inputs}


def sample_request_text(config: Any | None) -> str:
    """The sample request as JSON, one input per line (a 256-element input stays readable)."""
    inputs = sample_request(config)["inputs"]
    if not inputs:
        return '{\n  "inputs": []\n}'
    lines = ",\n".join("    " + json.dumps(item) for item in inputs)
    return '{\n  "inputs": [\n' + lines + "\n  ]\n}"
