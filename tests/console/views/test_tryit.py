"""“Try it” forwards a KServe v2 request to the serving HTTP API and reports outputs and latency.

A tiny real HTTP server stands in for a serving replica (the full serving process is exercised by
the browser tests)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse

pytestmark = pytest.mark.embedded


class _Serving(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, body))  # type: ignore[attr-defined]
        self.server.authorization.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        if "missing" in self.path:
            status, answer = 400, {"error": "Request for unknown model: 'missing' is not found"}
        else:
            data = body["inputs"][0]["data"]
            status, answer = (
                200,
                {
                    "model_name": "mlp",
                    "model_version": "2",
                    "outputs": [
                        {
                            "name": "OUTPUT0",
                            "datatype": "FP32",
                            "shape": [1, len(data)],
                            "data": data,
                        }
                    ],
                },
            )
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def fake_serving() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Serving)
    server.seen = []  # type: ignore[attr-defined]
    server.authorization = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def serving(settings) -> Iterator[ThreadingHTTPServer]:
    with fake_serving() as server:
        settings.PORTICO_SERVING_HTTP_URL = f"http://127.0.0.1:{server.server_address[1]}"
        yield server


REQUEST = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}


def test_try_it_forwards_and_reports_latency(deployer_client, catalog, serving):
    response = deployer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"request": REQUEST},
        content_type="application/json",
    )
    data = response.json()
    assert response.status_code == 200 and data["status"] == 200
    assert data["response"]["outputs"][0]["data"] == [1, 2]
    assert data["latency_ms"] > 0
    assert serving.seen == [("/v2/models/mlp/infer", REQUEST)]


def test_try_it_sends_the_consoles_inference_key(deployer_client, catalog, serving):
    from repository.console_key import console_inference_key

    deployer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"request": REQUEST},
        content_type="application/json",
    )
    assert serving.authorization == [f"Bearer {console_inference_key()}"]


def test_try_it_is_refused_to_a_viewer_who_may_not_call_models(viewer_client, catalog, serving):
    response = viewer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"request": REQUEST},
        content_type="application/json",
    )
    assert response.status_code == 403 and serving.seen == []


def test_try_it_a_chosen_version(deployer_client, catalog, serving):
    deployer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"request": REQUEST, "version": "3"},
        content_type="application/json",
    )
    assert serving.seen[0][0] == "/v2/models/mlp/versions/3/infer"


def test_try_it_passes_serving_errors_through(deployer_client, catalog, serving):
    from tests.factories import ModelFactory

    ModelFactory(name="missing")
    data = deployer_client.post(
        reverse("console:model-try", args=["missing"]),
        data={"request": REQUEST},
        content_type="application/json",
    ).json()
    assert data["status"] == 400 and "unknown model" in data["response"]["error"]


def test_try_it_rejects_a_malformed_request(deployer_client, catalog, serving):
    response = deployer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"inputs": "nope"},
        content_type="application/json",
    )
    assert response.status_code == 400 and "KServe v2 JSON" in response.json()["message"]


def test_try_it_says_when_serving_is_down(deployer_client, catalog, settings):
    settings.PORTICO_SERVING_HTTP_URL = "http://127.0.0.1:9"
    response = deployer_client.post(
        reverse("console:model-try", args=["mlp"]),
        data={"request": REQUEST},
        content_type="application/json",
    )
    assert response.status_code == 502 and "did not answer" in response.json()["message"]


def test_try_it_unknown_model_is_404_and_get_is_405(deployer_client, catalog):
    url = reverse("console:model-try", args=["nope"])
    assert deployer_client.post(url, data={}, content_type="application/json").status_code == 404
    assert deployer_client.get(reverse("console:model-try", args=["mlp"])).status_code == 405


def test_model_page_prefills_a_sample_request(deployer_client, catalog):
    body = deployer_client.get(reverse("console:model-detail", args=["mlp"])).content.decode()
    assert "&quot;name&quot;: &quot;INPUT0&quot;" in body
    assert "&quot;shape&quot;: [1, 4]" in body


def test_try_it_without_a_configured_url_calls_the_url_a_live_replica_advertises(
    deployer_client, catalog, settings
):
    from django.utils import timezone

    from repository.services import replica_heartbeat

    with fake_serving() as server:
        settings.PORTICO_SERVING_HTTP_URL = ""
        advertised = f"http://127.0.0.1:{server.server_address[1]}"
        replica_heartbeat(replica_id="r1", address=advertised.split("//")[1], http_url=advertised,
                          started_at=timezone.now(), versions=[], last_error="")  # fmt: skip
        data = deployer_client.post(
            reverse("console:model-try", args=["mlp"]),
            data={"request": REQUEST},
            content_type="application/json",
        ).json()
    assert data["status"] == 200 and data["url"] == advertised + "/v2/models/mlp/infer"
