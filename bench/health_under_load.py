"""Health latency while large requests are served: does the event loop stay free?

`python -m bench.health_under_load [--clients 4] [--mib 64] [--seconds 25]` starts
``manage.py serve`` on an ONNX identity model, has ``--clients`` threads each send ``--mib`` MiB
binary identity requests in a loop, and probes ``/v2/health/live`` on a fresh connection every
50 ms meanwhile, as a load balancer would. It prints the probes' p50/p95/p99 and how many large
requests were answered. A probe waits behind whatever the server's event loop is doing, so whole-
body work on the loop shows up here as the tail (docs/serving.md, memory and liveness under abuse).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from repository import demo_models as dm

ROOT = Path(__file__).resolve().parents[1]
PROBE_INTERVAL_S = 0.05
START_TIMEOUT_S = 120.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=25.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as repo:
        dm.write_onnx_identity(Path(repo), "identity", dims=(-1,), max_batch_size=8)
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--model-repository", repo,
             "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "-1",
             "--metrics-port", "-1"], cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_live(port)
            print(_run(port, options.clients, options.mib, options.seconds))
        finally:
            server.terminate()
            server.wait(timeout=60)


def _run(port: int, clients: int, mib: int, seconds: float) -> str:
    count = (mib * 2**20 - 512) // 4
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, count], "datatype": "FP32",
                                     "parameters": {"binary_data_size": count * 4}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    body = header + np.ones(count, dtype=np.float32).tobytes()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    until = time.monotonic() + seconds
    answered: list[int] = []
    latencies: list[float] = []

    def send() -> None:
        while time.monotonic() < until:
            status = _request(port, "POST", "/v2/models/identity/infer", body, headers)
            answered.append(status)

    def probe() -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            if _request(port, "GET", "/v2/health/live") == 200:
                latencies.append(time.monotonic() - started)
            time.sleep(PROBE_INTERVAL_S)

    threads = [threading.Thread(target=send) for _ in range(clients)]
    threads.append(threading.Thread(target=probe))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(latencies) or [float("nan")]

    def ms(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return (
        f"{len(latencies)} health probes: p50 {ms(0.5):.1f} ms, p95 {ms(0.95):.1f} ms, "
        f"p99 {ms(0.99):.1f} ms; {answered.count(200)} of {len(answered)} {mib} MiB requests "
        f"answered 200 in {seconds:.0f} s by {clients} clients"
    )


def _request(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_live(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if _request(port, "GET", "/v2/health/live") == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"serve did not answer on port {port} within {START_TIMEOUT_S:.0f} s")


if __name__ == "__main__":
    main()
