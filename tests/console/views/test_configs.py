"""Presenting configs: auto-completed lines marked, diffs, the I/O table, sample requests."""

from __future__ import annotations

import json

import pytest

from console.views.configs import (
    config_diff,
    config_lines,
    parse_config,
    sample_request,
    sample_request_text,
    tensors,
)

pytestmark = pytest.mark.embedded

CONFIG = """name: "m"
max_batch_size: 8
input {
  name: "TEXT"
  data_type: TYPE_STRING
  dims: 1
}
input {
  name: "MASK"
  data_type: TYPE_BOOL
  dims: -1
  dims: 3
  optional: true
}
output {
  name: "OUT"
  data_type: TYPE_FP16
  dims: 2
}
dynamic_batching {
  max_queue_delay_microseconds: 100
}
"""


def test_lines_of_autocompleted_fields_are_marked_whole_blocks_included():
    lines = config_lines(CONFIG, ["input", "dynamic_batching"])
    marked = [line.text for line in lines if line.autocompleted]
    assert marked[0] == "input {" and "  optional: true" in marked
    assert "dynamic_batching {" in marked and "  max_queue_delay_microseconds: 100" in marked
    assert not any(line.autocompleted for line in lines if line.text.startswith(("name", "output")))


def test_diff_marks_added_and_removed_lines():
    diff = config_diff(
        CONFIG,
        CONFIG.replace("max_batch_size: 8", "max_batch_size: 16"),
        old_label="v1",
        new_label="v2",
    )
    kinds = {line.text: line.kind for line in diff}
    assert kinds["-max_batch_size: 8"] == "del" and kinds["+max_batch_size: 16"] == "add"
    assert config_diff(CONFIG, CONFIG, old_label="a", new_label="b") == []


def test_tensors_include_the_batch_dimension_and_wire_datatypes():
    inputs, outputs = tensors(parse_config(CONFIG))
    assert [(t.name, t.datatype, t.dims, t.extra) for t in inputs] == [
        ("TEXT", "BYTES", "[-1, 1]", ""),
        ("MASK", "BOOL", "[-1, -1, 3]", "optional"),
    ]
    assert (outputs[0].datatype, outputs[0].dims) == ("FP16", "[-1, 2]")
    assert tensors(parse_config("not a config {")) == ([], [])


def test_sample_request_fills_each_input_with_its_shape():
    request = sample_request(parse_config(CONFIG))
    assert request["inputs"][0] == {
        "name": "TEXT",
        "shape": [1, 1],
        "datatype": "BYTES",
        "data": [""],
    }
    assert request["inputs"][1]["shape"] == [1, 1, 3]
    assert request["inputs"][1]["data"] == [False, False, False]
    assert json.loads(sample_request_text(parse_config(CONFIG))) == request
    assert json.loads(sample_request_text(None)) == {"inputs": []}
