"""The scaling benchmark's server: ``--backend-config`` reaches it beside ``--workers``."""

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from bench import cost, scaling
from bench.server import serving

pytestmark = pytest.mark.embedded


def test_the_server_runs_with_the_front_ends_and_the_backend_config(tmp_path: Path) -> None:
    cost.write_models(tmp_path)
    flags = scaling.server_args(1, ["onnxruntime,allow_spinning=false"])
    assert flags == ("--workers", "1", "--backend-config", "onnxruntime,allow_spinning=false")
    with serving(tmp_path, extra_args=flags) as addresses:
        client = httpclient.InferenceServerClient(addresses["http"])
        try:
            data = np.ones((1, cost.MODELS["identity"][0]), np.float32)
            tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer("identity", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        finally:
            client.close()


def test_a_misspelt_backend_setting_stops_the_run_before_any_load(tmp_path: Path) -> None:
    cost.write_models(tmp_path)
    flags = scaling.server_args(1, ["onnxruntime,allow_spining=false"])
    refused = pytest.raises(RuntimeError, match="serving exited with 1 before it was ready")
    with refused, serving(tmp_path, extra_args=flags, startup_timeout_s=60):
        pass
