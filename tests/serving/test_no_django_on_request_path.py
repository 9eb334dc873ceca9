"""The serving request path imports no Django, Celery or Channels (STYLE.md boundary 2).

A fresh interpreter serves a folder repository, answers HTTP and gRPC requests (load, infer,
metadata, statistics, index), and then reports which framework modules it ever imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repository import demo_models as dm

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serving.main import ServingProcess
from serving.settings import ServingSettings

settings = ServingSettings(model_repository=sys.argv[1], host="127.0.0.1", http_port=0,
                           grpc_port=0, metrics_port=0, model_control_mode="explicit",
                           load_models=("*",))
with ServingProcess(settings) as server:
    x = np.ones((1, 4), dtype=np.float32)
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(x)
    assert (http.infer("identity", [tensor]).as_numpy("OUTPUT0") == x).all()
    http.get_model_metadata("identity"); http.get_model_config("identity")
    http.get_inference_statistics(); http.get_model_repository_index()
    http.load_model("identity"); http.is_server_ready()
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(x)
    assert (grpc.infer("identity", [tensor]).as_numpy("OUTPUT0") == x).all()
    grpc.close()
frameworks = ("django", "celery", "channels", "kombu", "rest_framework")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in frameworks)))
"""


def test_serving_a_folder_imports_no_django_celery_or_channels(tmp_path: Path) -> None:
    dm.write_onnx_identity(tmp_path, "identity")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
