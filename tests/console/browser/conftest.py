"""A live platform for the browser tests: the console (ASGI, WebSockets) and a serving replica as
subprocesses against the test database, a real Celery worker, and Debian's Chromium.

Each subprocess uses ``tests.celery_worker_settings`` (the test settings pointed at this test's
database, blob folder and broker queue) and is killed at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import free_port, free_ports

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 90


def _subprocess_env(queue: str, **extra: str) -> dict[str, str]:
    """The environment the worker fixture gives its worker: same database, blobs and queue."""
    from django.conf import settings
    from django.db import connection

    shared = {
        "db_name": connection.settings_dict["NAME"],
        "var_dir": str(settings.VAR_DIR),
        "blobs": settings.STORAGES["blobs"],
        "upload_dir": str(settings.UPLOAD_DIR),
        "broker_url": settings.CELERY_BROKER_URL,
        "broker_options": settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "queue": queue,
        "time_limit_s": 120,
        "stale_grace_s": 60,
    }
    env = dict(
        os.environ,
        PORTICO_TEST_WORKER=json.dumps(shared),
        DJANGO_SETTINGS_MODULE="tests.celery_worker_settings",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    return env


@dataclass
class Process:
    """A server subprocess with its log; ``stop()`` ends its whole process group."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _start(
    name: str, args: list[str], env: dict[str, str], tmp_path: Path, ready_url: str
) -> Process:
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process = Process(name, proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(ready_url, timeout=2).status_code < 500:
                return process
        if proc.poll() is not None or time.monotonic() > deadline:
            process.stop()
            raise RuntimeError(f"{name} did not start:\n{process.output()[-4000:]}")
        time.sleep(0.3)


@dataclass
class Platform:
    console_url: str
    serving_url: str
    processes: list[Process]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.processes)


def _start_console(queue: str, tmp_path: Path, serving_url: str) -> tuple[Process, str]:
    url = f"http://127.0.0.1:{free_port()}"
    env = _subprocess_env(queue, PORTICO_SERVING_HTTP_URL=serving_url)
    port = url.rsplit(":", 1)[1]
    return _start("console", ["runconsole", "--port", port], env, tmp_path, f"{url}/login/"), url


@pytest.fixture
def console_only(transactional_db, worker_queue: str, tmp_path: Path) -> Iterator[Platform]:  # type: ignore[no-untyped-def]
    """Just the console (pages and WebSockets), for tests that need no worker or serving."""
    console, url = _start_console(worker_queue, tmp_path, "http://127.0.0.1:9")
    yield Platform(url, "", [console])
    console.stop()


@pytest.fixture
def live_platform(
    transactional_db, live_worker, worker_queue: str, tmp_path: Path
) -> Iterator[Platform]:  # type: ignore[no-untyped-def]
    """Console + serving replica (registry mode) + the real Celery worker."""
    http, grpc, metrics = free_ports(3)
    serving_url = f"http://127.0.0.1:{http}"
    env = _subprocess_env(
        worker_queue,
        SERVING_HEARTBEAT_SECS="1",
        SERVING_REGISTRY_POLL_SECS="0.5",
        SERVING_CACHE_DIR=str(tmp_path / "serving-cache"),
    )
    serving = _start(
        "serving",
        [
            "serve",
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
        ],
        env,
        tmp_path,
        f"{serving_url}/v2/health/live",
    )
    try:
        console, url = _start_console(worker_queue, tmp_path, serving_url)
    except Exception:
        serving.stop()
        raise
    running = Platform(url, serving_url, [console, serving])
    yield running
    console.stop()
    serving.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's Chromium is not installed (make browser)")
    from playwright.sync_api import sync_playwright

    # NOTE: Playwright's sync API keeps an event loop running in this thread, which makes Django
    # refuse ORM calls from the test body; the ORM use here is plain synchronous set-up.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class Session:
    """One signed-in browser context; ``shot(name)`` saves a screenshot under test-artifacts."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.context = browser.new_context(
            base_url=base_url, viewport={"width": 1366, "height": 860}
        )
        self.context.set_default_timeout(20_000)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))

    def sign_in(self, username: str, password: str = "password") -> None:
        self.page.goto("/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        # Exactly the home page: "**/" would also match the login page a refused sign-in stays on.
        self.page.wait_for_url("/")

    def sign_out(self) -> None:
        self.page.click("text=Sign out")
        self.page.wait_for_url("**/login/")

    def shot(self, name: str, *, full_page: bool = True, docs: str = "") -> Path:
        """Save a screenshot under test-artifacts/console; with ``PORTICO_DOCS_IMG`` set (a
        folder) and ``docs`` given, also a viewport-sized one there for docs/console.md."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        docs_dir = os.environ.get("PORTICO_DOCS_IMG")
        if docs and docs_dir:
            self.page.screenshot(path=str(Path(docs_dir) / f"{docs}.png"))
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def session_factory(chromium: Any) -> Iterator[Any]:
    sessions: list[Session] = []

    def open_session(base_url: str) -> Session:
        session = Session(chromium, base_url)
        sessions.append(session)
        return session

    yield open_session
    for session in sessions:
        session.close()
