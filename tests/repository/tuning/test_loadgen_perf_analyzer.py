"""perf_analyzer as the load generator: the ``--input-data`` document made from a version's request
bodies, its report read back, which binary is chosen, and how a failure or a cancel ends a run.

The runs against a real server need the perf_analyzer executable; point ``PERF_ANALYZER`` at it
(as the acceptance tests do) to run them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from repository.tuning.launcher import private_server
from repository.tuning.loadgen import Shape
from repository.tuning.loadgen_perf_analyzer import (
    PerfAnalyzer,
    PerfAnalyzerError,
    account_from_report,
    input_data,
    perf_analyzer_binary,
)

PERF_ANALYZER = os.environ.get("PERF_ANALYZER", "")
needs_perf_analyzer = pytest.mark.skipif(
    not PERF_ANALYZER,
    reason="perf_analyzer not configured: set PERF_ANALYZER to the perf_analyzer executable "
    "(pip install perf-analyzer) to run the load tests it drives",
)


def body(*inputs: dict) -> bytes:  # type: ignore[type-arg]
    return json.dumps({"inputs": list(inputs)}).encode()


def test_a_batched_request_becomes_one_step_per_row_at_the_batch_size() -> None:
    two_rows = body(
        {"name": "X", "datatype": "FP32", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]},
        {"name": "Y", "datatype": "INT64", "shape": [2, 1], "data": [7.0, 8.0]},
    )
    document, batch = input_data([two_rows], batched=True)
    assert batch == 2
    assert document == {
        "data": [
            {
                "X": {"content": [1.0, 2.0, 3.0], "shape": [3]},
                "Y": {"content": [7], "shape": [1]},
            },
            {
                "X": {"content": [4.0, 5.0, 6.0], "shape": [3]},
                "Y": {"content": [8], "shape": [1]},
            },
        ]
    }
    # FP32 zeros must reach perf_analyzer as JSON floats: it refuses ``0`` for float data.
    assert json.dumps(document).count("1.0, 2.0, 3.0") == 1


def test_a_model_without_batching_keeps_the_full_shape_one_step_per_request() -> None:
    first = body({"name": "T", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]})
    second = body({"name": "T", "datatype": "BYTES", "shape": [2], "data": ["c", "d"]})
    document, batch = input_data([first, second], batched=False)
    assert batch == 1
    assert document["data"] == [
        {"T": {"content": ["a", "b"], "shape": [2]}},
        {"T": {"content": ["c", "d"], "shape": [2]}},
    ]


def test_inputs_that_disagree_on_the_batch_size_are_refused() -> None:
    mixed = body(
        {"name": "X", "datatype": "FP32", "shape": [2, 1], "data": [1, 2]},
        {"name": "Y", "datatype": "FP32", "shape": [3, 1], "data": [1, 2, 3]},
    )
    with pytest.raises(PerfAnalyzerError, match="one batch size"):
        input_data([mixed], batched=True)
    with pytest.raises(PerfAnalyzerError, match="no request bodies"):
        input_data([], batched=True)


def test_the_report_becomes_milliseconds_and_requests_per_second() -> None:
    report = (
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
        "p50 latency,p90 latency,p95 latency,p99 latency\n"
        "2,800,50,1145,94,263,638,490,16,1477,6230,8073,16201\n"
    )
    account = account_from_report(report, "  Client:\n    Request count: 1000\n", batch=2)
    assert account.generator == "perf_analyzer"
    assert account.throughput_per_s == 400 and account.requests == 1000
    assert account.elapsed_s == 2.5
    assert (account.p50_ms, account.p95_ms, account.p99_ms) == (1.477, 8.073, 16.201)
    assert account.phases_ms == {
        "queue": 0.094,
        "compute_input": 0.263,
        "compute_infer": 0.638,
        "compute_output": 0.49,
    }
    with pytest.raises(PerfAnalyzerError, match="report is empty"):
        account_from_report("", "boom", batch=1)


def test_the_configured_binary_wins_then_one_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert perf_analyzer_binary("") is None
    on_path = tmp_path / "perf_analyzer"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert perf_analyzer_binary("") == str(on_path)
    assert perf_analyzer_binary("/opt/pa/perf_analyzer") == "/opt/pa/perf_analyzer"


def test_a_missing_or_failing_binary_is_a_clear_error(tmp_path: Path) -> None:
    shape = Shape(mode="concurrency", duration_s=0.3, concurrency=1)
    bodies = [body({"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [1]})]
    missing = PerfAnalyzer.prepare(str(tmp_path / "nowhere"), bodies, batched=True, folder=tmp_path)
    with pytest.raises(PerfAnalyzerError, match="cannot run perf_analyzer at .*nowhere"):
        missing.drive(url="127.0.0.1:1", model="m", version=1, shape=shape, stop=threading.Event())
    failing = PerfAnalyzer.prepare("false", bodies, batched=True, folder=tmp_path)
    with pytest.raises(PerfAnalyzerError, match="perf_analyzer exited with 1"):
        failing.drive(url="127.0.0.1:1", model="m", version=1, shape=shape, stop=threading.Event())


@needs_perf_analyzer
@pytest.mark.timeout(300)
def test_against_a_real_server_closed_and_open_loop_and_a_cancel(tmp_path: Path) -> None:
    from repository.demo_models import write_onnx_mlp

    write_onnx_mlp(tmp_path / "models", "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    row = body({"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16})
    generator = PerfAnalyzer.prepare(PERF_ANALYZER, [row], batched=True, folder=tmp_path)
    with private_server(tmp_path / "models", startup_timeout_s=120) as server:
        for shape in (
            Shape(mode="concurrency", duration_s=1.0, concurrency=2),
            Shape(mode="rate", duration_s=1.0, rate_per_s=50),
        ):
            account = generator.drive(
                url=server.url, model="mlp", version=1, shape=shape, stop=threading.Event()
            )
            assert account.requests > 0 and account.throughput_per_s > 0, shape
            assert 0 < account.p50_ms <= account.p95_ms <= account.p99_ms
            assert account.phases_ms and account.phases_ms["compute_infer"] > 0

        stop = threading.Event()
        long = Shape(mode="concurrency", duration_s=120, concurrency=1)
        threading.Timer(2.0, stop.set).start()
        started = time.monotonic()
        account = generator.drive(url=server.url, model="mlp", version=1, shape=long, stop=stop)
        assert account.requests == 0 and account.first_error == "stopped"
        assert time.monotonic() - started < 60  # it was killed, not left to run its 120 s
