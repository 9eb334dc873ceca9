"""Approved code is contained too: a hostile Python model in a serving process sees none of the
server's secrets, and nothing it starts outlives the server, even one killed by SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2

from repository import demo_models
from serving.backends.python import autocomplete, shm
from tests.ports import free_port
from tests.repository.config.test_child_env import SECRETS as ENV_SECRETS
from tests.serving.harness import ROOT, serving, wait_ready

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

SECRETS = {**ENV_SECRETS, "PORTICO_BLOB_STORAGE": "storages.backends.s3.S3Storage"}

# Reports its whole environment, and forks a child that starts its own session (escaping any
# process-group kill) and then execs a sleeper named by the model's TOKEN parameter.
HOSTILE = textwrap.dedent("""\
    import json, os, sys
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            token = json.loads(args["model_config"])["parameters"]["token"]["string_value"]
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, "-c",
                                              "import time; time.sleep(600)", token])
                os._exit(0)

        def execute(self, requests):
            seen = json.dumps(dict(os.environ)).encode()
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "ENV", np.array([seen], dtype=object))]) for _ in requests]
""")


def hostile_config(token: str) -> str:
    return f"""
    backend: "python" max_batch_size: 0
    input {{ name: "INPUT0" data_type: TYPE_FP32 dims: [1] }}
    output {{ name: "ENV" data_type: TYPE_STRING dims: [1] }}
    parameters {{ key: "token" value {{ string_value: "{token}" }} }}
    """


def processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_until(predicate: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def env_seen_by(url: str, model: str) -> dict[str, str]:
    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        result = client.infer(model, [tensor])
        return json.loads(result.as_numpy("ENV")[0])  # type: ignore[no-any-return]
    finally:
        client.close()


def test_hostile_model_sees_no_secret_and_nothing_it_forks_outlives_a_killed_server(
    tmp_path: Path,
) -> None:
    token = f"portico-outlive-{os.getpid()}-{time.monotonic_ns()}"
    demo_models.write_python_model(tmp_path / "repo", "hostile", HOSTILE, hostile_config(token))
    port = free_port()
    args = ["-m", "serving", "--model-repository", str(tmp_path / "repo"), "--host", "127.0.0.1",
            "--http-port", str(port), "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
    environment = {**os.environ, **SECRETS, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=environment)
    try:
        wait_ready(f"127.0.0.1:{port}", process=server)
        seen = env_seen_by(f"127.0.0.1:{port}", "hostile")
        wait_until(lambda: processes_naming(token))
        model_processes = processes_naming(f"portico_{server.pid}_")
        assert model_processes
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    assert not set(SECRETS) & set(seen), seen
    assert not [v for v in seen.values() if "hunter2" in v or "aws-secret" in v]
    assert seen["HOME"] != os.environ.get("HOME") and seen["PATH"]
    wait_until(
        lambda: not processes_naming(token) and not processes_naming(f"portico_{server.pid}_")
    )


# Also keeps its own process alive: the stub's watch for a vanished server can no longer exit,
# and a non-daemon thread holds the interpreter open after the server's socket closes.
DISARMING = HOSTILE.replace(
    "            os._exit(0)\n",
    "            os._exit(0)\n"
    "        os._exit = lambda code: None\n"
    "        import threading, time\n"
    "        threading.Thread(target=time.sleep, args=(600,)).start()\n",
)


def test_without_bubblewrap_model_processes_still_die_with_a_killed_server(tmp_path: Path) -> None:
    token = f"portico-outlive-{os.getpid()}-{time.monotonic_ns()}"
    assert DISARMING != HOSTILE
    demo_models.write_python_model(tmp_path / "repo", "hostile", DISARMING, hostile_config(token))
    port = free_port()
    args = ["-m", "serving", "--model-repository", str(tmp_path / "repo"), "--host", "127.0.0.1",
            "--http-port", str(port), "--grpc-port", "-1", "--metrics-port", "-1"]  # fmt: skip
    # No bwrap on PATH: only PR_SET_PDEATHSIG ties the model's process to the server.
    environment = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=environment)
    try:
        wait_ready(f"127.0.0.1:{port}", process=server)
        wait_until(lambda: processes_naming(token))
        assert processes_naming(f"portico_{server.pid}_")
        server.send_signal(signal.SIGKILL)
        server.wait()
        wait_until(lambda: not processes_naming(f"portico_{server.pid}_"))
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        # NOTE: outside a PID namespace a child that called setsid() does outlive the server.
        for pid in processes_naming(token):
            os.kill(pid, signal.SIGKILL)


def test_model_processes_and_their_children_end_with_a_stopped_server(tmp_path: Path) -> None:
    token = f"portico-outlive-{os.getpid()}-{time.monotonic_ns()}"
    demo_models.write_python_model(tmp_path / "repo", "hostile", HOSTILE, hostile_config(token))
    with serving(tmp_path / "repo", metrics_port=-1) as process:
        wait_until(lambda: processes_naming(token))
        assert "SECRET_KEY" not in env_seen_by(process.http_url, "hostile")
    wait_until(lambda: not processes_naming(token))


AUTOCOMPLETE_SPY = textwrap.dedent("""\
    import json, os


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            with open(os.path.join(os.path.dirname(__file__), "seen.json"), "w") as f:
                json.dump(dict(os.environ), f)
            config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]})
            config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]})
            return config

        def execute(self, requests):
            return []
""")


def test_hostile_auto_complete_sees_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    model_dir = demo_models.write_python_model(tmp_path, "spy", AUTOCOMPLETE_SPY, None)
    cfg = model_config_pb2.ModelConfig(name="spy", backend="python")
    completed = autocomplete(cfg, model_dir / "1", timeout_s=60)
    assert [t.name for t in completed.input] == ["INPUT0"]
    seen = json.loads((model_dir / "1" / "seen.json").read_text())
    assert not set(SECRETS) & set(seen), seen
    assert "CUDA_VISIBLE_DEVICES" not in seen or "CUDA_VISIBLE_DEVICES" in os.environ


def test_segments_of_a_dead_server_are_swept_at_start_and_live_ones_kept(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = f"portico_{gone.pid}_deadbeef_i1"
    live = f"portico_{os.getpid()}_cafecafe_i1"
    for name in (dead, live):
        (Path("/dev/shm") / name).write_bytes(b"\0" * 64)
    try:
        (tmp_path / "repo").mkdir()
        with serving(tmp_path / "repo", metrics_port=-1):
            pass
        assert not (Path("/dev/shm") / dead).exists()
        assert (Path("/dev/shm") / live).exists()
    finally:
        shm.unlink_prefixed(dead)
        shm.unlink_prefixed(live)
