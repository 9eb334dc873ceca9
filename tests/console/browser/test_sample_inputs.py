"""Sample inputs in Chromium: a deployer uploads a KServe v2 JSON request on the load-test page,
sees it listed with its shape, sees why a wrong one is refused, and deletes it; a viewer sees the
list without the upload form."""

from __future__ import annotations

import json

import pytest

from tests.factories import ModelVersionFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CONFIG = """name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }
"""


def request_file(tmp_path, name: str, shape: list[int]):  # type: ignore[no-untyped-def]
    count = 1
    for d in shape:
        count *= d
    path = tmp_path / name
    row = {"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": [0.5] * count}
    path.write_text(json.dumps({"inputs": [row]}))
    return path


def test_sample_inputs_in_the_browser(console_only, session_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    UserFactory(username="dana", role="deployer")
    UserFactory(username="vic", role="viewer")
    ModelVersionFactory(model__name="mlp", number=1, config_text=CONFIG)
    session = session_factory(console_only.console_url)
    session.sign_in("dana")
    page = session.page
    page.goto("/models/mlp/versions/1/tuning/")

    page.set_input_files(
        "#sample-input-form input[type=file]", request_file(tmp_path, "wide.json", [1, 5])
    )
    page.click("#sample-input-form button[type=submit]")
    page.wait_for_selector(".message.error")
    assert "input INPUT0: shape [1, 5], the model takes dims [4]" in page.inner_text(".messages")
    assert "No sample inputs" in page.inner_text("#sample-input-table")

    page.set_input_files(
        "#sample-input-form input[type=file]", request_file(tmp_path, "two.json", [2, 4])
    )
    page.click("#sample-input-form button[type=submit]")
    page.wait_for_selector("#sample-input-table tr[data-sample]")
    row = page.inner_text("#sample-input-table tbody")
    assert "two.json" in row and "INPUT0 FP32[2, 4]" in row and "dana" in row
    session.shot("sample-inputs")

    page.click("#sample-input-table tr[data-sample] button:has-text('Delete')")
    page.wait_for_selector(".message.success")
    assert "No sample inputs" in page.inner_text("#sample-input-table")

    page.set_input_files(
        "#sample-input-form input[type=file]", request_file(tmp_path, "one.json", [1, 4])
    )
    page.click("#sample-input-form button[type=submit]")
    page.wait_for_selector("#sample-input-table tr[data-sample]")
    session.sign_out()
    session.sign_in("vic")
    page.goto("/models/mlp/versions/1/tuning/")
    assert "INPUT0 FP32[1, 4]" in page.inner_text("#sample-input-table")
    assert page.locator("#sample-input-form").count() == 0
    assert page.locator("#sample-input-table button").count() == 0
    assert session.errors == []
