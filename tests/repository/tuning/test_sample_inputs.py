"""Uploaded sample inputs are read from a KServe v2 JSON request or from one .npy file per input,
and refused with a message naming the input and what is wrong when they do not fit the config."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from repository.tuning.sample_inputs import SampleInputError, sample_inputs_read

CONFIG = """name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "IMAGE" data_type: TYPE_FP32 dims: [ 2, -1 ] }
input { name: "MASK" data_type: TYPE_BOOL dims: [ 2 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }
"""
LIMIT = 4096


def request(**overrides: object) -> list[dict[str, object]]:
    image = {
        "name": "IMAGE",
        "datatype": "FP32",
        "shape": [1, 2, 3],
        "data": [[0, 1, 2], [3, 4, 5.5]],
    }
    mask = {"name": "MASK", "datatype": "BOOL", "shape": [1, 2], "data": [True, False]}
    image.update(overrides)
    return [image, mask]


def read_json(inputs: object, limit: int = LIMIT) -> list[dict[str, object]]:
    content = json.dumps({"inputs": inputs}).encode()
    return sample_inputs_read([("req.json", content)], config_text=CONFIG, max_bytes=limit)


def npy(array: np.ndarray) -> bytes:  # type: ignore[type-arg]
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_a_json_request_that_fits_is_kept_as_its_inputs() -> None:
    inputs = read_json(request())
    assert [i["name"] for i in inputs] == ["IMAGE", "MASK"]
    assert inputs[0]["shape"] == [1, 2, 3] and inputs[1]["data"] == [True, False]


def test_one_npy_per_input_is_read_by_file_name() -> None:
    files = [
        ("IMAGE.npy", npy(np.arange(12, dtype=np.float32).reshape(2, 2, 3))),
        ("MASK.npy", npy(np.ones((2, 2), dtype=bool))),
    ]
    inputs = sample_inputs_read(files, config_text=CONFIG, max_bytes=LIMIT)
    assert inputs[0] == {
        "name": "IMAGE",
        "datatype": "FP32",
        "shape": [2, 2, 3],
        "data": [float(v) for v in range(12)],
    }
    assert inputs[1]["datatype"] == "BOOL" and inputs[1]["shape"] == [2, 2]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (request()[:1], r"exactly IMAGE, MASK \(missing: MASK\)"),
        ([*request(), {**request()[1], "name": "EXTRA"}], "not inputs of this model: EXTRA"),
        ([*request(), request()[1]], "given twice: MASK"),
        (request(datatype="INT64"), "input IMAGE: datatype INT64, the model takes FP32"),
        (request(shape=[1, 3, 3]), r"input IMAGE: shape \[1, 3, 3\], the model takes dims"),
        (request(shape=[9, 2, 3]), r"the model takes \[1..8, 2, -1\] \(batch first\)"),
        (request(shape=[1, 2, 4]), r"input IMAGE: 6 values for shape \[1, 2, 4\] \(8 expected\)"),
        (request(data=[0, 1, 2, 3, 4, "five"]), "input IMAGE: 'five' is not a FP32 value"),
    ],
)
def test_inputs_that_do_not_fit_the_config_are_refused_with_the_reason(
    inputs: object, message: str
) -> None:
    with pytest.raises(SampleInputError, match=message):
        read_json(inputs)


def test_inputs_that_disagree_on_the_batch_are_refused() -> None:
    image, mask = request(shape=[2, 2, 3], data=list(range(12)))
    with pytest.raises(SampleInputError, match=r"disagree on the batch size: \[1, 2\]"):
        read_json([image, mask])


def test_size_cap_bad_files_and_mixed_uploads_are_refused() -> None:
    with pytest.raises(SampleInputError, match="at most 10"):
        read_json(request(), limit=10)
    with pytest.raises(SampleInputError, match="not JSON"):
        sample_inputs_read([("a.json", b"{nope")], config_text=CONFIG, max_bytes=LIMIT)
    with pytest.raises(SampleInputError, match="KServe v2 request"):
        sample_inputs_read([("a.json", b"[1, 2]")], config_text=CONFIG, max_bytes=LIMIT)
    with pytest.raises(SampleInputError, match="not a .npy array"):
        sample_inputs_read([("IMAGE.npy", b"junk")], config_text=CONFIG, max_bytes=LIMIT)
    with pytest.raises(SampleInputError, match="one .npy file per input"):
        sample_inputs_read(
            [("a.json", b"{}"), ("IMAGE.npy", b"")], config_text=CONFIG, max_bytes=LIMIT
        )
    with pytest.raises(SampleInputError, match="choose a .json file"):
        sample_inputs_read([], config_text=CONFIG, max_bytes=LIMIT)
