"""Raw in-process ONNX Runtime on the GPU: what Portico's served numbers are divided by.

One thread calls ``session.run`` with host (numpy) inputs, as Portico's instances do, so the
comparison is the serving stack's cost, not a different way of feeding the device.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"


@dataclasses.dataclass(frozen=True)
class RawPoint:
    provider: str
    batch_size: int
    inferences_per_s: float
    p99_ms: float


def session(model: Path, provider: str, cache_dir: Path) -> object:
    import onnxruntime as ort

    options: dict[str, str] = {"device_id": "0"}
    if provider == TENSORRT:
        options |= {
            "trt_fp16_enable": "False",
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": str(cache_dir),
            "trt_timing_cache_enable": "True",
            "trt_timing_cache_path": str(cache_dir),
        }
    providers = [(provider, options)] + (
        [(CUDA, {"device_id": "0"})] if provider == TENSORRT else []
    )
    made = ort.InferenceSession(str(model), providers=providers)
    if made.get_providers()[0] != provider:
        raise RuntimeError(f"{provider} did not take the model: {made.get_providers()}")
    return made


def measure(model: Path, provider: str, batch_sizes: list[int], seconds: float) -> list[RawPoint]:
    with tempfile.TemporaryDirectory(prefix="portico-bench-trt-") as cache:
        run = session(model, provider, Path(cache))
        name = run.get_inputs()[0].name  # type: ignore[attr-defined]
        dims = [d for d in run.get_inputs()[0].shape[1:]]  # type: ignore[attr-defined]
        points = []
        for batch in batch_sizes:
            feed = {name: np.random.default_rng(0).random((batch, *dims), dtype=np.float32)}
            for _ in range(10):
                run.run(None, feed)  # type: ignore[attr-defined]
            latencies = []
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                run.run(None, feed)  # type: ignore[attr-defined]
                latencies.append(time.perf_counter() - start)
            points.append(
                RawPoint(
                    provider,
                    batch,
                    batch * len(latencies) / sum(latencies),
                    float(np.percentile(latencies, 99)) * 1e3,
                )
            )
        return points
