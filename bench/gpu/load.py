"""A closed-loop load generator: ``concurrency`` clients, each sending batch-1 gRPC requests back
to back for a fixed time; throughput and latency percentiles from every answered request.

Clients are spread over processes (one asyncio loop each) so that one Python loop never becomes
the bottleneck at high concurrency.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class LoadPoint:
    concurrency: int
    inferences_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def run(
    url: str, model: str, shape: tuple[int, ...], concurrency: int, seconds: float, processes: int
) -> LoadPoint:
    """Drive ``model`` at ``concurrency`` for ``seconds`` (after a one-second warm-up)."""
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        parts = pool.starmap(_process, [(url, model, shape, n, seconds) for n in shares])
    latencies = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    errors = sum(p[1] for p in parts)
    if latencies.size == 0:
        return LoadPoint(concurrency, 0.0, 0.0, 0.0, errors)
    return LoadPoint(
        concurrency=concurrency,
        inferences_per_s=latencies.size / seconds,
        p50_ms=float(np.percentile(latencies, 50)) * 1e3,
        p99_ms=float(np.percentile(latencies, 99)) * 1e3,
        errors=errors,
    )


def _process(
    url: str, model: str, shape: tuple[int, ...], clients: int, seconds: float
) -> tuple[np.ndarray, int]:
    return asyncio.run(_clients(url, model, shape, clients, seconds))


async def _clients(
    url: str, model: str, shape: tuple[int, ...], clients: int, seconds: float
) -> tuple[np.ndarray, int]:
    import tritonclient.grpc.aio as grpcclient

    client = grpcclient.InferenceServerClient(url)
    data = np.random.default_rng(0).random((1, *shape), dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    start = time.perf_counter()
    measure_from, stop_at = start + 1.0, start + 1.0 + seconds
    latencies: list[float] = []
    errors = 0

    async def one_client() -> None:
        nonlocal errors
        while (now := time.perf_counter()) < stop_at:
            try:
                await client.infer(model, [tensor])
            except Exception:  # noqa: BLE001 - counted; the run goes on
                errors += 1
                continue
            if now >= measure_from:
                latencies.append(time.perf_counter() - now)

    try:
        await asyncio.gather(*(one_client() for _ in range(clients)))
    finally:
        await client.close()
    return np.asarray(latencies), errors
