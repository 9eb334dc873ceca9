"""Raw in-process ONNX Runtime on the same model and cores: what served numbers are divided by."""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


@dataclasses.dataclass(frozen=True)
class RawResult:
    batch_size: int
    inferences_per_s: float
    p50_us: float


def measure(
    model_path: Path, *, batch_size: int, seconds: float = 3.0, threads: int = 0
) -> RawResult:
    """Run ``batch_size`` rows per call in a loop for ``seconds``; one thread calling."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    model_input = session.get_inputs()[0]
    feature_dims = [d if isinstance(d, int) else 1 for d in model_input.shape[1:]]
    dtype = np.float32 if "float" in model_input.type else np.int32
    batch = np.random.default_rng(0).random((batch_size, *feature_dims)).astype(dtype)
    feed = {model_input.name: batch}
    for _ in range(20):
        session.run(None, feed)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        session.run(None, feed)
        latencies.append(time.perf_counter() - start)
    total = sum(latencies)
    return RawResult(
        batch_size=batch_size,
        inferences_per_s=len(latencies) * batch_size / total,
        p50_us=statistics.median(latencies) * 1e6,
    )
