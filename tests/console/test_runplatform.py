"""`make run`'s command: the whole platform on the embedded default, demo models served, and
everything it started stops with it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.embedded


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def test_runplatform_serves_the_demo_models_and_stops_everything_on_sigterm(
    tmp_path: Path,
) -> None:
    names = ("console", "http", "grpc", "metrics")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    # As on a fresh clone: no settings module, environment, key or inference auth chosen.
    unset = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PORTICO_ENV", "SECRET_KEY",
             "PORTICO_INFERENCE_AUTH")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(PORTICO_VAR_DIR=str(tmp_path), PORTICO_ADMIN_PASSWORD="demo-password-1")
    command = [
        sys.executable, str(ROOT / "manage.py"), "runplatform",
        "--console-port", str(ports["console"]), "--http-port", str(ports["http"]),
        "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]),
    ]  # fmt: skip
    log_path = tmp_path / "platform.log"
    with log_path.open("wb") as log:
        platform = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT)  # fmt: skip
    try:
        serving = f"http://127.0.0.1:{ports['http']}"
        console = f"http://127.0.0.1:{ports['console']}/login/"
        deadline = time.monotonic() + 240
        # The console and serving start side by side: on a busy machine either may answer last.
        # A model's readiness answers as soon as the HTTP port listens; the server's readiness
        # waits for every listener, the metrics port (bound last) included.
        while (
            _status(f"{serving}/v2/models/pipeline/ready") != 200
            or _status(f"{serving}/v2/health/ready") != 200
            or _status(console) != 200
        ):
            assert platform.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the demo pipeline or the console never answered"
            time.sleep(0.5)
        for model in ("mlp", "preprocess"):
            assert _status(f"{serving}/v2/models/{model}/ready") == 200
        # The console may still be importing when serving is ready (a loaded machine).
        while _status(f"http://127.0.0.1:{ports['console']}/login/") != 200:
            assert platform.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the console never answered"
            time.sleep(0.5)
        # Production-safe: a key of its own, kept private, and no debug pages.
        assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
        missing = f"http://127.0.0.1:{ports['console']}/no-such-page/"
        with pytest.raises(urllib.error.HTTPError) as not_found:
            urllib.request.urlopen(missing, timeout=5)
        assert not_found.value.code == 404
        assert b"URLconf" not in not_found.value.read()
        assert _status(f"http://127.0.0.1:{ports['metrics']}/metrics") == 200
        # The demo needs no inference token: loopback only, and the banner says so.
        log_text = log_path.read_text()
        assert "Inference auth is OFF" in log_text
        assert "on 127.0.0.1 (inference auth off)" in log_text
        children = psutil.Process(platform.pid).children(recursive=True)
        assert len(children) >= 3
    finally:
        platform.send_signal(signal.SIGTERM)
        platform.wait(timeout=60)
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], alive
