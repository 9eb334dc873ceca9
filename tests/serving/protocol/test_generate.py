"""Triton's generate extension over real HTTP: ``generate`` answers one flat JSON object,
``generate_stream`` sends each response of a decoupled model as a Server-Sent Event."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.backends.python.test_decoupled import REPEAT, REPEAT_CONFIG
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, folder_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

# A decoupled text model: COUNT responses, each TEXT = parameter "prefix" + PROMPT; with the
# parameter "fail", an error response ends the request after them.
CHATTER = textwrap.dedent("""\
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                params = json.loads(request.parameters())
                prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()[0]
                count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
                text = params.get("prefix", "").encode() + prompt
                sender = request.get_response_sender()
                for _ in range(count):
                    out = pb_utils.Tensor("TEXT", np.array([text], dtype=np.object_))
                    sender.send(pb_utils.InferenceResponse([out]))
                if params.get("fail"):
                    error = pb_utils.TritonError("chatter refused")
                    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                else:
                    sender.send(flags=FINAL)
            return None
""")

CHATTER_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "PROMPT" data_type: TYPE_STRING dims: [1] }
input { name: "COUNT" data_type: TYPE_INT32 dims: [1] }
output { name: "TEXT" data_type: TYPE_STRING dims: [1] }
instance_group { kind: KIND_CPU }
model_transaction_policy { decoupled: true }
"""

SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("generate")
    dm.write_python_model(repo, "repeat", REPEAT, REPEAT_CONFIG)
    dm.write_python_model(repo, "repeat_cancel", REPEAT, REPEAT_CONFIG)  # only the cancel test's
    dm.write_python_model(repo, "chatter", CHATTER, CHATTER_CONFIG)
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_bytes_one", dtype="BYTES", dims=(1,), max_batch_size=8)
    process = ServingProcess(folder_settings(repo, http_workers=request.param)).start()
    yield process
    process.stop()


@pytest.fixture
def http(server: ServingProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client:
        yield client


def post(http: httpx.Client, model: str, route: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return http.post(f"/v2/models/{model}/{route}", content=content)


def events(response: httpx.Response) -> list[Any]:
    """The SSE body as its events' JSON payloads, insisting on the ``data: ...\\n\\n`` framing."""
    assert response.headers["content-type"] == SSE
    chunks = response.text.split("\n\n")
    assert chunks[-1] == "", f"the stream ends inside an event: {response.text!r}"
    assert all(chunk.startswith("data: ") for chunk in chunks[:-1]), response.text
    return [orjson.loads(chunk.removeprefix("data: ")) for chunk in chunks[:-1]]


def assert_still_serving(http: httpx.Client) -> None:
    response = post(http, "identity_bytes_one", "generate", {"INPUT0": "still here"})
    assert response.status_code == 200
    assert response.json()["OUTPUT0"] == "still here"


def test_generate_on_an_onnx_model_answers_one_flat_json_object(http: httpx.Client) -> None:
    response = post(http, "simple", "generate", {"INPUT0": list(range(16)), "INPUT1": [1] * 16})
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON
    assert response.json() == {
        "model_name": "simple",
        "model_version": "1",
        "OUTPUT0": [i + 1 for i in range(16)],
        "OUTPUT1": [i - 1 for i in range(16)],
    }


def test_a_string_becomes_a_bytes_input_and_a_one_element_output_a_scalar(
    http: httpx.Client,
) -> None:
    response = post(http, "identity_bytes_one", "generate", {"INPUT0": "héllo"})
    assert response.status_code == 200
    assert response.json() == {
        "model_name": "identity_bytes_one",
        "model_version": "1",
        "OUTPUT0": "héllo",
    }


def test_a_version_in_the_path_is_the_version_that_runs(http: httpx.Client) -> None:
    response = post(http, "identity_bytes_one/versions/1", "generate", {"INPUT0": "v"})
    assert response.status_code == 200
    assert response.json()["model_version"] == "1"
    missing = post(http, "identity_bytes_one/versions/7", "generate_stream", {"INPUT0": "v"})
    assert (missing.status_code, missing.headers["content-type"]) == (404, JSON)
    assert missing.json() == {
        "error": "Request for unknown model: 'identity_bytes_one' version 7 is not found"
    }


def test_generate_stream_sends_each_response_of_a_decoupled_model_as_an_event(
    http: httpx.Client,
) -> None:
    response = post(http, "repeat", "generate_stream", {"IN": 3})
    assert response.status_code == 200
    assert response.text == "".join(
        f'data: {{"model_name":"repeat","model_version":"1","OUT":{out}}}\n\n'
        for out in (30, 31, 32)
    )
    assert events(response) == [
        {"model_name": "repeat", "model_version": "1", "OUT": out} for out in (30, 31, 32)
    ]


def test_a_decoupled_model_that_sends_no_response_is_an_empty_event_stream(
    http: httpx.Client,
) -> None:
    response = post(http, "repeat", "generate_stream", {"IN": 0})
    assert response.status_code == 200
    assert events(response) == []
    assert_still_serving(http)


def test_an_error_after_some_responses_is_the_last_event_of_a_200_answer(
    http: httpx.Client,
) -> None:
    body = {"PROMPT": "hi", "COUNT": 2, "parameters": {"fail": True}}
    response = post(http, "chatter", "generate_stream", body)
    assert response.status_code == 200  # the status went out with the first event
    assert events(response) == [
        {"model_name": "chatter", "model_version": "1", "TEXT": "hi"},
        {"model_name": "chatter", "model_version": "1", "TEXT": "hi"},
        {"error": "chatter refused"},
    ]
    assert_still_serving(http)


def test_an_error_as_the_first_event_sets_the_status(http: httpx.Client) -> None:
    body = {"PROMPT": "hi", "COUNT": 0, "parameters": {"fail": True}}
    response = post(http, "chatter", "generate_stream", body)
    assert response.status_code == 500
    assert events(response) == [{"error": "chatter refused"}]
    generate = post(http, "chatter", "generate", body)
    assert (generate.status_code, generate.json()) == (500, {"error": "chatter refused"})
    assert_still_serving(http)


def test_parameters_and_keys_that_name_no_input_reach_the_model_as_parameters(
    http: httpx.Client,
) -> None:
    as_object = {"PROMPT": "world", "COUNT": 1, "parameters": {"prefix": "hello "}}
    as_key = {"PROMPT": "world", "COUNT": 1, "prefix": "hello "}
    for body in (as_object, as_key):
        response = post(http, "chatter", "generate", body)
        assert response.status_code == 200, response.text
        assert response.json()["TEXT"] == "hello world"


def test_generate_stream_on_a_model_that_is_not_decoupled_answers_once(
    http: httpx.Client,
) -> None:
    response = post(http, "identity_bytes_one", "generate_stream", {"INPUT0": ["once"]})
    assert response.status_code == 200
    assert events(response) == [
        {"model_name": "identity_bytes_one", "model_version": "1", "OUTPUT0": "once"}
    ]


def test_generate_on_a_decoupled_model_needs_exactly_one_response(http: httpx.Client) -> None:
    one = post(http, "repeat", "generate", {"IN": 1})
    assert one.status_code == 200
    assert one.json() == {"model_name": "repeat", "model_version": "1", "OUT": 10}
    for n in (0, 2):
        response = post(http, "repeat", "generate", {"IN": n})
        assert (response.status_code, response.headers["content-type"]) == (400, JSON)
        assert "generate expects model to produce exactly 1 response" in response.json()["error"]
    assert_still_serving(http)


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    ("model", "body", "status", "message"),
    [
        ("nope", {"IN": 1}, 400, "Request for unknown model: 'nope' is not found"),
        ("chatter", {"PROMPT": "hi"}, 400, "COUNT"),
        ("chatter", {"PROMPT": 5, "COUNT": 1}, 400, "expected string values for BYTES input"),
        ("simple", {"INPUT0": ["1"] * 16, "INPUT1": [1] * 16}, 400, "expected integer values"),
        ("simple", {"INPUT0": [1] * 3, "INPUT1": [1] * 3}, 400, "expected 16 elements, got 3"),
        ("chatter", {"PROMPT": "hi", "COUNT": 1, "parameters": 1}, 400, "'parameters'"),
        ("chatter", {"PROMPT": "hi", "COUNT": 1, "nested": {"a": 1}}, 400, "'nested'"),
        ("chatter", b'{"PROMPT": ', 400, "failed to parse the request JSON"),
    ],
)
def test_a_request_refused_before_inference_is_a_json_error_and_the_server_goes_on(
    http: httpx.Client, route: str, model: str, body: Any, status: int, message: str
) -> None:
    response = post(http, model, route, body)
    assert (response.status_code, response.headers["content-type"]) == (status, JSON)
    assert message in response.json()["error"]
    assert_still_serving(http)


def test_the_generate_endpoints_take_only_post(http: httpx.Client) -> None:
    for route in ("generate", "generate_stream"):
        response = http.get(f"/v2/models/simple/{route}")
        assert response.status_code == 405
        assert response.json() == {"error": "Method Not Allowed"}


def test_a_client_that_leaves_a_stream_reaches_the_model_as_cancelled(
    http: httpx.Client, server: ServingProcess
) -> None:
    body = orjson.dumps({"IN": 1, "parameters": {"until_cancelled": True}})
    with (
        httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as leaving,
        leaving.stream("POST", "/v2/models/repeat_cancel/generate_stream", content=body) as sse,
    ):
        lines = sse.iter_lines()
        first = next(line for line in lines if line)
        assert orjson.loads(first.removeprefix("data: "))["OUT"] == 7
    # The connection is closed: the model's sender now says so, and it reports having seen it.
    report = post(http, "repeat_cancel", "generate", {"IN": 0, "parameters": {"report": True}})
    assert report.status_code == 200
    assert report.json()["OUT"] == 1


def test_the_server_lists_the_generate_extension(http: httpx.Client) -> None:
    assert "generate" in http.get("/v2").json()["extensions"]
