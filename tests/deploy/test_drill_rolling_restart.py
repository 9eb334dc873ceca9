"""Drill: SIGTERM drains. Two replicas behind a load balancer that follows their readiness are
restarted one after the other under load, and not one request fails: each replica goes not-ready
first, keeps its listeners open for the drain grace, then finishes what is in flight and exits."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from repository import demo_models as dm
from tests.deploy.loopback import Load, LoopbackProxy, http_status, infer, serve, wait_until
from tests.ports import free_ports

pytestmark = pytest.mark.embedded

DRAIN_GRACE_S = 3
REQUESTS_BETWEEN_STEPS = 40


def test_rolling_restart_of_two_replicas_under_load_fails_no_request(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    ports = free_ports(2)
    logs = [tmp_path / "replica-0.log", tmp_path / "replica-1.log"]

    def start(i: int) -> subprocess.Popen[bytes]:
        args = ["--model-repository", str(repo), "--host", "127.0.0.1",
                "--http-port", str(ports[i]), "--grpc-port", "-1", "--metrics-port", "-1",
                "--drain-grace-secs", str(DRAIN_GRACE_S)]  # fmt: skip
        return serve(args, logs[i])

    replicas = [start(0), start(1)]
    proxy = LoopbackProxy(ports, health_path="/v2/health/ready")
    try:
        proxy.start()
        wait_until(lambda: proxy.healthy() == set(ports), "both replicas ready", log=logs[0])
        with Load(proxy.port) as load:
            load.wait_for_requests(REQUESTS_BETWEEN_STEPS)
            for i in range(2):
                replicas[i].send_signal(signal.SIGTERM)
                # Not ready first, while the listener stays open and still serves.
                wait_until(lambda: http_status(ports[i], "/v2/health/ready") == 400,  # noqa: B023
                           "readiness false after SIGTERM", log=logs[i])  # fmt: skip
                assert http_status(ports[i], "/v2/health/live") == 200
                assert infer(ports[i])["outputs"][0]["data"] == [1, 2, 3, 4]
                assert replicas[i].wait(timeout=60) == 0
                replicas[i] = start(i)
                wait_until(lambda: ports[i] in proxy.healthy(), "replica back",  # noqa: B023
                           log=logs[i])  # fmt: skip
                load.wait_for_requests(REQUESTS_BETWEEN_STEPS)
        served = dict(proxy.served)
    finally:
        proxy.close()
        for replica in replicas:
            if replica.poll() is None:
                replica.kill()
                replica.wait(timeout=30)
    assert load.failures == []
    assert all(served.get(port, 0) > 0 for port in ports), served
    print(f"\nrolling restart: {load.ok} requests, {len(load.failures)} failed")
