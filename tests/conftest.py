"""Shared fixtures. Tests use the real database and broker named by the settings (PostgreSQL and
Redis in CI, SQLite and the filesystem broker in the embedded run); nothing is mocked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# NOTE: before anything starts grpc: the test process forks servers while grpc clients are
# active, and grpc's fork handlers abort such a child before its exec (see serving/__init__.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# Servers the tests start serve both protocols in-process unless a test asks for front-ends:
# ``serve``'s default, --workers auto, would start some on a developer's many-core machine and
# none on CI's 2 cores. tests/serving/test_worker_count.py tests auto itself.
os.environ.setdefault("SERVING_WORKERS", "0")

from tests.s3_server import S3Server, start_s3_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKER_START_TIMEOUT_S = 60


# --- registry data -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _console_key_unpublished() -> None:
    """Each test starts with a fresh database, so the console checks the token table again."""
    from repository.console_key import console_key_forget

    console_key_forget()


@pytest.fixture
def deployer(db):  # type: ignore[no-untyped-def]
    """A user in the deployer group."""
    from tests.factories import UserFactory

    return UserFactory(username="deployer", role="deployer")


@pytest.fixture
def registry_admin(db):  # type: ignore[no-untyped-def]
    """A user in the admin group (not a superuser)."""
    from tests.factories import UserFactory

    return UserFactory(username="registry-admin", role="admin")


@pytest.fixture
def second_admin(db):  # type: ignore[no-untyped-def]
    """Another admin: the second person an approval needs."""
    from tests.factories import UserFactory

    return UserFactory(username="second-admin", role="admin")


@pytest.fixture
def viewer(db):  # type: ignore[no-untyped-def]
    from tests.factories import UserFactory

    return UserFactory(username="viewer", role="viewer")


@pytest.fixture
def model_repo(tmp_path: Path) -> Path:
    """An empty folder to write Triton-layout models into (see repository.demo_models)."""
    path = tmp_path / "models"
    path.mkdir()
    return path


# --- a real Celery worker ------------------------------------------------------------------------


class LiveWorker:
    """A ``celery worker`` subprocess on its own queue, sharing the test database and blob store."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, queue: str) -> None:
        self.proc, self.log, self.queue = proc, log, queue

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """Kill the worker and its children at once, as a crash (or OOM killer) would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_live_worker(
    tmp_path: Path,
    *,
    queue: str,
    time_limit_s: float = 120,
    stale_grace_s: float = 60,
    check_module: str = "",
    settings_overrides: dict[str, object] | None = None,
) -> LiveWorker:
    """Start a worker; the caller must ``stop()`` it. The test process must send to ``queue``."""
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
        "time_limit_s": time_limit_s,
        "stale_grace_s": stale_grace_s,
        "check_module": check_module,
        "settings_overrides": settings_overrides or {},
    }
    env = dict(
        os.environ,
        PORTICO_TEST_WORKER=json.dumps(shared),
        DJANGO_SETTINGS_MODULE="tests.celery_worker_settings",
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    log = tmp_path / f"worker-{queue}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "-Q",
                queue,
                "-P",
                "solo",
                "-c",
                "1",
                "-l",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{queue}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = LiveWorker(proc, log, queue)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while " ready." not in worker.output():
        if proc.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError("the Celery worker did not start:\n" + worker.output()[-4000:])
        time.sleep(0.2)
    return worker


@pytest.fixture
def worker_queue() -> Iterator[str]:
    """A queue private to this test: tasks the test enqueues go there (xdist-safe)."""
    from console.celery import app

    queue = f"test-{uuid.uuid4().hex[:12]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = previous


@pytest.fixture
def live_worker(transactional_db, worker_queue: str, tmp_path: Path) -> Iterator[LiveWorker]:  # type: ignore[no-untyped-def]
    """A real Celery worker subprocess consuming this test's queue against the test database.

    Tests using it see committed data only (``transactional_db``); it is stopped at teardown.
    """
    worker = start_live_worker(tmp_path, queue=worker_queue)
    yield worker
    worker.stop()


# --- a real S3-protocol server -------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's standalone S3 server on loopback (one per test process), signatures checked."""
    server = start_s3_server(tmp_path_factory.mktemp("s3") / "s3-server.log")
    yield server
    server.stop()


@pytest.fixture
def aws_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    """The standard AWS variables name the test server and its key, and nothing else does: no
    other AWS variable, profile or shared credentials file is seen (subprocesses inherit this)."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    return s3_server


@pytest.fixture
def s3_blobs(settings, aws_env: S3Server) -> tuple[S3Server, str]:  # type: ignore[no-untyped-def]
    """STORAGES["blobs"] in a fresh bucket of the test server, under the prefix "portico/blobs"
    (a Celery worker started afterwards uses it too)."""
    bucket = aws_env.new_bucket()
    options = {"bucket_name": bucket, "location": "portico/blobs", "default_acl": None}
    backend = settings.BLOB_BACKENDS["s3"]
    settings.STORAGES = {**settings.STORAGES, "blobs": {"BACKEND": backend, "OPTIONS": options}}
    return aws_env, bucket
