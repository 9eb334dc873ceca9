"""The live dashboards in a real Chromium: a serving replica under load, the console collecting from
it, the model dashboard's charts updating every second, and a promote showing up as a marker."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from repository.demo_models import write_onnx_mlp
from tests.ports import free_port, free_ports

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
MODEL = "dash_mlp"


def _wait_for(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def serving_url(tmp_path: Path) -> Iterator[str]:
    """``manage.py serve`` on a Triton folder holding one small MLP, on free ports."""
    write_onnx_mlp(tmp_path / "models", MODEL, sizes=(16, 32, 4), max_batch_size=8)
    http_port, grpc_port, metrics_port = free_ports(3)
    log = (tmp_path / "serve.log").open("wb")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings.test", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--model-repository", str(tmp_path / "models"),
         "--http-port", str(http_port), "--grpc-port", str(grpc_port),
         "--metrics-port", str(metrics_port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{http_port}"
    try:
        _wait_for(
            lambda: httpx.get(f"{url}/v2/models/{MODEL}/ready", timeout=1).status_code == 200,
            timeout_s=60,
            what="the serving replica",
        )
        yield url
    finally:
        _stop(proc)
        log.close()


class Load:
    """Inference requests from a background thread at a modest rate (the machine is shared)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                            "data": [0.5] * 16}]}  # fmt: skip
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                client.post(f"{self.url}/v2/models/{MODEL}/infer", json=body).raise_for_status()
                self.sent += 1
                time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def console_url(serving_url: str, tmp_path: Path) -> Iterator[str]:
    """The console (pages, static files, WebSockets, its collector polling the replica above) under
    uvicorn in a subprocess sharing the test database, as ``runconsole`` runs it."""
    from django.db import connection

    port = free_port()
    shared = {
        "db_name": connection.settings_dict["NAME"],
        "replica_urls": [serving_url],
        "group": f"dashboards-test-{uuid.uuid4().hex[:12]}",  # parallel tests share one Redis
    }
    env = dict(
        os.environ,
        PORTICO_TEST_CONSOLE=json.dumps(shared),
        DJANGO_SETTINGS_MODULE="tests.console.browser.dashboard_console",
        PYTHONUNBUFFERED="1",
    )
    log = (tmp_path / "console.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory",
         "tests.console.browser.dashboard_console:application_with_static",
         "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(
            lambda: httpx.get(f"{url}/login/", timeout=1).status_code == 200,
            timeout_s=60,
            what="the console",
        )
        yield url
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def browser_page(console_url: str) -> Iterator[Any]:
    from django.test import Client
    from playwright.sync_api import sync_playwright

    from tests.factories import UserFactory

    if not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed (make browser)")
    client = Client()
    client.force_login(UserFactory(username="watcher", role="viewer"))
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        context = browser.new_context(viewport={"width": 1400, "height": 1700})
        context.add_cookies(
            [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": console_url}]
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors
        yield page
        browser.close()


def _dataset(page: Any, selector: str, key: str) -> int:
    return int(page.eval_on_selector(selector, f"el => el.dataset.{key} || '0'"))


def _stat(page: Any, name: str) -> str:
    return str(page.text_content(f"[data-stat='{name}']")).strip()


@pytest.fixture
def registered_model() -> Callable[[], None]:
    """The served model in the registry with two ready versions; returns "promote version 2"."""
    from repository.services.promotion import model_version_promote
    from tests.factories import ModelFactory, ModelVersionFactory, UserFactory

    deployer = UserFactory(username="shipper", role="deployer")
    model = ModelFactory(name=MODEL)
    ModelVersionFactory(model=model, number=1)
    v2 = ModelVersionFactory(model=model, number=2)
    return lambda: _in_thread(lambda: model_version_promote(version=v2, actor=deployer))


def _in_thread(call: Callable[[], Any]) -> None:
    """Run ORM code off this thread: Playwright's sync API keeps an event loop running here."""
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connection

        try:
            call()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    if errors:
        raise errors[0]


def test_model_dashboard_updates_live_and_marks_a_promotion(
    registered_model: Callable[[], None], browser_page: Any, console_url: str, serving_url: str
) -> None:
    page = browser_page
    root = "[data-dashboard-model]"
    page.goto(f"{console_url}/dashboards/models/{MODEL}/")
    page.wait_for_function(f"document.querySelector('{root}').dataset.frames >= 2", timeout=20_000)
    idle_rps = _stat(page, "rps")

    load = Load(serving_url)
    load.start()
    try:
        page.wait_for_function(
            "parseFloat(document.querySelector(\"[data-stat='rps']\").textContent) > 1",
            timeout=20_000,
        )
        updates_before = _dataset(page, "#chart-throughput", "updates")
        points_before = _dataset(page, "#chart-latency", "points")
        p95_seen = {_stat(page, "p95")}
        rps_seen = {_stat(page, "rps")}
        for _ in range(4):
            page.wait_for_timeout(1100)
            p95_seen.add(_stat(page, "p95"))
            rps_seen.add(_stat(page, "rps"))
        assert _dataset(page, "#chart-throughput", "updates") >= updates_before + 3
        assert _dataset(page, "#chart-latency", "points") > points_before
        assert _dataset(page, "#chart-split", "points") > points_before
        assert idle_rps in ("0", "0.0", "–")
        assert len(rps_seen) > 1, rps_seen  # the 10 s window fills up as load runs
        assert all(v not in ("–", "") for v in p95_seen), p95_seen
        assert _stat(page, "replicas") == "1 / 1"
        assert page.locator("#replica-rows tr").count() == 2  # combined + the replica
        assert page.locator("#batch-sizes .bar-row").count() >= 1

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard_model.png"), full_page=True)

        markers_before = _dataset(page, root, "markers")
        registered_model()  # promote v2
        page.wait_for_function(
            f"Number(document.querySelector('{root}').dataset.markers) > {markers_before}",
            timeout=15_000,
        )
        assert "promoted to v2" in str(page.text_content("#marker-list"))
        assert page.evaluate(
            f"window.porticoDashboard.markers.some(m => m.version === 2 && m.model === '{MODEL}')"
        )
        page.wait_for_timeout(1500)  # one more frame so the marker line is drawn on the charts
        page.screenshot(path=str(ARTIFACTS / "dashboard_model_promoted.png"), full_page=True)
    finally:
        load.stop()
    assert load.sent > 0
    assert page.errors == []


def test_fleet_and_compare_pages_show_the_model(
    browser_page: Any, console_url: str, serving_url: str
) -> None:
    page = browser_page
    load = Load(serving_url)
    load.start()
    try:
        page.goto(f"{console_url}/dashboards/")
        page.wait_for_function(
            "document.querySelector('[data-dashboard-fleet]').dataset.frames >= 3", timeout=20_000
        )
        row = page.locator(f"#model-rows tr[data-model='{MODEL}']")
        assert row.count() == 1
        page.wait_for_function(
            f"parseFloat(document.querySelector(\"tr[data-model='{MODEL}'] td:nth-child(4)\")"
            ".textContent) > 0",
            timeout=20_000,
        )
        assert _stat(page, "replicas") == "1 / 1"
        assert _dataset(page, f"[data-spark='{MODEL}']", "points") >= 2
        assert _dataset(page, "#chart-resources", "points") >= 2  # CPU of the replica over time
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard_fleet.png"), full_page=True)

        page.goto(f"{console_url}/dashboards/models/{MODEL}/compare/")
        page.fill("input[name=a_from]", "2")
        page.fill("input[name=a_to]", "0")
        page.click("#compare-form button[type=submit]")
        page.wait_for_function(
            "parseFloat(document.querySelector('#compare-rows tr:nth-child(4) td[data-side=a]')"
            "?.textContent) > 0",
            timeout=15_000,
        )
        page.screenshot(path=str(ARTIFACTS / "dashboard_compare.png"), full_page=True)
    finally:
        load.stop()
    assert page.errors == []
