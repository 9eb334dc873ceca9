"""Starting a serving process for tests: in-process on a thread, or as a real subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[2]


# Module fixtures parametrised with these run their tests with HTTP in the serving process and
# again through two HTTP front-end processes (``--http-workers 2``).
HTTP_WORKERS = (0, 2)
HTTP_WORKER_IDS = ("http-in-process", "http-frontends")


def copy_onnx_version(repo: Path, model: str, source: int, target: int) -> None:
    """A new version folder holding ``source``'s model file (what a poll picks up as a swap)."""
    (repo / model / str(target)).mkdir()
    (repo / model / str(target) / "model.onnx").write_bytes(
        (repo / model / str(source) / "model.onnx").read_bytes()
    )


def swap_under_load(
    repo: Path, loads: list[Callable[[], None]], stop: threading.Event, swapped: Callable[[], bool]
) -> None:
    """Run ``loads`` on threads, copy ``identity`` version 1 to version 2 in ``repo`` (poll mode
    picks it up), wait until ``swapped()`` says the clients saw it, then a second more, and
    stop them."""
    threads = [threading.Thread(target=load) for load in loads]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    copy_onnx_version(repo, "identity", 1, 2)
    wait_until(swapped, 60.0)
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(60)


def folder_settings(repo: Path, **overrides: Any) -> ServingSettings:
    values: dict[str, Any] = {
        "model_repository": repo, "host": "127.0.0.1", "http_port": 0, "grpc_port": 0,
        "metrics_port": 0, "exit_timeout_s": 5.0, "cpu_count": 1,
    }  # fmt: skip
    values.update(overrides)
    return ServingSettings(**values)


@contextmanager
def serving(repo: Path, **overrides: Any) -> Iterator[ServingProcess]:
    process = ServingProcess(folder_settings(repo, **overrides)).start()
    try:
        yield process
    finally:
        process.stop()


def set_version_policy(model_dir: Path, policy: str) -> None:
    """Rewrite a model's config.pbtxt with ``version_policy`` (e.g. ``all {}``)."""
    config_path = model_dir / "config.pbtxt"
    cfg = text_format.Parse(config_path.read_text(), mc.ModelConfig())
    text_format.Parse(f"version_policy {{ {policy} }}", cfg)
    config_path.write_text(text_format.MessageToString(cfg))


def write_protocol_repository(repo: Path) -> None:
    """The models the protocol tests use (all ONNX, so the server starts fast)."""
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_bytes", dtype="BYTES", dims=(-1,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_bytes_one", dtype="BYTES", dims=(1,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_fp16_2d", dtype="FP16", dims=(-1, -1), max_batch_size=0)
    dm.write_onnx_identity(repo, "identity_bool", dtype="BOOL", dims=(-1,), max_batch_size=0)
    dm.write_onnx_identity(repo, "identity_fp16", dtype="FP16", dims=(-1,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_int64", dtype="INT64", dims=(4,), max_batch_size=0)
    dm.write_onnx_identity(repo, "identity_uint8", dtype="UINT8", dims=(-1,), max_batch_size=0)
    dm.write_onnx_identity(repo, "identity_fp64", dtype="FP64", dims=(-1,), max_batch_size=0)
    dm.write_onnx_identity(repo, "versioned", version=1, dims=(-1,), max_batch_size=8)
    model_dir = dm.write_onnx_identity(repo, "versioned", version=2, dims=(-1,), max_batch_size=8)
    set_version_policy(model_dir, "all {}")
    classes = dm.write_onnx_identity(repo, "classes", dims=(4,), max_batch_size=0)
    config_path = classes / "config.pbtxt"
    cfg = text_format.Parse(config_path.read_text(), mc.ModelConfig())
    cfg.output[0].label_filename = "labels.txt"
    config_path.write_text(text_format.MessageToString(cfg))
    (classes / "labels.txt").write_text("cat\ndog\nbird\nfish\n")


def wait_ready(
    url: str, timeout_s: float = 60.0, process: subprocess.Popen[Any] | None = None
) -> None:
    """Wait until the HTTP port accepts connections and the server says it is live and ready
    (ready comes a moment after HTTP opens: every listener must accept first).

    Probes with plain sockets first: a refused connection inside tritonclient's HTTP client leaves
    a socket behind that the garbage collector later reports as unclosed.
    """
    host, port = url.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    else:
        raise TimeoutError(f"server at {url} did not come up")
    client = httpclient.InferenceServerClient(url)
    try:
        assert client.is_server_live()
        while not client.is_server_ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"server at {url} is live but never became ready")
            time.sleep(0.05)
    finally:
        client.close()


@contextmanager
def serving_subprocess(args: list[str], **env: str) -> Iterator[subprocess.Popen[str]]:
    """A real serving process (killed in teardown if still running)."""
    environment = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def registry_replica_without_console_key(
    *, database_url: str, port: int, cache_dir: Path, **env: str
) -> subprocess.Popen[bytes]:
    """A registry-mode ``manage.py serve`` with serving's own settings (a random key of its own,
    never this process's ``SECRET_KEY``, which ``serving_subprocess`` would pass on), HTTP only."""
    from django.conf import settings

    environment = {key: value for key, value in os.environ.items() if key != "SECRET_KEY"}
    environment.update(
        DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="console.settings.serving",
        PORTICO_BLOB_DIR=settings.STORAGES["blobs"]["OPTIONS"]["location"],
        SERVING_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), **env,
    )  # fmt: skip
    args = ["manage.py", "serve", "--host", "127.0.0.1", "--http-port", str(port),
            "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=environment)


def identity_input(x: np.ndarray[Any, Any], *, binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", list(x.shape), _datatype(x))
    tensor.set_data_from_numpy(x, binary_data=binary)
    return tensor


def _datatype(x: np.ndarray[Any, Any]) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(x.dtype))


def frontend_children(pid: int, module: str) -> list[int]:
    """The front-end processes running ``module`` among ``pid``'s children (model processes are
    children too)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            if parent == pid and module.encode() in command:
                found.append(int(entry))
    return found


def process_alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def rss_mib(pid: int) -> float:
    """``pid``'s resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def settled_rss_mib(pid: int, deadline_s: float = 20.0) -> float:
    """``pid``'s resident memory once it stopped growing (unchanged for a second)."""
    last, since = rss_mib(pid), time.monotonic()
    deadline = since + deadline_s
    while time.monotonic() < deadline and time.monotonic() - since < 1.0:
        time.sleep(0.1)
        now = rss_mib(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def wait_until(predicate: Any, deadline_s: float = 60.0) -> None:
    """Poll ``predicate`` until it holds; fail past ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {deadline_s} s"
        time.sleep(0.05)
