"""``--workers auto``, the ``serve`` default: the count follows the usable cores and the loaded
models' CPU instances, TLS keeps a protocol in-process, and a real server started with it runs
the front-ends it chose and serves through them."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repository import demo_models as dm
from serving import worker_count
from serving.backends.base import InstancePlacement
from serving.cli import add_arguments, settings_from_args
from serving.main import ServingProcess
from serving.settings import settings_from_env
from tests.serving.harness import folder_settings, process_alive

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("cores", "claimed", "expected"),
    [
        (1, 0, 0),
        (2, 0, 0),  # measured: front-ends cost a lone client more than they buy on 2 cores
        (3, 0, 0),
        (4, 0, 1),  # GPU models claim no core: 4 - 1 (the loop) = 3, shared by two protocols
        (4, 4, 0),  # a CPU model claims half the host: 4 - 1 - 2 leaves 1, not one per protocol
        (8, 8, 1),
        (16, 16, 3),  # the 16-core GPU host serving CPU models
        (16, 0, 7),  # the same host with the models on its GPU
        (16, 2, 6),
        (64, 0, 8),  # capped: past 8 the one scheduling process is the bound
    ],
)
def test_auto_shares_the_cores_left_by_the_loop_and_the_models(
    cores: int, claimed: int, expected: int
) -> None:
    assert worker_count.auto_workers(cores, claimed) == expected


def test_a_count_is_auto_or_a_whole_number_of_zero_or_more() -> None:
    assert worker_count.parse("auto") == worker_count.parse(" AUTO ") == "auto"
    assert worker_count.parse("0") == 0 and worker_count.parse("3") == 3
    for bad in ("-1", "two", "1.5", ""):
        with pytest.raises(ValueError):
            worker_count.parse(bad)


def test_serve_defaults_to_auto_and_a_count_or_a_variable_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = settings_from_env({})
    assert default.grpc_workers == default.http_workers == worker_count.AUTO
    both = settings_from_env({"SERVING_WORKERS": "2"})
    assert (both.grpc_workers, both.http_workers) == (2, 2)
    one = settings_from_env({"SERVING_WORKERS": "0", "SERVING_GRPC_WORKERS": "auto"})
    assert (one.grpc_workers, one.http_workers) == (worker_count.AUTO, 0)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = settings_from_args(
        vars(parser.parse_args(["--workers", "auto", "--http-workers", "1"]))
    )
    assert (flags.grpc_workers, flags.http_workers) == (worker_count.AUTO, 1)
    with pytest.raises(SystemExit):
        parser.parse_args(["--workers", "-2"])
    # A flag's "auto" wins over a variable's count, and over --workers, as a flag's count would.
    monkeypatch.setenv("SERVING_GRPC_WORKERS", "2")
    flags = settings_from_args(
        vars(parser.parse_args(["--grpc-workers", "auto", "--workers", "3"]))
    )
    assert (flags.grpc_workers, flags.http_workers) == (worker_count.AUTO, 3)


class _Instance:
    def __init__(self, kind: str, threads: int) -> None:
        self.placement = InstancePlacement(
            name="m_0", kind=kind, device_id=0, intra_op_threads=threads
        )


def test_cpu_instances_claim_their_threads_and_gpu_instances_none() -> None:
    instances = [_Instance("KIND_CPU", 4), _Instance("KIND_CPU", 2), _Instance("KIND_GPU", 16)]
    assert worker_count.model_cores(instances) == 6  # type: ignore[arg-type]


def test_resolve_keeps_a_protocol_served_over_tls_in_process(tmp_path: Path) -> None:
    auto = worker_count.AUTO
    settings = folder_settings(tmp_path, cpu_count=16, grpc_workers=auto, http_workers=auto)
    resolved, why = worker_count.resolve(settings, [])
    assert (resolved.grpc_workers, resolved.http_workers) == (7, 7)
    assert "7 gRPC, 7 HTTP; 16 usable cores, 0 claimed" in why
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    over_tls = folder_settings(tmp_path, cpu_count=16, grpc_workers=auto, http_workers=auto,
                               grpc_use_ssl=True, grpc_server_cert=cert, grpc_server_key=key,
                               http_ssl_cert=cert, http_ssl_key=key)  # fmt: skip
    resolved, _ = worker_count.resolve(over_tls, [])
    assert (resolved.grpc_workers, resolved.http_workers) == (0, 0)
    explicit = folder_settings(tmp_path, cpu_count=16, grpc_workers=2, http_workers=0)
    assert worker_count.resolve(explicit, []) == (explicit, "")


def test_a_server_on_auto_runs_the_frontends_its_cores_call_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Five usable cores and the identity model's two CPU instances (the auto-completed group,
    as Triton's) of one thread each: 5 - 1 (loop) - 2 (model) = 2 spare, so one front-end per
    protocol; both protocols answer through them."""
    model_dir = dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + (
        'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'))  # fmt: skip
    auto = worker_count.AUTO
    settings = folder_settings(tmp_path, cpu_count=5, grpc_workers=auto, http_workers=auto)
    caplog.set_level(logging.INFO, logger="serving")
    process = ServingProcess(settings).start()
    try:
        grpc_pool, http_pool = process.ports.grpc_frontends, process.ports.http_frontends
        assert grpc_pool is not None and http_pool is not None
        running = [*grpc_pool.frontends, *http_pool.frontends]
        assert len(running) == 2 and all(process_alive(f.process.pid) for f in running)
        assert "1 gRPC, 1 HTTP; 5 usable cores, 2 claimed" in caplog.text
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        http_input = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        http_input.set_data_from_numpy(x)
        answer = httpclient.InferenceServerClient(process.http_url).infer("identity", [http_input])
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), x)
        grpc_input = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        grpc_input.set_data_from_numpy(x)
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            np.testing.assert_array_equal(
                client.infer("identity", [grpc_input]).as_numpy("OUTPUT0"), x
            )
    finally:
        process.stop()


def test_a_server_on_auto_with_two_cores_serves_in_process(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    auto = worker_count.AUTO
    process = ServingProcess(
        folder_settings(tmp_path, cpu_count=2, grpc_workers=auto, http_workers=auto)
    ).start()
    try:
        assert process.ports.grpc_frontends is None and process.ports.http_frontends is None
        assert httpclient.InferenceServerClient(process.http_url).is_server_ready()
    finally:
        process.stop()
