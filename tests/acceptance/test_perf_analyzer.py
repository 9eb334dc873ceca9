"""Triton's ``perf_analyzer`` load generator, unchanged, against ``simple`` over HTTP and gRPC.

A one-second smoke measurement: the run must complete and report non-zero throughput. The binary
is not a Python package dependency of the project; point ``PERF_ANALYZER`` at it to run these tests.
"""

from __future__ import annotations

import csv
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.example_repository import write_client_examples_repository
from tests.acceptance.server import ServerProcess, run_server

PERF_ANALYZER = os.environ.get("PERF_ANALYZER", "")
RUN_TIMEOUT_S = 120

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.skipif(
        not PERF_ANALYZER,
        reason="perf_analyzer not configured: set PERF_ANALYZER to the perf_analyzer executable "
        "(pip install perf-analyzer) to run the load-generator smoke tests",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("perf-analyzer")
    write_client_examples_repository(repo)
    with run_server(repo) as running:
        yield running


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_one_second_measurement(
    server: ServerProcess, protocol: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.csv"
    command = [
        PERF_ANALYZER,
        "-m", "simple",
        "-u", server.http if protocol == "http" else server.grpc,
        "-i", protocol,
        "--concurrency-range", "1:1",
        "--measurement-interval", "1000",
        # A smoke run: accept the first window instead of waiting for stable numbers.
        "--stability-percentage", "999",
        "--max-trials", "3",
        "-f", str(report),
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    with report.open() as handle:
        row = next(csv.DictReader(handle))
    assert float(row["Inferences/Second"]) > 0
